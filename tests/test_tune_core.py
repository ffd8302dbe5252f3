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


def test_shrinking_demand_frees_gpus_for_other_jobs():
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


def test_a_sweeps_forecast_never_falls_behind_the_clock_while_it_reports_nothing():
    """Its trials wait, pause or restart: no report comes, nothing happens. Each look (``status``, ``predict``)
    forecasts it from where it last reported, at its measured pace, never earlier than now."""
    from pcs_ray.coordinator.local import LocalCoordinator
    from pcs_ray.coordinator.speed import EXTRAPOLATE_S

    core, clock = clocked(policy="fair", gpus=2)
    api = LocalCoordinator(core)
    sid = api.submit(sweep(trials=6, iters=10)).id
    clock.t += 5
    api.report_progress(sid, 10, 0.5)  # 50 sweep steps left at 0.5 s each on its 2 GPUs: 25 s
    first = api.predict(sid)["predicted_completion"]
    assert first >= clock.t + 25 - 0.1

    def forecasts() -> tuple[float, float, float]:
        view = api.status()
        [job] = [j for j in view["jobs"] if j["id"] == sid]
        return view["now"], job["predicted_completion"], api.predict(sid)["predicted_completion"]

    clock.t = first + 100  # long past the forecast, and still silent
    # Before any play (the coordinator's loop plays every second): status and predict show its work left.
    [job] = [j for j in core.status()["jobs"] if j["id"] == sid]
    assert job["predicted_completion"] >= clock.t + 25 - EXTRAPOLATE_S - 0.1
    assert core.prediction(sid)["predicted_completion"] == job["predicted_completion"]
    now, shown, predicted = forecasts()  # after a play
    assert now == clock.t and shown == predicted
    assert predicted >= now + 25 - EXTRAPOLATE_S - 0.1, (now, predicted)  # its work left, not the clock's

    other = api.submit({"workload": "tiny", "steps": 50, "gpus": 1, "step_time": 0.1}).id
    assert api.assignment(sid)["state"] == "stopping"  # its trials pause for the arrival
    clock.t += 300
    now, shown, predicted = forecasts()
    assert shown == predicted and predicted > now
    assert all(j["predicted_completion"] > now for j in api.status()["jobs"] if j["id"] in (sid, other))
