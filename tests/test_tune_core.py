"""The coordinator's external-executor jobs (a Ray Tune sweep) without Ray: assignment, acknowledgement, demand."""

from __future__ import annotations

from pcs_ray.coordinator import Journal, StartRun
from builders import clocked


def sweep(trials=6, iters=10, step_time=0.1):
    return {"workload": "tune:tiny_cnn", "steps": trials * iters, "gpus": trials, "min_gpus": 1,
            "step_time": step_time, "executor": "external"}


def test_external_job_gets_gpus_without_a_runner_and_acknowledges_a_preemption():
    core, clock = clocked(policy="fair", gpus=2)
    sid, actions = core.submit(sweep())
    assert actions == []  # nothing to launch: the sweep polls its assignment
    a = core.assignment(sid)
    assert a["state"] == "running" and a["attempt"] == 1 and a["gpus"] == ["node0_gpu0", "node0_gpu1"]
    assert core.prediction(sid)["predicted_completion"] is not None

    clock.t += 5
    core.progress(sid, 4, 0.05)
    other, actions = core.submit({"workload": "tiny", "steps": 50, "gpus": 1, "step_time": 0.1})
    a = core.assignment(sid)
    assert a["state"] == "stopping" and len(a["target"]) == 1 and set(a["target"]) < set(a["gpus"])
    assert not any(isinstance(x, StartRun) and x.job_id == other for x in actions)  # its GPU is still held

    clock.t += 1
    actions = core.run_ended(sid, 1, "preempted", step=6, step_time=0.05)
    assert [x.job_id for x in actions if isinstance(x, StartRun)] == [other]
    a = core.assignment(sid)
    assert a["state"] == "running" and a["attempt"] == 2 and a["gpus"] == a["target"] and len(a["gpus"]) == 1
    assert core.jobs[sid].steps == 6 and core.jobs[sid].preemptions == 1

    core.run_ended(other, 1, "finished", step=50)
    a = core.assignment(sid)  # the competitor left: the sweep is asked to regrow (stop, then a wider start)
    assert a["state"] == "stopping"
    core.run_ended(sid, 2, "preempted", step=8)
    assert core.assignment(sid)["gpus"] == ["node0_gpu0", "node0_gpu1"]


def test_shrinking_demand_frees_gpus_for_other_apps():
    core, clock = clocked(gpus=4)
    sid, _ = core.submit(sweep(trials=4))
    assert len(core.assignment(sid)["gpus"]) == 4
    other, actions = core.submit({"workload": "tiny", "steps": 50, "gpus": 2, "step_time": 0.1})
    assert actions == []  # FIFO: the sweep holds every GPU
    core.set_demand(sid, gpus=2, steps=30)  # two trials stopped early
    a = core.assignment(sid)
    assert a["state"] == "stopping" and len(a["target"]) == 2
    actions = core.run_ended(sid, 1, "preempted", step=10)
    assert [x.job_id for x in actions if isinstance(x, StartRun)] == [other]
    assert len(core.assignment(sid)["gpus"]) == 2 and core.jobs[sid].spec.steps == 30


def test_external_job_state_survives_a_restart(tmp_path):
    journal = tmp_path / "j.sqlite"
    core, _ = clocked(policy="fair", gpus=2, journal=Journal(journal))
    sid, _ = core.submit(sweep())
    core.set_demand(sid, gpus=3, steps=40)
    core.journal.close() if hasattr(core.journal, "close") else None
    again, _ = clocked(policy="fair", gpus=2, journal=Journal(journal))
    job = again.jobs[sid]
    assert job.spec.executor == "external" and job.spec.gpus == 3 and job.spec.steps == 40
    assert job.state == "queued"  # its executor lost touch with the old coordinator: it polls and resumes
    again.decide()
    assert again.assignment(sid)["state"] == "running" and again.assignment(sid)["attempt"] == 2
