"""The engine checks every allocation a policy gives by what changed since the last one: it must reject
exactly what the whole check (``validate_allocation``) rejects, round after round, as jobs come and go."""

from __future__ import annotations

import random

import pytest

from pcs_ray.jobs.state import Snapshot
from pcs_ray.policies.base import AllocationError, SchedulingPolicy, validate_allocation
from pcs_ray.sim.engine import Engine
from builders import job_spec


class Scripted(SchedulingPolicy):
    """Answers each round with the next allocation it was given."""

    name = "scripted"
    reads_progress = False

    def __init__(self) -> None:
        self.next: dict[int, int] = {}

    def allocate(self, snap: Snapshot) -> dict[int, int]:
        return dict(self.next)


def engine_with(sizes: dict[int, tuple[int, int]], capacity: int) -> tuple[Engine, Scripted]:
    """An engine of ``capacity`` GPUs whose jobs have ``job id -> (min_gpus, max_gpus)``."""
    policy = Scripted()
    engine = Engine(capacity, policy)
    for jid, (lo, hi) in sizes.items():
        engine.admit(job_spec(jid, min_gpus=lo, max_gpus=hi))
    return engine, policy


def round_of(engine: Engine, policy: Scripted, alloc: dict[int, int]) -> None:
    policy.next = alloc
    engine.reallocate()


def test_a_finished_job_allocated_the_same_count_again_is_unknown():
    engine, policy = engine_with({1: (1, 2), 2: (1, 2)}, 4)
    round_of(engine, policy, {1: 2, 2: 2})
    engine.remove([engine.job(1)])
    with pytest.raises(AllocationError, match="unknown job 1"):
        round_of(engine, policy, {1: 2, 2: 2})  # job 1's count is unchanged, but it is gone


def test_a_changed_count_outside_the_demand_and_a_cluster_overfilled_by_one_change_are_rejected():
    engine, policy = engine_with({1: (1, 2), 2: (2, 3), 3: (1, 4)}, 6)
    round_of(engine, policy, {1: 2, 2: 2})
    with pytest.raises(AllocationError, match="job 2 got 4 GPUs, demand is 2..3"):
        round_of(engine, policy, {1: 2, 2: 4})
    with pytest.raises(AllocationError, match="allocated 7 GPUs on a 6-GPU cluster"):
        round_of(engine, policy, {1: 2, 2: 2, 3: 3})  # only job 3 changed; the total counts every job


def test_a_job_given_a_new_size_is_checked_against_it():
    engine, policy = engine_with({1: (1, 4)}, 8)
    round_of(engine, policy, {1: 4})
    engine.readmit(job_spec(1, min_gpus=1, max_gpus=2))
    with pytest.raises(AllocationError, match="job 1 got 4 GPUs, demand is 1..2"):
        round_of(engine, policy, {1: 4})


def random_alloc(rng: random.Random, ids: list[int], engine: Engine, capacity: int) -> dict[int, int]:
    """Mostly what a policy could give, sometimes not: an unknown or finished job, a count out of range, too many."""
    alloc = dict(engine.prev_alloc) if rng.random() < 0.5 else {}
    for jid in rng.sample(ids, rng.randint(0, len(ids))):
        job = engine.job(jid)
        if job is None:
            if rng.random() < 0.1:
                alloc[jid] = rng.randint(0, 3)
            continue
        roll = rng.random()
        if roll < 0.15:
            alloc.pop(jid, None)
        elif roll < 0.2:
            alloc[jid] = rng.choice([-1, 0, job.spec.max_gpus + 1, max(job.spec.min_gpus - 1, 0)])
        else:
            alloc[jid] = rng.randint(job.spec.min_gpus, job.spec.max_gpus)
    while sum(alloc.values()) > capacity and rng.random() < 0.8:
        alloc.pop(next(iter(alloc)))
    return alloc


@pytest.mark.parametrize("seed", range(6))
def test_the_engine_rejects_what_the_whole_check_rejects(seed):
    rng = random.Random(seed)
    rejected = accepted = 0
    for _ in range(60):
        capacity = rng.randint(2, 12)
        ids = list(range(rng.randint(1, 8)))
        sizes = {}
        for jid in ids:
            hi = rng.randint(1, 4)
            sizes[jid] = (rng.randint(1, hi), hi)
        engine, policy = engine_with(sizes, capacity)
        for _ in range(12):
            alloc = random_alloc(rng, ids + [99], engine, capacity)
            try:
                validate_allocation(engine.snapshot(), alloc, policy.name)
                expected = None
            except AllocationError as err:
                expected = str(err)
            policy.next = alloc
            if expected is None:
                engine.reallocate()
                accepted += 1
                assert {j: n for j, n in alloc.items() if n} == {j: job.alloc for j, job in engine.active.items() if job.alloc}
            else:
                with pytest.raises(AllocationError):
                    engine.reallocate()
                rejected += 1
                break
            running = list(engine.running.values())
            if running and rng.random() < 0.4:
                engine.remove([rng.choice(running)])
            if rng.random() < 0.2:
                jid = rng.choice(ids)
                if engine.job(jid) is not None:
                    hi = rng.randint(1, 4)
                    engine.readmit(job_spec(jid, min_gpus=rng.randint(1, hi), max_gpus=hi))
    assert rejected > 10 and accepted > 100  # both sides of the check were exercised
