"""The coordinator core without Ray: events in, actions out, journal replay, predictions, cancel, bad specs."""

from __future__ import annotations

import pytest

from pcs_ray.cluster import ClusterSpec
from pcs_ray.contract import JobSpecError, UnknownJobError
from pcs_ray.coordinator import Journal, StartRun, StopRun
from pcs_ray.placement import create_placement
from builders import Clock, coordinator, submission


def make(journal=None, *, clock=None, gpus=8, per_node=4, workloads=("tiny", "big"), **options):
    """A core on nodes of four GPUs that runs the tiny and big workloads, and its clock."""
    clock = clock or Clock()
    return coordinator(journal=journal, clock=clock, gpus=gpus, per_node=per_node, workloads=workloads, **options), clock


def starts(actions):
    return {a.job_id: [(s.node, s.index) for s in a.request.gpus] for a in actions if isinstance(a, StartRun)}


def test_submit_starts_on_free_gpus_and_queues_the_rest():
    core, _ = make()
    j1, a1 = core.submit(submission(gpus=4))
    assert starts(a1) == {j1: [("node0", i) for i in range(4)]}
    req = a1[0].request
    assert req.total_steps == 100 and req.attempt == 1 and req.checkpoint_dir.endswith(f"/{j1}")
    j2, a2 = core.submit(submission(gpus=4))
    assert starts(a2) == {j2: [("node1", i) for i in range(4)]}
    j3, a3 = core.submit(submission(gpus=8))
    assert a3 == [] and core.jobs[j3].state == "queued"


def test_lease_style_preemption_is_a_stop_then_a_start_after_the_stop_completes():
    # SRSF: a short job preempts a long one; its GPUs are reused only once the runner has stopped.
    core, clock = make(policy="srsf", gpus=4, per_node=4)
    long_id, _ = core.submit(submission(gpus=4, steps=10_000))
    clock.t += 10
    short_id, actions = core.submit(submission(gpus=4, steps=10))
    assert actions == [StopRun(long_id, 1, "preempt")]
    assert core.jobs[long_id].state == "stopping" and core.jobs[short_id].state == "queued"
    clock.t += 1
    actions = core.run_ended(long_id, 1, "preempted", step=120, step_time=0.1)
    assert list(starts(actions)) == [short_id]
    assert core.jobs[long_id].preemptions == 1 and core.jobs[long_id].steps == 120
    assert core.jobs[long_id].segments[-1]["stopped_for"] == "preempt"  # the run keeps why it was stopped
    clock.t += 2
    actions = core.run_ended(short_id, 1, "finished", step=10)
    [start] = actions
    assert start.job_id == long_id and start.kind == "resume" and start.request.attempt == 2
    assert core.jobs[short_id].state == "finished"


def test_resize_when_an_elastic_job_gets_fewer_gpus():
    core, clock = make(policy="fair", gpus=4, per_node=4)
    a, acts = core.submit(submission(gpus=4, min_gpus=1, steps=1000))
    assert len(starts(acts)[a]) == 4
    clock.t += 5
    b, acts = core.submit(submission(gpus=4, min_gpus=1, steps=1000))
    assert acts == [StopRun(a, 1, "resize")]
    acts = core.run_ended(a, 1, "preempted", step=50)
    got = starts(acts)
    assert len(got[a]) == 2 and len(got[b]) == 2 and not set(got[a]) & set(got[b])
    assert {x.kind for x in acts} == {"resize", "start"}
    assert core.jobs[a].segments[0]["stopped_for"] == "resize"


def test_stale_outcomes_are_ignored():
    core, _ = make()
    j, _ = core.submit(submission())
    assert core.run_ended(j, 7, "finished", step=100) == []
    assert core.jobs[j].state == "running"


def test_cancel_queued_and_running():
    core, clock = make(gpus=4)
    running, _ = core.submit(submission(gpus=4))
    queued, _ = core.submit(submission(gpus=4))
    assert core.cancel(queued) == []
    assert core.jobs[queued].state == "cancelled"
    assert core.cancel(running) == [StopRun(running, 1, "cancel")]
    assert core.run_ended(running, 1, "preempted", step=3) == []
    assert core.jobs[running].state == "cancelled"
    with pytest.raises(UnknownJobError):
        core.cancel(99)


def test_failed_runner_resumes_then_gives_up_after_max_failures():
    core, _ = make(max_failures=2)
    j, _ = core.submit(submission())
    acts = core.run_ended(j, 1, "failed", step=0, error="actor died")
    assert starts(acts) and core.jobs[j].attempt == 2
    assert core.run_ended(j, 2, "failed", step=0, error="actor died") == []
    assert core.jobs[j].state == "failed" and core.jobs[j].error == "actor died"


@pytest.mark.parametrize(
    "spec, message",
    [
        (submission(workload="nope"), "unknown workload 'nope'"),
        (submission(gpus=9), "the cluster has 8"),
        (submission(steps=-5), "steps"),
        (submission(colour="red"), "colour"),
        (submission(min_gpus=3, gpus=2), "min_gpus (3) is larger than gpus (2)"),
    ],
)
def test_bad_specs_are_rejected_and_not_journaled(spec, message):
    journal = Journal(":memory:")
    core, _ = make(journal)
    before = len(journal)
    with pytest.raises(JobSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        core.submit(spec)
    assert len(journal) == before and not core.jobs


def test_a_shapes_step_time_is_the_mean_of_its_measurements_not_the_latest_ones():
    """Real GPUs' step rates are noisy between reports and do not drift: an EMA would carry the last
    reports' noise into every forecast (it would say 0.20 here)."""
    core, clock = make(gpus=1, per_node=1, restart_overhead=0.0)
    j, _ = core.submit(submission(steps=1000, step_time=1.0))
    for step, step_time in enumerate([0.1, 0.1, 0.1, 0.1, 0.3, 0.3], start=1):  # the first: a run's first step alone
        clock.t += 1
        core.progress(j, step=step, step_time=step_time)
    assert core.speed.steps["tiny"][1].mean == pytest.approx((0.1 * 3 + 0.3 * 2) / 5)


def test_predictions_use_measured_speed_and_refresh():
    core, clock = make(gpus=1, per_node=1, restart_overhead=0.0)
    j, _ = core.submit(submission(steps=100, step_time=1.0))
    assert core.prediction(j)["predicted_completion"] == pytest.approx(1000 + 100)
    clock.t += 10
    core.progress(j, step=10, step_time=0.5)  # twice as fast as estimated
    core.play_refresh()
    assert core.prediction(j)["predicted_completion"] == pytest.approx(1010 + 90 * 0.5)
    # The first report came 10 s after the start with 10 steps of 0.5 s done: 5 s of start-up.
    assert core.speed.cost("tiny", "start") == pytest.approx(5.0)
    # A job of the same shape runs at the measured pace whatever its own guess, and pays the measured start.
    k, _ = core.submit(submission(steps=10, step_time=2.0))  # FIFO: runs after j
    assert core.prediction(k)["predicted_completion"] == pytest.approx(1010 + 45 + 5 + 10 * 0.5)
    # Another shape of an unknown workload has only its guess, scaled as guesses turned out (EMA).
    assert core.speed.estimate_ratio == pytest.approx(0.7 + 0.3 * 0.5)
    m, _ = core.submit(submission(steps=10, step_time=2.0, params={"batch_size": 64}))
    assert core.prediction(m)["predicted_completion"] == pytest.approx(1010 + 45 + 10 + 5 + 20 * 0.85)
    # FIFO's bound serves the queue one job at a time, plus k's own start-up.
    assert core.prediction(k)["bound"] == pytest.approx(1010 + 45 + 10 * 0.5 + 5.0)


def test_forecasts_charge_start_and_every_move_they_play():
    # SRSF on one GPU: a long job runs; a short one arrives and preempts it in the forecast.
    core, clock = make(policy="srsf", gpus=1, per_node=1, restart_overhead=2.0)
    long_id, _ = core.submit(submission(steps=100, step_time=1.0))
    clock.t += 12
    core.progress(long_id, step=10, step_time=1.0)  # 2 s of start-up measured
    core.play_refresh(force=True)
    assert core.prediction(long_id)["predicted_completion"] == pytest.approx(1012 + 90)
    short_id, actions = core.submit(submission(steps=5, step_time=1.0))
    assert actions == [StopRun(long_id, 1, "preempt")]
    clock.t += 1
    core.run_ended(long_id, 1, "preempted", step=11, step_time=1.0)  # the stop took 1 s
    core.play_refresh(force=True)
    # The short job pays its start (2 s); the long one a stop (1 s) and a resume (the start's 2 s, no resume
    # measured yet) when it gets its GPU back.
    short_end = 1013 + 2 + 5
    assert core.prediction(short_id)["predicted_completion"] == pytest.approx(short_end)
    assert core.prediction(long_id)["predicted_completion"] == pytest.approx(short_end + 1 + 2 + 89)


def test_warm_and_cold_starts_are_learned_apart_and_forecasts_charge_the_pools_mix(tmp_path):
    path = tmp_path / "journal.sqlite"
    core, clock = make(Journal(path), gpus=2, per_node=2, restart_overhead=0.0)
    warm, _ = core.submit(submission(steps=100, step_time=1.0))
    core.runner_kind(warm, 1, "warm")  # the host's launch found a warm runner
    clock.t += 10.5
    core.progress(warm, step=10, step_time=1.0)  # 0.5 s of start-up on a warm runner
    cold, _ = core.submit(submission(steps=100, step_time=1.0))  # no runner_kind: cold
    clock.t += 20
    core.progress(cold, step=10, step_time=1.0)  # 10 s of start-up: a process and an import
    assert core.speed.cost("tiny", "warm_start") == pytest.approx(0.5)
    assert core.speed.cost("tiny", "start") == pytest.approx(10.0)
    spec_job = core.jobs[warm]
    spec_job.first_start = None  # as a queued job not yet started would be
    for share, expected in ((0.0, 10.0), (1.0, 0.5), (0.5, 5.25)):
        core.speed.set_warm_share(share)
        assert core.speed.job_costs(spec_job)[0] == pytest.approx(expected)
    core.journal.close()
    again, _ = make(Journal(path), gpus=2, per_node=2, restart_overhead=0.0, clock=clock)  # the kind is journaled
    assert again.speed.cost("tiny", "warm_start") == pytest.approx(0.5) and again.speed.cost("tiny", "start") == pytest.approx(10.0)


def test_a_submissions_forecast_charges_the_pools_mix_before_its_runners_are_known():
    """The forecast a submission returns is made before the host launches the run: a warm pool's job must not be
    charged a cold start (the demo's 8 s default) because its runner kind is not journaled yet."""
    core, clock = make(gpus=2, per_node=2, restart_overhead=8.0)
    core.speed.set_warm_share(1.0)
    first, _ = core.submit(submission(steps=100, step_time=1.0))
    core.runner_kind(first, 1, "warm")
    clock.t += 10.5
    core.progress(first, step=10, step_time=1.0)  # 0.5 s of start-up on a warm runner
    core.run_ended(first, 1, "finished", step=100)
    jid, _ = core.submit(submission(steps=100, step_time=1.0))
    at_submission = core.jobs[jid].predicted
    assert at_submission == pytest.approx(core.now() + 0.5 + 100 * 1.0)
    core.runner_kind(jid, 1, "warm")  # the host launched it on warm runners
    core.play_refresh(force=True)
    assert core.jobs[jid].predicted == pytest.approx(at_submission)


def test_scaling_and_step_times_are_learned_per_gpu_count():
    core, clock = make(gpus=4, per_node=4, restart_overhead=0.0)
    a, _ = core.submit(submission(gpus=1, steps=100, step_time=1.0))
    clock.t += 1
    core.progress(a, step=1, step_time=0.8)
    core.run_ended(a, 1, "finished", step=100)
    b, _ = core.submit(submission(gpus=2, steps=100, step_time=1.0))
    clock.t += 1
    core.progress(b, step=1, step_time=0.5)  # 1.6x on 2 GPUs, not 2x
    spec = core.jobs[b].spec
    assert core.speed.step_s(spec, 1) == (pytest.approx(0.8), "measured")
    assert core.speed.step_s(spec, 2) == (pytest.approx(0.5), "measured")
    assert core.speed.speedup(spec) == pytest.approx((0.0, 1.0, 1.6))


def test_an_unmeasured_gpu_count_follows_the_device_models_steps_of_that_shape():
    """ResNet-18 at batch 8 measured on 4 GPUs: on 3 each rank computes 3 samples, not 2, so a step is a little
    longer (the device model's rank floor), not 4/3 longer as the bare scaling curve would say."""
    from pcs_ray.workloads import device_model as dm

    core, clock = make(gpus=4, per_node=4, restart_overhead=0.0, workloads=("resnet18",))
    params = {"batch_size": 8}
    j, _ = core.submit({"workload": "resnet18", "steps": 100, "gpus": 4, "params": params})
    clock.t += 1
    core.progress(j, step=1, step_time=1.2)
    spec = core.jobs[j].spec
    assert core.speed.step_s(spec, 4) == (pytest.approx(1.2), "measured")
    ratio = dm.emulated_step_s("resnet18", params, 3) / dm.emulated_step_s("resnet18", params, 4)
    assert ratio == pytest.approx(dm.rank_step_s("resnet18", params, 3) / dm.rank_step_s("resnet18", params, 4))
    assert core.speed.step_s(spec, 3) == (pytest.approx(1.2 * ratio), "scaled")
    assert ratio < 1.1 < dm.scaling("resnet18", 4) / dm.scaling("resnet18", 3)


def test_learned_speeds_persist_for_a_new_coordinator(tmp_path):
    speeds = tmp_path / "speeds.json"
    core, clock = make(gpus=1, per_node=1, speeds_path=speeds)
    j, _ = core.submit(submission(steps=20, step_time=1.0))
    clock.t += 4
    core.progress(j, step=4, step_time=0.25)
    core.run_ended(j, 1, "finished", step=20)
    assert speeds.is_file() and oct(speeds.stat().st_mode & 0o777) == "0o600"
    fresh, _ = make(gpus=1, per_node=1, speeds_path=speeds, clock=Clock(5000.0))  # a new journal
    k, _ = fresh.submit(submission(steps=20, step_time=1.0))
    view = fresh.prediction(k)
    assert view["predicted_completion"] == pytest.approx(5000 + 3.0 + 20 * 0.25)
    assert "step_time" not in view["estimates"] and "start_stop_costs" in view["estimates"]
    lo, hi = view["range"]
    assert lo <= view["predicted_completion"] <= hi


def test_an_unmeasured_prediction_says_so_and_carries_a_wide_range():
    core, _ = make(gpus=1, per_node=1)
    j, _ = core.submit(submission(steps=100, step_time=1.0))
    view = core.prediction(j)
    assert {"step_time", "start_stop_costs"} <= set(view["estimates"])
    lo, hi = view["range"]
    assert lo < view["predicted_completion"] < hi


def test_a_late_runner_never_makes_the_model_finish_it():
    core, clock = make(gpus=1, per_node=1, restart_overhead=0.0)
    j, _ = core.submit(submission(steps=10, step_time=1.0))
    clock.t += 100  # far past its modelled end, no report
    core.play_refresh(force=True)
    assert core.jobs[j].state == "running"
    assert core.prediction(j)["predicted_completion"] > clock.t


def test_journal_replay_rebuilds_state_and_requeues_lost_runners(tmp_path):
    path = tmp_path / "journal.sqlite"
    core, clock = make(Journal(path), gpus=4)
    a, _ = core.submit(submission(gpus=4, steps=50))
    b, _ = core.submit(submission(gpus=2), submission_id="sub-b")
    c, _ = core.submit(submission(gpus=2))
    clock.t += 3
    core.progress(a, step=20, step_time=0.1)
    core.run_ended(a, 1, "finished", step=50)  # b and c start now
    core.cancel(c)  # c is stopping
    core.journal.close()

    clock.t += 5
    again, _ = make(Journal(path), gpus=4, clock=clock)
    assert again.epoch == core.epoch
    assert again.recovered == 2  # b running, c stopping: their runners died with the coordinator
    assert again.jobs[a].state == "finished" and again.jobs[a].finish == pytest.approx(3)
    assert again.jobs[b].state == "queued" and again.jobs[c].state == "cancelled"
    assert again.submit(submission(), submission_id="sub-b") == (b, [])  # an acknowledged submission, not duplicated
    actions = again.decide()
    assert b in starts(actions) and c not in starts(actions)
    assert again.next_id == c + 1


def test_history_is_written_for_finished_jobs(tmp_path):
    from pcs_ray.workloads.history import read_history_records

    hist = tmp_path / "history.jsonl"
    core, clock = make(history_path=hist)
    j, _ = core.submit(submission(gpus=2, steps=100, step_time=1.0, **{"class": "C"}))
    clock.t += 30
    core.progress(j, step=60, step_time=0.5)
    core.run_ended(j, 1, "finished", step=100, step_time=0.5)
    [rec] = read_history_records(hist)
    assert rec.job_id == j and rec.gpus == 2 and rec.job_class == "C" and rec.model == "tiny"
    assert rec.iteration_time == pytest.approx(1.0)  # 0.5 s per step on 2 GPUs, linear speedup
    assert rec.finish_time == pytest.approx(1030)


def test_a_prediction_says_why_placement_chose_the_gpus():
    core, _ = make(placement=create_placement("pal", ClusterSpec.homogeneous(8, 4), locality_penalty=1.5))
    jid, actions = core.submit(submission(gpus=2))
    why = core.prediction(jid)["placement"]
    assert why["placement"] == "pal" and why["job_id"] == jid
    assert why["gpus"] == [f"{s.node}:{s.index}" for s in actions[0].request.gpus]
    assert {s["plugin"] for s in why["scores"]} >= {"variability", "locality"}
    assert all(0.0 <= s["share"] <= 1.0 for s in why["scores"])
    queued, _ = core.submit(submission(gpus=8))
    assert core.prediction(queued)["placement"] is None  # never placed: nothing to explain


def test_ends_collected_together_are_recorded_first_and_decided_once():
    """The actor's loop records every run that ended since it last looked, then decides once: an 8-GPU
    job that needs both freed halves starts at that one decision, with no start in between."""
    core, clock = make()
    a, _ = core.submit(submission(gpus=4))
    b, _ = core.submit(submission(gpus=4))
    c, _ = core.submit(submission(gpus=8))
    decisions = len(core.decision_s)
    clock.t += 10
    assert core.record_run_end(a, 1, "finished", step=100)
    assert core.record_run_end(b, 1, "finished", step=100)
    assert not core.record_run_end(b, 1, "finished", step=100)  # stale: already written off
    assert not core.record_run_end(a, 7, "finished", step=100)  # another attempt
    assert len(core.decision_s) == decisions and core.jobs[c].state == "queued"
    actions = core.decide()
    assert list(starts(actions)) == [c] and len(starts(actions)[c]) == 8
    assert core.jobs[a].state == core.jobs[b].state == "finished"


def test_a_sync_with_nothing_new_is_skipped_and_a_later_one_is_not():
    """A prediction syncs the model; a second one at the same time, after nothing happened, would write what
    is there and reads no job again; once time moves, or a report changes a job, every running job is read."""
    core, clock = make()
    j1, _ = core.submit(submission(gpus=4))
    j2, _ = core.submit(submission(gpus=4))
    j3, _ = core.submit(submission(gpus=8))
    read = []
    remaining = core.speed.remaining
    core.speed.remaining = lambda job, *a: read.append(job.job_id) or remaining(job, *a)
    first = core.prediction(j3)
    assert read == [] and core.prediction(j3) == first  # the submission's own sync was the last
    clock.t += 5
    core.prediction(j3)
    assert sorted(read) == [j1, j2]
    read.clear()
    core.prediction(j3)
    assert read == []
    core.progress(j1, step=10, step_time=0.1)  # a first measurement: every job's estimate may move
    core.prediction(j3)
    assert {j1, j2} <= set(read)
