"""FCFS with EASY backfilling: reservations, backfill rules, no preemption, a whole run."""

from __future__ import annotations

import pytest

from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.policies import build_policy
from pcs_ray.policies.base import validate_allocation
from pcs_ray.policies.easy import EasyBackfill
from pcs_ray.sim.run import simulate
from pcs_ray.jobs.state import Snapshot
from builders import job_state


def job(jid, n, runtime, **state):
    """A job asking for ``n`` GPUs whose run time on them is ``runtime``: rigid unless ``min_gpus`` says otherwise."""
    return job_state(jid, max_gpus=n, runtime=runtime, rigid="min_gpus" not in state, **state)


CASES = [
    # 8 GPUs; job 1 runs on 6 until t=100; the head (2) needs 4 of the 2 free: reserved at t=100.
    pytest.param([job(1, 6, 100, alloc=6, start=0), job(2, 4, 50), job(3, 2, 80)], 8, 0.0,
                 {1: 6, 3: 2}, id="short-job-backfills-before-shadow"),
    pytest.param([job(1, 6, 100, alloc=6, start=0), job(2, 8, 50), job(3, 2, 150)], 8, 0.0,
                 {1: 6}, id="long-job-would-delay-head"),
    # Head needs 4 at t=100 when 8 are free: 4 extra GPUs, so a long 2-GPU job may take them.
    pytest.param([job(1, 6, 100, alloc=6, start=0), job(2, 4, 50), job(3, 2, 500)], 8, 0.0,
                 {1: 6, 3: 2}, id="long-job-on-extra-gpus"),
    # Extra GPUs are used up by the first long backfill: the second long one waits.
    pytest.param([job(1, 5, 100, alloc=5, start=0), job(2, 6, 50), job(3, 1, 500), job(4, 1, 500), job(5, 1, 10)],
                 8, 0.0, {1: 5, 3: 1, 4: 1, 5: 1}, id="extra-gpus-counted"),
    pytest.param([job(1, 5, 100, alloc=5, start=0), job(2, 7, 50), job(3, 1, 500), job(4, 1, 500), job(5, 1, 10)],
                 8, 0.0, {1: 5, 3: 1, 5: 1}, id="extra-gpus-run-out"),
    # FCFS start in order while jobs fit; the rest wait behind the first that does not.
    pytest.param([job(1, 2, 10), job(2, 3, 10), job(3, 4, 10), job(4, 1, 5)], 8, 0.0,
                 {1: 2, 2: 3, 4: 1}, id="fcfs-then-backfill"),
    # A running job past its request is taken to end now: the head's shadow is now, nothing long backfills.
    pytest.param([job(1, 6, 100, alloc=6, start=0), job(2, 8, 50), job(3, 2, 1)], 8, 500.0,
                 {1: 6}, id="overrun-shadow-is-now"),
    # Running jobs keep their GPUs even if an earlier arrival waits (no preemption).
    pytest.param([job(1, 8, 100), job(2, 4, 100, alloc=4, start=0)], 8, 10.0, {2: 4}, id="no-preemption"),
    # An elastic job asks for all it can use.
    pytest.param([job(1, 4, 100, min_gpus=1)], 8, 0.0, {1: 4}, id="elastic-asks-max"),
    pytest.param([job(1, 16, 100, min_gpus=1)], 8, 0.0, {1: 8}, id="capped-at-cluster"),
]


@pytest.mark.parametrize("jobs,capacity,now,expected", CASES)
def test_easy_decisions(jobs, capacity, now, expected):
    snap = Snapshot(now, capacity, tuple(jobs))
    policy = build_policy("fcfs-easy")
    alloc = policy.allocate(snap)
    validate_allocation(snap, alloc, policy.name)
    assert {k: v for k, v in alloc.items() if v} == expected


class LastFirst(EasyBackfill):
    """A reuse: latest arrival first, and job 3 is never launched."""

    name = "test-lifo-easy"

    def queue(self, snap, waiting):
        return list(reversed(waiting))

    def may_start(self, snap, job, n, free):
        return job.spec.job_id != 3


def test_subclass_changes_order_and_start():
    jobs = (job(1, 4, 10), job(2, 4, 10), job(3, 2, 10), job(4, 2, 10))
    alloc = LastFirst().allocate(Snapshot(0.0, 8, jobs))
    assert alloc == {4: 2, 2: 4}  # 4 first, 3 refused, 2 fits, 1 is the blocked head


def test_run_is_non_preemptive_and_backfills():
    """A whole run: every job runs once, uninterrupted, on its full request; a short job backfills
    ahead of a wide one without delaying it past its reservation."""
    specs = [
        JobSpec(1, 0.0, 600.0, 6, linear_speedup(6), min_gpus=6),   # 100 s on 6
        JobSpec(2, 1.0, 800.0, 8, linear_speedup(8), min_gpus=8),   # waits for job 1: reserved at 100
        JobSpec(3, 2.0, 100.0, 2, linear_speedup(2), min_gpus=2),   # 50 s on 2: backfills
        JobSpec(4, 3.0, 1000.0, 2, linear_speedup(2), min_gpus=2),  # 500 s: would delay job 2, waits
    ]
    result = simulate(specs, 8, build_policy("fcfs-easy"), predict=False)
    rec = {r.job_id: r for r in result.records}
    assert all(r.preemptions == 0 for r in result.records)
    assert rec[3].start == 2.0 and rec[3].finish == 52.0
    assert rec[2].start == 100.0 and rec[2].finish == 200.0
    assert rec[4].start == 200.0
