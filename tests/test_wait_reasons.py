"""Why a job waits: every policy gives each job without GPUs one typed reason, and the rules that hold a
job back say so in their own code."""

from __future__ import annotations

from functools import partial

import pytest

from pcs_ray.policies import build_policy, policy_names
from pcs_ray.policies.reasons import WaitCode
from pcs_ray.policies.rush import RushPolicy
from pcs_ray.sim.engine import Engine
from pcs_ray.jobs.state import JobState, Snapshot
from builders import Clock, coordinator, job_spec

#: A rigid job of four GPUs with a thousand GPU-seconds of work.
spec = partial(job_spec, max_gpus=4, rigid=True, service=1000.0)


def decided(policy, specs, capacity=8, now=10.0):
    engine = Engine(capacity, policy)
    for s in specs:
        engine.admit(s)
    engine.set_clock(now)
    engine.reallocate()
    snap = engine.snapshot()
    return snap, engine.prev_alloc, policy.why_waiting(snap, engine.prev_alloc)


@pytest.mark.parametrize("name", policy_names())
def test_every_job_without_gpus_has_one_reason(name):
    specs = [spec(k, max_gpus=1 + k % 4, service=500.0 * (1 + k), submit=k) for k in range(8)]
    snap, alloc, why = decided(build_policy(name), specs)
    waiting = {j.spec.job_id for j in snap.jobs if not alloc.get(j.spec.job_id)}
    assert waiting and set(why) == waiting
    assert all(isinstance(r.code, WaitCode) and r.text and "\n" not in r.text for r in why.values())


def test_wfq_gives_the_place_in_the_queue_and_its_share():
    _, _, why = decided(build_policy("pcs", config={"class_thresholds": ["inf"], "class_rates": [1]}),
                        [spec(k, submit=k) for k in range(4)])
    assert [why[2].code, why[3].code] == [WaitCode.QUEUE, WaitCode.QUEUE]
    assert why[2].text.startswith("waiting #1 in WFQ queue 0") and why[3].text.startswith("waiting #2 in WFQ queue 0")
    assert "holds 8 of 8 GPUs" in why[3].text


def test_a_tenant_at_its_quota_and_young_runs_are_named():
    tenants = {"tenants": {"a": {"quota": 4}, "b": {"quota": 4}}, "min_runtime_s": 600, "reclaim_young_runs": False}
    policy = build_policy("tenants", inner="fifo", tenants=tenants)
    young = JobState.new(spec(0, max_gpus=8, rigid=False, tenant="a"))
    young.alloc, young.since = 8, 100.0
    jobs = [young, JobState.new(spec(1, tenant="b", submit=1)), JobState.new(spec(2, tenant="a", submit=2))]
    snap = Snapshot(200.0, 8, jobs)
    alloc = policy.allocate(snap)
    why = policy.why_waiting(snap, alloc)
    assert alloc == {0: 8}
    assert why[2].code == WaitCode.TENANT_QUOTA and "tenant a holds 8 GPUs, its quota is 4" in why[2].text
    assert why[1].code == WaitCode.MIN_RUNTIME and "job 0 for 500 s more" in why[1].text


def test_the_power_budget_is_named():
    policy = build_policy("vu-fcfs-b", power={"A": 250.0}, tdp_w=300.0, budget_w=1300.0)
    _, alloc, why = decided(policy, [spec(0), spec(1, submit=1)])
    assert alloc == {0: 4} and why[1].code == WaitCode.POWER and "1300 W power budget" in why[1].text


class _AlwaysSlow:
    def would_be_slow(self, job, n, free, now):
        return True


def test_a_rush_skip_is_named():
    _, alloc, why = decided(RushPolicy(skip_threshold=3, predictor=_AlwaysSlow()), [spec(0)])
    assert alloc == {} and why[0].code == WaitCode.RUSH_SKIP and "skipped 1 of 3 times" in why[0].text


def test_status_shows_every_queued_jobs_reason(tmp_path):
    import io

    from rich.console import Console

    from pcs_ray.commands.format import status_table

    core = coordinator(per_node=2, policy="pcs-bal", checkpoint_root=str(tmp_path), clock=Clock())
    for _ in range(3):
        core.submit({"workload": "tiny", "steps": 100, "gpus": 4, "step_time": 0.1, "tenant": "vision",
                     "user": "alice"})
    status = core.status()
    queued = [j for j in status["jobs"] if j["state"] == "queued"]
    assert len(queued) == 2 and all(j["waiting"]["code"] == "queue" for j in queued)
    assert all(j["waiting"] is None for j in status["jobs"] if j["state"] != "queued")
    out = io.StringIO()
    Console(file=out, width=400).print(status_table(status))
    assert "why waiting" in out.getvalue() and "queue: waiting #2 in WFQ queue" in out.getvalue()
    assert core.prediction(queued[0]["id"])["waiting"]["code"] == "queue"
    assert core.prediction(next(j["id"] for j in status["jobs"] if j["state"] != "queued"))["waiting"] is None


def test_a_job_waiting_for_a_preempted_run_names_it_and_so_does_the_stopping_run(tmp_path):
    """Between a preemption's decision and its runner's acknowledgement, the job that takes the GPUs is
    queued with GPUs planned: it waits for the hand-over (not for the policy), and the run stops for it."""
    import io

    from rich.console import Console

    from pcs_ray.commands.format import status_table

    now = Clock()
    core = coordinator(policy="srsf", checkpoint_root=str(tmp_path), clock=now)
    long_id, _ = core.submit({"workload": "tiny", "steps": 10_000, "gpus": 4, "step_time": 0.1, "tenant": "vision"})
    now.t += 10
    short_id, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 4, "step_time": 0.1, "tenant": "speech"})
    status = core.status()
    why = {j["id"]: j["waiting"] for j in status["jobs"]}
    assert why[short_id]["code"] == WaitCode.HAND_OVER and f"waiting for job {long_id} to stop" in why[short_id]["text"]
    assert why[long_id]["code"] == WaitCode.STOPPING and why[long_id]["text"].startswith("preempt:")
    assert f"job {short_id} takes its GPUs" in why[long_id]["text"]
    assert core.prediction(short_id)["waiting"]["code"] == WaitCode.HAND_OVER
    wide = io.StringIO()
    Console(file=wide, width=160).print(status_table(status))
    assert "tenant" in wide.getvalue() and "speech" in wide.getvalue() and "bound" in wide.getvalue()
    out = io.StringIO()
    Console(file=out, width=80).print(status_table(status))  # a terminal's width: columns go, reasons stay whole
    text = out.getvalue()
    assert "bound" not in text and "…" not in text
    assert f"job {short_id} waits: hand-over: planned on" in text and f"job {long_id} waits: stopping: preempt" in text
    now.t += 1
    core.run_ended(long_id, 1, "preempted", step=120, step_time=0.1)
    why = {j["id"]: j["waiting"] for j in core.status()["jobs"]}
    assert why[short_id] is None and why[long_id]["code"] in (WaitCode.GPUS, WaitCode.QUEUE)


@pytest.mark.parametrize("name", ["pcs", "pcs-bal", "fifo", "srsf"])
def test_one_jobs_reason_is_its_entry_among_every_jobs(name):
    """``why_job_waits`` reads what one job's reason needs (WFQ: the jobs ahead of it, the allocation): the same
    reason ``why_waiting`` gives it among all, for every job with and without GPUs."""
    specs = [spec(k, max_gpus=1 + k % 4, rigid=k % 3 == 0, service=300.0 * (1 + k % 7) * (1 + k), submit=k)
             for k in range(40)]
    policy = build_policy(name)
    snap, alloc, why = decided(policy, specs, capacity=16)
    assert len(why) > 10
    for job in snap.jobs:
        assert policy.why_job_waits(snap, alloc, job) == why.get(job.spec.job_id)


@pytest.mark.parametrize("name, codes", [("pcs-bal", {WaitCode.QUEUE}),
                                         ("srsf", {WaitCode.GPUS, WaitCode.HAND_OVER, WaitCode.STOPPING})])
def test_a_jobs_reason_alone_is_its_entry_among_every_jobs(tmp_path, name, codes):
    """The coordinator's reason for one job (what ``prediction`` shows) is its entry in ``waiting()``: queued
    behind others, planned on GPUs still being handed over, or stopping."""
    now = Clock()
    core = coordinator(gpus=8, policy=name, checkpoint_root=str(tmp_path), clock=now)
    for k in range(12):
        now.t += 1
        core.submit({"workload": "tiny", "steps": 100 * (1 + k % 5) * 10 ** (k % 3), "gpus": 1 + k % 4,
                     "step_time": 0.1})
    everyone = core.waiting()
    assert {w["code"] for w in everyone.values()} == codes
    for jid in core.jobs:
        assert core.waiting_for(jid) == everyone.get(jid)
