"""Forecasts of code pcs-ray has never run: a declared or learned prior, measured at the first report.

A user job's step time starts from its own ``step_time`` (taken as given), else from the median of
earlier user jobs, else the default; its scaling from its declaration, else linear. The forecast says
which of these are still estimates, drops each once measured, and a restarted coordinator (journal or
``speeds.json``) forecasts the same.
"""

from __future__ import annotations

import pytest

from pcs_ray.cluster import ClusterSpec
from pcs_ray.contract import JobStatus
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.coordinator.speed import SpeedModel, fit_counts, spec_shape
from pcs_ray.jobs.jobfile import JobFile
from builders import Clock, clocked, coordinator


def user(entry="train.py:loop", steps=100, gpus=1, config=None, **kw) -> JobFile:
    return JobFile.model_validate({"entrypoint": entry, "steps": steps, "gpus": gpus, "config": config or {}, **kw})


def ran(speed: SpeedModel, spec: JobFile, gpus: int, step_time: float, jid: int = 1) -> LiveJob:
    """A run of ``spec`` on ``gpus`` GPUs that reported twice at ``step_time``."""
    job = LiveJob(jid, spec, 0.0, t1=speed.estimate(spec))
    job.launched(0.0, 1, tuple(range(gpus)), 1.0, "start")
    speed.observe_step_time(job, step_time, first_of_run=True)
    speed.observe_step_time(job, step_time)
    return job


def queued(speed: SpeedModel, spec: JobFile, jid: int = 9) -> LiveJob:
    return LiveJob(jid, spec, 0.0, t1=speed.estimate(spec))


def test_without_a_step_time_an_unseen_job_starts_from_earlier_user_jobs_not_the_default():
    speed = SpeedModel(default_step_time=1.0)
    assert speed.step_s(user("new.py:f"), 1) == (1.0, "default")
    for i, t in enumerate((0.2, 0.4, 3.0)):  # three configs of one entrypoint, one a long outlier
        ran(speed, user("a.py:f", config={"width": i}), 1, t, jid=i)
    ran(speed, user("b.py:g", gpus=2, config={"width": 9}), 2, 0.3, jid=7)  # 2 GPUs: 0.6 s on one at linear scaling
    ran(speed, JobFile(workload="tiny", steps=10), 1, 50.0, jid=8)  # a built-in does not count
    warming = LiveJob(6, user("c.py:h"), 0.0, t1=1.0)
    warming.launched(0.0, 1, (0,), 1.0, "start")
    speed.observe_step_time(warming, 90.0, first_of_run=True)  # a first step alone (warm-up) does not either
    assert speed.step_s(user("new.py:f"), 1) == (pytest.approx(0.5), "prior")  # median of 0.2, 0.4, 0.6, 3.0
    assert speed.step_s(user("new.py:f"), 2) == (pytest.approx(0.25), "prior")
    # the same code in a new config: the median of its own configs first
    assert speed.step_s(user("a.py:f", config={"width": 5}), 1) == (pytest.approx(0.4), "prior")
    # the user's own figure wins over the prior
    assert speed.step_s(user("new.py:f", step_time=2.0), 1) == (2.0, "estimate")


def test_a_config_that_changes_the_step_is_its_own_shape_and_bookkeeping_keys_are_not():
    a = user(config={"batch_size": 64, "checkpoint_every": 10, "lr": 0.1})
    assert spec_shape(a) == spec_shape(user(config={"batch_size": 64, "checkpoint_every": 50, "lr": 0.5}))
    assert spec_shape(a) != spec_shape(user(config={"batch_size": 128}))


def test_a_user_estimate_is_taken_as_given_and_does_not_move_the_built_in_ratio():
    speed = SpeedModel()
    speed.estimate_ratio = 3.0  # built-in jobs' guesses were a third of what they ran at
    assert speed.step_s(user(step_time=0.5), 1) == (0.5, "estimate")
    assert speed.step_s(JobFile(workload="tiny", steps=10, step_time=0.5), 1)[0] == pytest.approx(1.5)
    ran(speed, user(step_time=0.1), 1, 1.0)  # ten times off
    assert speed.estimate_ratio == 3.0


def test_the_first_report_replaces_a_wrong_estimate_and_the_forecast_says_what_it_still_guesses():
    speed = SpeedModel()
    spec = user(step_time=0.5, gpus=2)
    job = queued(speed, spec)
    assert speed.estimated(job) == {"step_time": "declared", "scaling": "assumed linear",
                                    "start_stop_costs": "default"}
    assert speed.estimated(queued(speed, user(gpus=2)))["step_time"] == "default"
    job.launched(0.0, 1, (0, 1), 1.0, "start")
    speed.observe_step_time(job, 1.8, first_of_run=True)  # the first report: 3.6x the guess
    assert job.measured and job.t1 == pytest.approx(3.6)  # linear: 1.8 s on 2 GPUs is 3.6 s on one
    assert speed.step_s(spec, 2) == (1.8, "measured")
    assert "step_time" not in speed.estimated(job)
    other = user(gpus=2, config={"other": 1})
    assert speed.estimated(queued(speed, other))["step_time"] == "default"  # a first step is no prior
    speed.observe_step_time(job, 1.8)
    assert speed.estimated(queued(speed, other))["step_time"] == "prior"


def test_a_declared_scaling_seeds_the_table():
    speed = SpeedModel()
    assert speed.speedup(user(gpus=4, step_time=1.0)) == pytest.approx((0, 1, 2, 3, 4))
    assert speed.speedup(user(gpus=4, step_time=1.0, scaling="none")) == pytest.approx((0, 1, 1, 1, 1))
    curve = user(gpus=4, step_time=1.0, scaling=[1.0, 1.5])  # flat past its end
    assert speed.speedup(curve) == pytest.approx((0, 1, 1.5, 1.5, 1.5))
    assert speed.estimated(queued(speed, curve))["scaling"] == "declared"
    # one measured count: the declaration carries it to the others
    ran(speed, curve, 2, 0.6)
    assert speed.step_s(curve, 1) == (pytest.approx(0.9), "scaled")


def test_two_measured_counts_replace_the_declared_scaling():
    speed = SpeedModel()
    spec = user(gpus=4, scaling="linear")
    ran(speed, spec, 1, 1.0)
    ran(speed, spec, 2, 0.8)  # far from linear: 1.25x on 2 GPUs
    a, b = 0.6, 0.4  # t(n) = a + b / n through both points
    assert speed.speedup(spec) == pytest.approx((0, 1, 1.25, 1 / (a + b / 3), 1 / (a + b / 4)))
    assert "scaling" not in speed.estimated(ran(speed, spec, 2, 0.8))


def test_the_fit_recovers_amdahl_and_never_goes_negative():
    from pcs_ray.coordinator.speed import Stat

    exact = {n: Stat(0.3 + 1.2 / n) for n in (1, 2, 4)}
    assert fit_counts(exact) == pytest.approx((0.3, 1.2))
    slower = {1: Stat(1.0), 2: Stat(1.4)}  # more GPUs, slower: flat
    assert fit_counts(slower) == pytest.approx((1.2, 0.0))
    superlinear = {1: Stat(1.0), 2: Stat(0.4)}
    a, b = fit_counts(superlinear)
    assert a == 0.0 and b > 0


def test_what_was_learned_for_user_code_survives_speeds_json():
    speed = SpeedModel()
    spec = user(gpus=4, config={"w": 1})
    ran(speed, spec, 1, 1.0)
    ran(speed, spec, 4, 0.5)
    fresh = SpeedModel()
    fresh.merge(speed.to_dict())
    for probe in (spec, user("other.py:f", gpus=2)):
        assert fresh.speedup(probe) == pytest.approx(speed.speedup(probe))
        assert fresh.step_s(probe, 1) == speed.step_s(probe, 1)
        assert fresh.estimated(queued(fresh, probe)) == speed.estimated(queued(speed, probe))


def test_a_restarted_coordinator_forecasts_a_new_user_job_the_same(tmp_path):
    path = tmp_path / "journal.sqlite"
    clock = Clock()
    core = coordinator(journal=path, clock=clock, restart_overhead=0.0)
    one, _ = core.submit(user("a.py:f", steps=50, step_time=0.1))  # a tenth of what it runs at
    two, _ = core.submit(user("a.py:f", steps=50, gpus=2))
    clock.t += 3
    core.progress(one, step=2, step_time=1.0)
    core.progress(two, step=2, step_time=0.8)
    clock.t += 6  # past progress_journal_every: both reports are journaled
    core.progress(one, step=8, step_time=1.0)
    core.progress(two, step=8, step_time=0.8)
    core.run_ended(one, 1, "finished", step=50)
    core.run_ended(two, 1, "finished", step=50)
    fresh = user("a.py:f", steps=100, gpus=4, min_gpus=4)
    k, _ = core.submit(fresh)
    before = core.prediction(k)
    assert before["estimated_from"].get("step_time") == "other GPU counts"
    assert "scaling" not in before["estimates"]  # measured on 1 and 2 GPUs
    core.journal.close()
    again = coordinator(journal=path, clock=clock, restart_overhead=0.0)  # from the journal alone (no speeds.json)
    assert again.speed.to_dict()["steps"] == core.speed.to_dict()["steps"]
    for probe in (fresh, user("b.py:g", gpus=2)):
        assert again.speed.speedup(probe) == pytest.approx(core.speed.speedup(probe))
        assert again.speed.step_s(probe, 1) == core.speed.step_s(probe, 1)
        assert again.speed.estimated(queued(again.speed, probe)) == core.speed.estimated(queued(core.speed, probe))


def test_a_queued_user_job_is_planned_with_the_scaling_learned_while_it_waited():
    clock = Clock()
    core = coordinator(clock=clock, restart_overhead=0.0)
    one, _ = core.submit(user(steps=50, config={"w": 1}))
    two, _ = core.submit(user(steps=50, gpus=2, config={"w": 1}))
    waiting, _ = core.submit(user(steps=50, gpus=4, min_gpus=2, config={"w": 1}))
    assert core.jobs[waiting].state == JobStatus.QUEUED
    assert core.model.engine.job(waiting).spec.speedup == pytest.approx((0, 1, 2, 3, 4))  # assumed linear
    clock.t += 3
    for step in (2, 5):
        core.progress(one, step=step, step_time=1.0)
        core.progress(two, step=step, step_time=0.8)
    core.prediction(waiting)
    assert core.model.engine.job(waiting).spec.speedup == pytest.approx(
        (0, 1, 1.25, 1 / (0.6 + 0.4 / 3), 1 / (0.6 + 0.4 / 4)))


@pytest.mark.parametrize("name", ["one-gpu", "elastic", "rigid-4gpu"])
def test_the_example_job_files_declare_what_their_emulated_devices_run(name):
    # The quick start's first prediction rests on these files' step_time: at every GPU count the job
    # can hold, the declared figure must forecast the emulated device's step within its rounding.
    from pathlib import Path

    from pcs_ray.jobs.jobfile import load_job
    from pcs_ray.workloads import device_model as dm

    spec = load_job(Path(__file__).resolve().parent.parent / "examples" / "jobs" / f"{name}.yaml")
    speed = SpeedModel()
    for n in range(spec.fewest_gpus, spec.gpus + 1):
        step, source = speed.step_s(spec, n)
        assert source == "estimate"
        assert step == pytest.approx(dm.emulated_step_s(spec.workload, spec.params, n), rel=0.03)


def test_the_report_takes_the_forecast_made_once_a_tenth_of_the_steps_were_reported():
    from pcs_ray.commands.demo_report import build_report

    t = 5000.0
    status = {"policy": {}, "restart_overhead": 0.0, "jobs": [
        {"id": 1, "name": "a", "workload": "user:a.py:f", "class": "A", "state": "finished", "demand": [1, 1],
         "steps": 100, "total_steps": 100, "submit": t, "finish": t + 100, "preemptions": 0, "attempts": 1,
         "emulated": True, "segments": []}]}
    history = [(t, t + 400, 0), (t + 5, t + 120, 9), (t + 6, t + 110, 10), (t + 8, t + 104, 12)]
    submitted = {1: {"predicted": t + 400, "bound": None, "history": history}}
    report = build_report(status, submitted, ClusterSpec.homogeneous(1, 1), [], wall_s=1.0)
    [job] = report["jobs"]
    assert job["tenth_predicted_jct_s"] == 110 and job["tenth_error_pct"] == pytest.approx(100 * 10 / 110)
    assert report["summary"]["mean_abs_error_tenth_pct"] == pytest.approx(job["tenth_error_pct"])
    assert job["error_pct"] == pytest.approx(75.0)


def test_a_runs_warm_up_step_is_not_spread_over_its_steps_where_its_shape_has_settled():
    speed = SpeedModel()
    spec = user(steps=1000, config={"w": 1})
    ran(speed, spec, 1, 0.004, jid=1)  # an earlier job of this shape settled at 4 ms
    again = LiveJob(2, spec, 0.0, t1=speed.estimate(spec))
    again.launched(0.0, 1, (0,), 1.0, "start")
    again.steps, again.reported_at, again.step_time = 1, 10.0, 1.5  # its first step: 1.5 s of warm-up
    speed.observe_step_time(again, 1.5, first_of_run=True)
    assert speed.remaining(again, 10.0) == pytest.approx(999 * 0.004)
    again.steps, again.reported_at, again.step_time = 200, 11.0, 0.005
    speed.observe_step_time(again, 0.005)  # its own pace from its second report on
    assert speed.remaining(again, 11.0) == pytest.approx(800 * 0.005)
    unseen = LiveJob(3, user("new.py:f", steps=1000), 0.0, t1=1.0)
    unseen.launched(0.0, 1, (0,), 1.0, "start")
    unseen.steps, unseen.reported_at, unseen.step_time = 1, 10.0, 1.5
    speed.observe_step_time(unseen, 1.5, first_of_run=True)  # nothing settled: its one measurement stands
    assert speed.remaining(unseen, 10.0) == pytest.approx(999 * 1.5)


def test_a_user_loops_forecast_follows_its_runs_own_pace_over_its_reports_not_its_latest_second(tmp_path):
    """Uneven steps (an evaluation every so many, checkpoints): each 1-s report sees a different share of
    the slow ones, and the forecast stands on the run's pace since its first report, not on the latest one."""
    (tmp_path / "loop.py").write_text("def loop(config):\n    pass\n")
    core, clock = clocked(gpus=1, progress_journal_every=0.0, journal=tmp_path / "journal.sqlite")
    jid, _ = core.submit({"entrypoint": "loop.py:loop", "working_dir": str(tmp_path), "steps": 1000, "gpus": 1})
    job = core.jobs[jid]
    for t, step, step_time in ((5.0, 1, 4.0), (6.0, 101, 0.01), (7.0, 141, 0.025), (8.0, 241, 0.01)):
        clock.t = 1000.0 + t
        core.progress(jid, step, step_time)
    assert job.step_time == 0.01 and job.run_pace() == pytest.approx(3.0 / 240)  # the warm-up's step is not in it
    assert core.speed.remaining(job, core.now()) == pytest.approx(759 * 3.0 / 240)
    clock.t += 2
    core.progress(jid, 441, 0.01)  # only the window's reports count once it is full
    job.paced(core.now() + 60, 451)  # (as a later report would be kept)
    assert job.paces[0][1] == 441 and job.run_pace() == pytest.approx(60 / 10)
    built_in = LiveJob(9, JobFile(workload="tiny", steps=1000), 0.0, t1=1.0)
    built_in.launched(0.0, 1, (0,), 1.0, "start")
    built_in.steps, built_in.reported_at, built_in.step_time = 200, 10.0, 0.02
    built_in.paces = [(5.0, 1), (10.0, 200)]
    assert SpeedModel().remaining(built_in, 10.0) == pytest.approx(800 * 0.02)  # a built-in's steps are even
