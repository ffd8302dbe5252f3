"""A submission's bound, kept per queue as jobs change, is the policy's walk of the whole queue."""

from __future__ import annotations

import random

import pytest

from builders import clocked, random_submission
from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator.config import coordinator_policy


def walked(core, jid: int) -> float | None:
    engine = core.model.engine
    return core.model.policy.completion_bound(engine.snapshot(), engine.job(jid))


@pytest.mark.parametrize("policy", ["pcs-bal", "pcs-jct"])
def test_the_tail_bound_is_the_walk_through_starts_ends_and_preemptions(policy):
    core, clock = clocked(cluster=ClusterSpec.homogeneous(16, 4), policy=policy, workloads=None,
                          policies=coordinator_policy)
    assert core.model.tail_bounds is not None
    rng = random.Random(11)
    checked = 0
    for k in range(160):
        clock.t += rng.uniform(0.5, 20.0)
        spec = random_submission(rng)
        if rng.random() < 0.5:
            del spec["step_time"]  # estimated from what runs of its shape measured: it moves as they report
        jid, _ = core.submit(spec)
        if jid in core.model and not core.model.engine.job(jid).alloc:
            fast, walk = core.model.bound(jid), walked(core, jid)
            assert (fast is None) == (walk is None)
            if walk is not None:
                assert fast == pytest.approx(walk, rel=1e-9)
                checked += 1
        running = [j for j in core.active.values() if j.state.value == "running"]
        for job in running[:3]:
            clock.t += 0.5
            core.progress(job.job_id, job.steps + 5, rng.uniform(0.05, 0.5))
        if running and rng.random() < 0.4:  # a run ends: finished, or stopped and queued again
            job = rng.choice(running)
            status = rng.choice(["finished", "preempted", "failed"])
            core.run_ended(job.job_id, job.attempt, status, step=job.spec.steps if status == "finished" else 10,
                           step_time=0.1)
        if k % 40 == 39:
            core.set_policy("pcs-jct" if policy == "pcs-bal" else "pcs-bal")
    assert checked >= 60


def test_a_queue_whose_guarantee_cannot_serve_a_job_has_no_tail_bound():
    core, clock = clocked(cluster=ClusterSpec.homogeneous(4, 4), policy="pcs-bal", workloads=None)
    for _ in range(6):
        clock.t += 1.0
        core.submit({"workload": "tiny", "steps": 5000, "gpus": 4, "min_gpus": 4, "step_time": 0.2})
    queued = [j for j in core.active if not core.model.engine.job(j).alloc]
    assert queued and all(core.model.bound(j) == walked(core, j) for j in queued)
