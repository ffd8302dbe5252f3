"""Guards without Ray, on an injected clock: an external executor's lease, a job's time limit, a hung run."""

from __future__ import annotations

import time

import pytest

from pcs_ray.cluster import ClusterSpec
from pcs_ray.contract import JobSpecError, JobStatus, StartRun, StopRun
from pcs_ray.coordinator import Coordinator, Journal
from pcs_ray.coordinator.guards import HANG_DUMP_MARGIN_S, RunLimits
from pcs_ray.coordinator.local import LocalCoordinator
from pcs_ray.policies import build_policy


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(journal=None, policy="fifo", gpus=2, clock=None, **limits):
    clock = clock or Clock()
    core = Coordinator(ClusterSpec.homogeneous(gpus, gpus), build_policy(policy),
                       journal if journal is not None else Journal(":memory:"), checkpoint_root="/tmp/ckpt",
                       clock=clock, workloads=("tiny",), limits=RunLimits(**limits))
    return core, clock


def sweep(trials=2, iters=50):
    return {"workload": "tune:tiny_cnn", "steps": trials * iters, "gpus": trials, "min_gpus": 1, "step_time": 0.1,
            "executor": "external"}


def job(gpus=1, steps=100, **kw):
    return {"workload": "tiny", "steps": steps, "gpus": gpus, "step_time": 0.1, **kw}


def view(core, jid):
    return next(j for j in core.status()["jobs"] if j["id"] == jid)


def started(actions):
    return [a.job_id for a in actions if isinstance(a, StartRun)]


# -- an external executor's lease ---------------------------------------------------------------------
def test_a_sweep_whose_driver_died_loses_its_gpus_and_the_next_sweep_gets_them():
    core, clock = make(lease_s=30)
    dead, _ = core.submit(sweep())
    assert core.assignment(dead)["state"] == "running" and core.assignment(dead)["lease_s"] == 30
    nxt, _ = core.submit(sweep())
    assert core.assignment(nxt)["state"] == "queued"
    clock.t += 20
    core.renew_lease(nxt)  # the second driver lives; the first never spoke after its submission
    assert core.tick() == [] and core.jobs[dead].state == JobStatus.RUNNING
    clock.t += 11  # 31 s of silence from the first
    core.tick()
    gone = view(core, dead)
    assert gone["state"] == "failed" and gone["gpus"] == []
    assert gone["end_reason"]["code"] == "driver-lost" and "lease" in gone["end_reason"]["text"]
    assert "\n" not in gone["end_reason"]["text"]
    assert core.assignment(nxt)["state"] == "running" and len(core.assignment(nxt)["gpus"]) == 2


def test_renewals_keep_the_gpus_for_as_long_as_the_driver_lives():
    core, clock = make(lease_s=30)
    sid, _ = core.submit(sweep())
    for _ in range(10):  # 250 s, a call every 25 s: renew, progress, demand, renew, ...
        clock.t += 25
        core.renew_lease(sid)
        core.tick()
    assert core.jobs[sid].state == JobStatus.RUNNING
    host = LocalCoordinator(core)
    clock.t += 25
    host.report_progress(sid, 10, 0.1)  # a progress report renews too
    clock.t += 25
    host.set_demand(sid, gpus=1)  # ... and a change of demand
    clock.t += 25
    assert core.tick() == [] and core.jobs[sid].state.holds_gpus


def test_a_hand_over_to_a_dead_driver_completes_when_its_lease_lapses():
    core, clock = make(policy="fair", lease_s=30)
    sid, _ = core.submit(sweep())
    clock.t += 5
    core.renew_lease(sid)
    other, actions = core.submit(job())
    assert started(actions) == [] and core.assignment(sid)["state"] == "stopping"  # fair: the sweep must give one up
    assert core.waiting()[other]["code"] == "hand-over"
    clock.t += 29  # the driver died after its last renewal: nobody acknowledges the stop
    assert started(core.tick()) == []
    clock.t += 2
    actions = core.tick()
    assert started(actions) == [other]  # at once, not after a stop that nobody will acknowledge
    assert core.jobs[sid].state == JobStatus.FAILED and core.jobs[sid].end_code == "driver-lost"


def test_a_cancelled_sweep_whose_driver_died_ends_cancelled_and_a_live_one_is_told_to_keep_nothing():
    core, clock = make(lease_s=30)
    sid, _ = core.submit(sweep())
    core.cancel(sid)
    a = core.assignment(sid)
    assert a["state"] == "stopping" and a["target"] == []  # a live driver stops every trial, then acknowledges
    clock.t += 31
    core.tick()
    assert core.jobs[sid].state == JobStatus.CANCELLED and view(core, sid)["end_reason"]["code"] == "driver-lost"


def test_a_lapsed_lease_is_journaled_and_a_restart_gives_live_sweeps_a_whole_lease(tmp_path):
    path = tmp_path / "journal.sqlite"
    core, clock = make(journal=Journal(path), lease_s=30)
    dead, _ = core.submit(sweep(trials=1))
    live, _ = core.submit(sweep(trials=1))
    clock.t += 31
    core.renew_lease(live)
    core.tick()
    assert core.jobs[dead].state == JobStatus.FAILED
    clock.t += 25  # the live driver's last renewal was 25 s ago when the coordinator restarts
    again, _ = make(journal=Journal(path), clock=clock, lease_s=30)
    assert again.jobs[dead].state == JobStatus.FAILED and view(again, dead)["end_reason"]["code"] == "driver-lost"
    clock.t += 20  # 45 s since its last renewal, 20 s since the restart: it has until 30 s after the restart
    again.tick()
    assert not again.jobs[live].done
    clock.t += 11
    again.tick()
    assert again.jobs[live].state == JobStatus.FAILED


def test_the_lease_keeper_renews_while_it_runs_and_the_job_ends_once_it_stops():
    from pcs_ray.executors.tune_lease import LeaseKeeper

    core, _ = make(lease_s=0.6, clock=time.time)
    host = LocalCoordinator(core)
    sid = host.submit(sweep()).id
    keeper = LeaseKeeper(host, sid)
    assert keeper.renew()["lease_s"] == 0.6 and keeper.every_s == pytest.approx(0.2)
    keeper.start()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        with host.lock:
            host.core.tick()
        time.sleep(0.05)
    assert core.jobs[sid].state == JobStatus.RUNNING and keeper.renewals >= 5
    keeper.stop()
    time.sleep(0.9)
    with host.lock:
        host.core.tick()
    assert core.jobs[sid].state == JobStatus.FAILED


# -- a time limit -----------------------------------------------------------------------------------------
def test_a_job_past_its_time_limit_checkpoints_then_ends_timed_out():
    core, clock = make(max_runtime_s=3600, gpus=1)
    jid, actions = core.submit(job(max_runtime_s=100))
    assert started(actions) == [jid]
    clock.t += 60
    core.progress(jid, 40, 0.1)
    other, _ = core.submit(job())  # queued behind it (fifo, one GPU)
    assert core.tick() == []
    clock.t += 40
    actions = core.tick()
    assert actions == [StopRun(jid, 1, "time-limit")]  # asked to checkpoint, as a preemption is
    assert view(core, jid)["end_reason"]["code"] == "time-limit" and core.jobs[jid].state == JobStatus.STOPPING
    clock.t += 3
    actions = core.run_ended(jid, 1, "preempted", step=70)
    done = view(core, jid)
    assert done["state"] == "timed_out" and done["steps"] == 70
    assert "time limit" in done["end_reason"]["text"] and "\n" not in done["error"]
    assert started(actions) == [other]


def test_time_in_the_queue_does_not_count_and_the_operators_default_and_bound_apply():
    core, clock = make(max_runtime_s=50, max_runtime_bound_s=200, gpus=1)
    with pytest.raises(JobSpecError, match="max_runtime_s"):
        core.submit(job(max_runtime_s=500))
    first, _ = core.submit(job())  # the operator's default: 50 s
    second, _ = core.submit(job(max_runtime_s=120))
    clock.t += 50
    core.tick()
    core.run_ended(first, 1, "preempted", step=10)
    assert core.jobs[first].state == JobStatus.TIMED_OUT and core.jobs[second].state == JobStatus.RUNNING
    clock.t += 119  # it waited 50 s in the queue: that is not its time
    assert core.tick() == []
    clock.t += 1
    assert core.tick() == [StopRun(second, 1, "time-limit")]


def test_a_run_that_finishes_while_it_is_being_stopped_for_its_time_finishes():
    core, clock = make(gpus=1)
    jid, _ = core.submit(job(max_runtime_s=10))
    clock.t += 10
    core.tick()
    core.run_ended(jid, 1, "finished", step=100)
    assert core.jobs[jid].state == JobStatus.FINISHED and view(core, jid)["end_reason"] is None


# -- a hang ---------------------------------------------------------------------------------------------
def test_a_run_silent_past_its_report_timeout_is_killed_and_the_job_fails_with_the_reason():
    core, clock = make(report_timeout_s=600, gpus=1)
    jid, _ = core.submit(job(report_timeout_s=60))
    clock.t += 10
    core.progress(jid, 5, 0.1)
    clock.t += 60 + HANG_DUMP_MARGIN_S - 1  # the ranks dump their stacks at 60 s; the kill waits for them
    assert core.tick() == []
    clock.t += 2
    actions = core.tick()
    assert actions == [StopRun(jid, 1, "hang")]
    core.run_ended(jid, 1, "failed", step=0, error="runner rank 0 died (killed or crashed): ActorDiedError")
    done = view(core, jid)
    assert done["state"] == "failed" and done["end_reason"]["code"] == "hang"
    assert "after step 5" in done["error"] and f"pcs-ray logs {jid}" in done["error"]


def test_a_hung_run_is_retried_from_its_checkpoint_under_max_failures_and_a_hang_past_them_fails_the_job(tmp_path):
    """A hang counts as a failure of the job's code, as Ray Train's ``max_failures`` counts a worker's: killed,
    then resumed from its newest checkpoint while its retries last, the reason in its status and its runs."""
    (tmp_path / "loop.py").write_text("def loop(config):\n    pass\n")
    journal = tmp_path / "journal.sqlite"
    core, clock = make(Journal(journal), report_timeout_s=60, gpus=1)
    jid, _ = core.submit({"entrypoint": "loop.py:loop", "working_dir": str(tmp_path), "steps": 100, "gpus": 1,
                          "step_time": 0.1, "max_failures": 1})
    clock.t += 10
    core.progress(jid, 40, 0.1)
    clock.t += 60 + HANG_DUMP_MARGIN_S + 1
    assert core.tick() == [StopRun(jid, 1, "hang")]  # killed (the host kills a run stopped for a hang)
    assert core.jobs[jid].state == JobStatus.STOPPING and view(core, jid)["end_reason"] is None  # not ended
    actions = core.run_ended(jid, 1, "failed", step=30, error="rank 0 died: killed by signal 9 (SIGKILL)")
    assert [(a.job_id, a.request.attempt) for a in actions if isinstance(a, StartRun)] == [(jid, 2)]
    retried = view(core, jid)
    assert (retried["state"], retried["retries"], retried["steps"], retried["lost_steps"]) == ("running", 1, 30, 10)
    assert retried["error"].startswith("hang: its run reported nothing after step 40") and "\n" not in retried["error"]
    assert "retry 1 of max_failures 1" in retried["error"] and f"pcs-ray logs {jid} --attempt 1" in retried["error"]
    first = retried["segments"][0]
    assert first["stopped_for"] == "hang" and first["error"] == retried["error"]
    reopened, _ = make(Journal(journal), report_timeout_s=60, gpus=1, clock=clock)
    assert {k: view(reopened, jid)[k] for k in ("retries", "error", "lost_steps")} == {
        k: retried[k] for k in ("retries", "error", "lost_steps")}  # journaled: a restart keeps the count

    clock.t += 5
    core.progress(jid, 35, 0.1)
    clock.t += 60 + HANG_DUMP_MARGIN_S + 1
    assert core.tick() == [StopRun(jid, 2, "hang")]  # its retries are spent: this one ends it
    core.run_ended(jid, 2, "failed", step=30, error="rank 0 died: killed by signal 9 (SIGKILL)")
    done = view(core, jid)
    assert (done["state"], done["end_reason"]["code"], done["retries"]) == ("failed", "hang", 1)
    assert done["error"].startswith("hang: its run reported nothing after step 35") and "retry" not in done["error"]


def test_a_run_whose_ranks_began_and_never_report_a_step_is_a_hang_and_start_up_is_not_a_silence():
    core, clock = make(report_timeout_s=100, gpus=1)
    jid, _ = core.submit(job())
    clock.t += 1000  # a long start-up (a runtime env's installs): no rank runs the loop yet
    assert core.tick() == []
    core.progress(jid, 0, None)  # the ranks began: not a step, and not a measurement
    assert core.jobs[jid].reported_at is None and core.jobs[jid].steps == 0
    clock.t += 100 + HANG_DUMP_MARGIN_S - 1
    assert core.tick() == []
    clock.t += 2
    assert core.tick() == [StopRun(jid, 1, "hang")]
    assert "no step since its ranks began" in view(core, jid)["end_reason"]["text"]


def test_an_external_job_is_not_taken_for_hung_and_its_report_timeout_is_bounded():
    core, clock = make(report_timeout_s=10, report_timeout_bound_s=100, lease_s=1000)
    with pytest.raises(JobSpecError, match="report_timeout_s"):
        core.submit(job(report_timeout_s=101))
    sid, _ = core.submit(sweep())
    clock.t += 500
    assert core.tick() == [] and core.jobs[sid].state == JobStatus.RUNNING


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="lease_s"):
        RunLimits(lease_s=0)


def test_the_readme_gives_each_settings_default_as_the_code_has_it():
    import re
    from pathlib import Path

    from pcs_ray.commands.limits import LIMITS
    from pcs_ray.coordinator.config import CoordinatorConfig

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for name in LIMITS:
        row = re.search(rf"^\| `{name}` \| ([^|]+) \|", readme, re.M)
        assert row, f"{name} is not in the README's guards table"
        default = CoordinatorConfig.__dataclass_fields__[name].default
        assert row.group(1).strip() == ("none" if default is None else f"{default:.12g}"), name
