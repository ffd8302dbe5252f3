"""PCSTuneScheduler's decisions on stand-in trials (no Ray started): parking, mapping GPUs to trials,
pausing at a result, hard stops after the grace period (never while saving), acknowledgement."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from builders import coordinator
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from pcs_ray.executors import tune_scheduler
from pcs_ray.executors.tune import PCSTuneScheduler, count_trials
from pcs_ray.coordinator.local import LocalCoordinator


class FakeTrial:
    def __init__(self, tid: str) -> None:
        self.trial_id, self.status, self.is_saving, self.resources = tid, Trial.PENDING, False, None

    def set_status(self, status: str) -> None:
        self.status = status

    def update_resources(self, resources: dict) -> None:
        assert self.status != Trial.RUNNING
        self.resources = resources


class FakeController:
    def __init__(self) -> None:
        self.hard_paused: list[str] = []
        self.trials: list[FakeTrial] = []

    def get_trials(self) -> list[FakeTrial]:
        return self.trials

    def pause_trial(self, trial, should_checkpoint: bool = True) -> None:
        assert not trial.is_saving and not should_checkpoint
        self.hard_paused.append(trial.trial_id)
        trial.status = Trial.PAUSED


def setup(gpus=4, trials=6, gpt=1, grace_s=30.0, policy="fair"):
    core = coordinator(gpus=gpus, policy=policy)
    link = LocalCoordinator(core)
    sched = PCSTuneScheduler(link, num_trials=trials, iterations=5, gpus_per_trial=gpt, iteration_time=0.1,
                             grace_s=grace_s, poll_s=0.0)
    tc = FakeController()
    ts = tc.trials = [FakeTrial(f"t{i}") for i in range(trials)]
    for t in ts:
        sched.on_trial_add(tc, t)
    return core, link, sched, tc, ts


def start_all(sched, tc):
    """What Tune does with each chosen trial: stage it, then run it."""
    chosen = []
    while (t := sched.choose_trial_to_run(tc)) is not None:
        assert sched.choose_trial_to_run(tc) is t  # idempotent until Tune stages it
        t.status = Trial.RUNNING
        chosen.append(t)
    return chosen


def test_new_trials_are_parked_and_only_floor_k_over_g_run_on_the_assigned_gpus():
    core, link, sched, tc, ts = setup(gpus=5, trials=4, gpt=2)
    assert all(t.status == Trial.PAUSED for t in ts)  # parked: Tune would start PENDING trials by itself
    assert sched.job_id is not None and sched.first_prediction["predicted_completion"] is not None
    chosen = start_all(sched, tc)
    assert len(chosen) == 2  # 5 GPUs, 2 per trial
    pinned = [sorted(k for k in t.resources if "_gpu" in k) for t in chosen]
    assert pinned == [["node0_gpu0", "node0_gpu1"], ["node0_gpu2", "node0_gpu3"]]
    assert all(t.resources["GPU"] == 0 for t in chosen)


def test_preempted_trial_pauses_at_its_next_result_then_the_sweep_acknowledges():
    core, link, sched, tc, ts = setup(gpus=2, trials=3)
    a, b = start_all(sched, tc)
    for t in (a, b):
        sched.on_trial_result(tc, t, {"training_iteration": 1, "time_this_iter_s": 0.1})
    with link.lock:
        other, _ = core.submit({"workload": "tiny", "steps": 100, "gpus": 1, "step_time": 0.1})
    assert core.jobs[sched.job_id].state == "stopping"
    decisions = {t.trial_id: sched.on_trial_result(tc, t, {"training_iteration": 2, "time_this_iter_s": 0.1})
                 for t in (a, b)}
    paused = [tid for tid, d in decisions.items() if d == TrialScheduler.PAUSE]
    assert len(paused) == 1 and core.jobs[sched.job_id].state == "stopping"
    next(t for t in (a, b) if t.trial_id in paused).status = Trial.PAUSED  # Tune saved and stopped it
    assert sched.choose_trial_to_run(tc) is None  # nothing to start: one GPU, one trial running
    assert sched.log.acks == 1 and core.jobs[sched.job_id].state == "running"
    assert core.jobs[other].state == "running" and core.jobs[sched.job_id].steps == 4


def test_a_trial_that_does_not_report_is_stopped_hard_after_grace_but_never_while_saving(monkeypatch):
    clock = [1000.0]  # the scheduler's monotonic clock, moved by the test: the grace expires when the test says
    monkeypatch.setattr(tune_scheduler, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time,
                                                                sleep=time.sleep))
    core, link, sched, tc, ts = setup(gpus=2, trials=2, grace_s=0.2)
    a, b = start_all(sched, tc)
    for t in (a, b):  # both have reported: each has work since its start that a pause would save
        sched.on_trial_result(tc, t, {"training_iteration": 1, "time_this_iter_s": 0.1})
    with link.lock:
        core.submit({"workload": "tiny", "steps": 100, "gpus": 1, "step_time": 0.1})
    sched.choose_trial_to_run(tc)
    assert tc.hard_paused == []  # within the grace period: it pauses at its next result
    a.is_saving = b.is_saving = True
    sched.choose_trial_to_run(tc)
    clock[0] += 0.3  # past the grace period
    sched.choose_trial_to_run(tc)
    assert tc.hard_paused == []  # saving: wait (a pause now would lose the checkpoint)
    a.is_saving = b.is_saving = False
    sched.choose_trial_to_run(tc)
    assert len(tc.hard_paused) == 1 and sched.log.hard_stops == 1
    sched.choose_trial_to_run(tc)
    assert sched.log.acks == 1 and link.assignment(sched.job_id)["attempt"] == 2
    assert len(link.assignment(sched.job_id)["gpus"]) == 1


def test_inner_stop_shrinks_demand_and_the_end_is_reported():
    core, link, sched, tc, ts = setup(gpus=4, trials=2)
    a, b = start_all(sched, tc)
    assert sched.on_trial_result(tc, a, {"training_iteration": 5, "time_this_iter_s": 0.1}) == TrialScheduler.STOP
    assert core.jobs[sched.job_id].spec.gpus == 1
    a.status = Trial.TERMINATED
    sched.on_trial_complete(tc, a, {})
    b.status = Trial.TERMINATED
    sched.on_trial_complete(tc, b, {"training_iteration": 5})
    assert core.jobs[sched.job_id].state == "finished"


def test_a_last_result_that_meets_a_stop_criterion_is_counted():
    core, link, sched, tc, ts = setup(gpus=2, trials=2)
    a, b = start_all(sched, tc)
    sched.on_trial_result(tc, a, {"training_iteration": 2, "time_this_iter_s": 0.1})
    for t in (a, b):  # Tune hands a result that meets RunConfig(stop=...) to on_trial_complete only
        t.status = Trial.TERMINATED
        sched.on_trial_complete(tc, t, {"training_iteration": 3})
    assert sched.log.iterations == {"t0": [2, 3], "t1": [3]}
    job = core.jobs[sched.job_id]
    assert job.state == "finished" and job.steps == 6

def test_count_trials_multiplies_grids_and_samples():
    from ray import tune

    space = {"a": tune.grid_search([1, 2, 3]), "p": {"m": tune.grid_search([0, 1])}, "c": 5}
    assert count_trials(space, 2) == 12


def test_a_retried_trial_keeps_its_gpus_and_a_failed_one_gives_them_back():
    core, link, sched, tc, ts = setup(gpus=2, trials=2)
    a, b = start_all(sched, tc)
    sched.on_trial_error(tc, a)  # Tune retries it: error notice, PENDING, added again
    a.status = Trial.PENDING
    sched.on_trial_add(tc, a)
    assert a.status == Trial.PENDING and len(sched.order) == 2 and "t0" in sched.placed
    sched.on_trial_error(tc, b)  # retries spent: Tune marks it ERROR
    b.status = Trial.ERROR
    sched.choose_trial_to_run(tc)
    assert "t1" in sched.stopped and "t1" not in sched.placed and core.jobs[sched.job_id].spec.gpus == 1


def test_a_trial_still_starting_is_stopped_at_once_when_its_gpu_is_taken():
    core, link, sched, tc, ts = setup(gpus=2, trials=2, grace_s=60.0)
    a, b = start_all(sched, tc)  # neither has reported yet: nothing newer than its checkpoint to save
    with link.lock:
        core.submit({"workload": "tiny", "steps": 100, "gpus": 1, "step_time": 0.1})
    sched.choose_trial_to_run(tc)
    assert len(tc.hard_paused) == 1
    sched.choose_trial_to_run(tc)
    assert sched.log.acks == 1 and len(link.assignment(sched.job_id)["gpus"]) == 1


class PicksLast(FIFOScheduler):
    """An inner scheduler that runs the last waiting trial first, and keeps the trials it paused itself."""

    def __init__(self) -> None:
        super().__init__()
        self.own_pauses: set[str] = set()

    def choose_trial_to_run(self, tc):
        waiting = [t for t in tc.get_trials() if t.status == Trial.PENDING
                   or (t.status == Trial.PAUSED and t.trial_id not in self.own_pauses)]
        return waiting[-1] if waiting else None


def test_the_inner_scheduler_chooses_which_waiting_trial_runs_and_keeps_its_own_pauses():
    core = coordinator(gpus=1, policy="fair")
    inner = PicksLast()
    sched = PCSTuneScheduler(LocalCoordinator(core), num_trials=3, iterations=5, iteration_time=0.1, poll_s=0.0,
                             inner=inner)
    tc = FakeController()
    tc.trials = [FakeTrial(f"t{i}") for i in range(3)]
    for t in tc.trials:
        sched.on_trial_add(tc, t)
    assert all(t.status == Trial.PAUSED for t in tc.trials)  # parked, yet PENDING as the inner one sees them
    [first] = start_all(sched, tc)
    assert first.trial_id == "t2"
    inner.own_pauses.add("t2")  # the inner scheduler pauses it (a HyperBand milestone): its GPU is free again
    first.status = Trial.PAUSED
    [second] = start_all(sched, tc)
    assert second.trial_id == "t1"  # not t2, which waits for the inner scheduler
    second.status = Trial.TERMINATED
    sched.on_trial_complete(tc, second, {"training_iteration": 5})
    inner.own_pauses.discard("t2")
    assert start_all(sched, tc)[0].trial_id == "t2"


def test_a_trial_keeps_the_cpus_its_trainable_asks_for_and_more_gpus_than_the_sweep_gives_is_refused():
    import pytest

    _, _, sched, tc, _ = setup(gpus=2, trials=2)
    asks = SimpleNamespace(required_resources={"CPU": 3.0, "GPU": 0})
    trial = FakeTrial("t9")
    trial.placement_group_factory = asks
    tc.trials.append(trial)
    sched.num_trials += 1
    sched.on_trial_add(tc, trial)
    assert sched.cpus_of["t9"] == 3.0 and sched.cpus_of["t0"] == 1.0  # Tune's default, where none is asked
    greedy = FakeTrial("t10")
    greedy.placement_group_factory = SimpleNamespace(required_resources={"CPU": 1.0, "GPU": 2})
    with pytest.raises(ValueError, match="gpus_per_trial=2"):
        sched.on_trial_add(tc, greedy)


def test_iterations_come_from_the_stop_criterion_and_a_driver_off_the_cluster_submits_nothing(monkeypatch):
    import pytest
    import ray
    from ray import tune

    from pcs_ray.executors.tune import NotOnClusterError, PCSTuner, stop_iterations

    assert stop_iterations({"training_iteration": 10, "done": True}) == 10
    assert stop_iterations({"mean_accuracy": 0.9}) is None and stop_iterations(None) is None
    core = coordinator(gpus=1)
    with pytest.raises(ValueError, match="iterations=N"):
        PCSTuner(lambda config: None, client=LocalCoordinator(core))
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})  # a Ray of the script's own
    with pytest.raises(NotOnClusterError, match="none of pcs-ray's GPUs"):
        PCSTuner(lambda config: None, client=LocalCoordinator(core),
                 run_config=tune.RunConfig(stop={"training_iteration": 3}))
    assert core.jobs == {}  # refused before the sweep was submitted


@pytest.mark.parametrize("error", [RuntimeError("a bug in the driver's callback\nsecond line"), KeyboardInterrupt()])
def test_a_driver_whose_fit_raises_ends_its_sweep_at_once_with_the_reason(monkeypatch, tmp_path, error):
    """Not when its lease runs out (30 s by default): the GPUs go back, ``status`` says why."""
    import ray
    from pcs_ray.executors.tune import PCSTuner

    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # joined: the cluster's GPUs are there
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0, "node0_gpu0": 1.0, "node0_gpu1": 1.0})
    core = coordinator(gpus=2, policy="fair")
    link = LocalCoordinator(core)
    tuner = PCSTuner(lambda config: None, client=link, iterations=3, param_space={"x": {"grid_search": [1, 2]}},
                     storage_path=str(tmp_path))
    assert link.assignment(tuner.job_id)["state"] == "running"
    waiting = link.submit({"workload": "tiny", "steps": 50, "gpus": 2, "step_time": 0.1}).id  # asks for them

    def fit():
        raise error

    monkeypatch.setattr(tuner.tuner, "fit", fit)
    with pytest.raises(type(error)):
        tuner.fit()
    job = core.job_view(tuner.job_id)
    assert job["state"] == "failed" and job["gpus"] == [], job
    assert job["end_reason"]["code"] == "driver-failed"
    assert job["end_reason"]["text"] == f"its driver's fit() raised {type(error).__name__}" + (
        ": a bug in the driver's callback second line" if str(error) else "")
    assert core.job_view(waiting)["state"] == "running"  # the hand-over completed: nothing waits on the lease
    assert tuner.scheduler.ended


def test_a_tune_run_that_returns_with_trials_left_ends_its_sweep_and_one_whose_trials_all_ended_finishes(
        monkeypatch, tmp_path):
    import ray
    from pcs_ray.executors.tune import PCSTuner

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0, "node0_gpu0": 1.0})
    core = coordinator(gpus=1)
    link = LocalCoordinator(core)
    interrupted = PCSTuner(lambda config: None, client=link, iterations=3, storage_path=str(tmp_path / "a"))
    monkeypatch.setattr(interrupted.tuner, "fit", lambda: "results")  # Tune's first Ctrl-C: it returns
    assert interrupted.fit() == "results"
    job = core.job_view(interrupted.job_id)
    assert job["state"] == "failed" and job["end_reason"]["code"] == "driver-failed"
    assert "trials unfinished" in job["end_reason"]["text"]

    fewer = PCSTuner(lambda config: None, client=link, iterations=3, num_samples=2, storage_path=str(tmp_path / "b"))
    tc = FakeController()
    [trial] = tc.trials = [FakeTrial("only")]  # Tune made one trial of the two counted, and it ended
    fewer.scheduler.on_trial_add(tc, trial)
    fewer.scheduler.on_trial_complete(tc, trial, {"training_iteration": 3})
    monkeypatch.setattr(fewer.tuner, "fit", lambda: "results")
    fewer.fit()
    assert core.job_view(fewer.job_id)["state"] == "finished"
