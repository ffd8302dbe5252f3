"""The training loop in-process (no Ray): determinism across stops, data order, emulation, reports."""

from __future__ import annotations

import itertools
import time

import pytest
import torch

from pcs_ray.executors import training
from pcs_ray.contract import GPUSlot, RunRequest
from pcs_ray.executors.checkpoint import LATEST, load_checkpoint
from pcs_ray.executors.emulation import StepBudget
from pcs_ray.executors.training import DataStream, ProgressReporter, run_training, shard
from pcs_ray.workloads.device_model import emulated_step_s, reference_step_s
from builders import Clock, wait_until

pytestmark = pytest.mark.slow  # real training steps


def _request(directory, total_steps=9, **kw) -> RunRequest:
    kw.setdefault("params", {"seed": 11, "num_samples": 40})  # 40 samples / batch 8: epochs turn over during the run
    return RunRequest("job", "tiny_cnn", total_steps, (GPUSlot("node0", 0),), str(directory), **kw)


def _stop_after(n_steps: int):
    calls = itertools.count()
    return lambda: next(calls) >= n_steps


def _weights(directory) -> dict:
    return load_checkpoint(directory).state["model"]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_stopped_and_resumed_three_times_is_bitwise_identical(tmp_path):
    whole = run_training(_request(tmp_path / "whole"))
    assert whole.status == "finished" and whole.step == 9
    starts = []
    for _ in range(3):
        part = run_training(_request(tmp_path / "parts"), _stop_after(2))
        assert part.status == "preempted"
        starts.append((part.start_step, part.step))
    last = run_training(_request(tmp_path / "parts"))
    assert starts == [(0, 2), (2, 4), (4, 6)] and (last.start_step, last.step, last.status) == (6, 9, "finished")
    assert _same(_weights(tmp_path / "whole"), _weights(tmp_path / "parts"))
    assert load_checkpoint(tmp_path / "parts").state["data"] == {"samples_seen": 72, "epoch": 1, "offset": 32}


def test_a_lost_rng_state_would_be_detected(tmp_path):
    """Guard for the test above: resuming without the RNG states (dropout masks differ) changes the weights."""
    run_training(_request(tmp_path / "whole"))
    run_training(_request(tmp_path / "parts"), _stop_after(4))
    original = training.restore_rng_state
    try:
        training.restore_rng_state = lambda state: torch.manual_seed(12345)
        run_training(_request(tmp_path / "parts"))
    finally:
        training.restore_rng_state = original
    assert not _same(_weights(tmp_path / "whole"), _weights(tmp_path / "parts"))


def test_periodic_checkpoints_and_resume_from_previous_after_corruption(tmp_path):
    with pytest.warns(UserWarning, match="previous"):
        run_training(_request(tmp_path / "a", checkpoint_every=3), _stop_after(7))  # checkpoints at 3, 6, then 7 on stop
        (tmp_path / "a" / "latest" / LATEST).write_bytes(b"garbage")  # the newest committed checkpoint's file
        resumed = run_training(_request(tmp_path / "a"))
    assert resumed.start_step == 6 and resumed.step == 9
    assert any("resumed from previous/" in note for note in resumed.notes)
    run_training(_request(tmp_path / "b"))
    assert _same(_weights(tmp_path / "a"), _weights(tmp_path / "b"))  # redoing step 7 changes nothing


def test_stop_before_the_first_step_writes_nothing_and_finished_job_stays_finished(tmp_path):
    out = run_training(_request(tmp_path, total_steps=3), lambda: True)
    assert out.status == "preempted" and out.step == 0 and load_checkpoint(tmp_path) is None
    run_training(_request(tmp_path, total_steps=3))
    again = run_training(_request(tmp_path, total_steps=3))
    assert (again.status, again.start_step, again.step) == ("finished", 3, 3)


def test_checkpoint_of_another_workload_is_refused(tmp_path):
    run_training(_request(tmp_path, total_steps=1))
    refused = run_training(RunRequest("job", "transformer", 2, (GPUSlot("n", 0),), str(tmp_path)))
    assert refused.status == "failed" and not refused.fatal  # a runner's outcome, as every failure is
    assert refused.error.startswith("ValueError: checkpoint is for workload 'tiny_cnn', not 'transformer'")


def test_data_stream_order_is_a_function_of_position():
    whole = DataStream(10, seed=3)
    batches = [whole.next_batch(4) for _ in range(5)]  # 20 samples: two full epochs
    assert sorted(batches[0] + batches[1] + batches[2][:2]) == list(range(10))
    resumed = DataStream(10, seed=3, samples_seen=8)
    assert resumed.next_batch(4) == batches[2]
    assert DataStream(10, seed=4).next_batch(10) != DataStream(10, seed=3).next_batch(10)


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_shards_cover_the_global_batch_in_order(world):
    batch = list(range(100, 108))
    parts = [shard(batch, r, world) for r in range(world)]
    assert sum(parts, []) == batch
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_an_emulated_step_takes_its_budget_and_a_late_step_is_caught_up_on_the_schedule():
    clock = Clock(100.0)
    budget = StepBudget(0.5, clock=clock, sleep=clock.sleep)
    durations = []
    for compute in (0.1, 0.45, 0.7, 0.2, 0.1):
        budget.begin()
        clock.t += compute
        durations.append(budget.end())
    # the 0.7 s step ran 0.2 s late; the next step waited 0.2 s less, so the run is back on its device's schedule
    assert durations == pytest.approx([0.5, 0.5, 0.7, 0.3, 0.5])
    assert clock.slept == pytest.approx([0.4, 0.05, 0.1, 0.4])
    assert (budget.overruns, budget.late_steps, budget.steps) == (0, 1, 5)
    assert budget.max_lag_s == pytest.approx(0.2) and budget.dropped_s == 0
    assert budget.load == pytest.approx(1.55 / 2.5)
    assert "kept its device's pace" in budget.describe()
    with pytest.raises(ValueError):
        StepBudget(0.0)


def test_a_runs_first_step_is_warm_up_not_lag():
    clock = Clock(100.0)
    budget = StepBudget(0.5, clock=clock, sleep=clock.sleep)
    durations = []
    for compute in (1.2, 0.1):
        budget.begin()
        clock.t += compute
        durations.append(budget.end())
    assert durations == pytest.approx([1.2, 0.5]) and clock.slept == pytest.approx([0.4])
    assert budget.warmup_s == pytest.approx(0.7) and (budget.overruns, budget.late_steps) == (0, 0)


def test_falling_over_a_step_behind_the_device_is_an_overrun_and_a_long_stall_is_not_sprinted_back():
    clock = Clock(100.0)
    budget = StepBudget(0.1, clock=clock, sleep=clock.sleep)
    for compute in (0.05, 0.25, 0.04, 0.05, 0.05, 3.0, 0.0):
        budget.begin()
        clock.t += compute
        budget.end()
    # 0.15 s behind after the 0.25 s step (over one budget: an overrun), 0.09 after the next (not over), then caught
    # up; the 3 s stall owes 2.9 s, of which only 10 budgets are kept on the schedule; catching up is no overrun
    assert budget.overruns == 2 and budget.late_steps == 2
    assert budget.dropped_s == pytest.approx(2.9 - 1.0) and budget.max_lag_s == pytest.approx(2.9)
    assert "over a step behind its device on 2 of 7 steps" in budget.describe()


def test_waking_late_is_paid_back_so_the_emulated_pace_holds_on_average():
    clock = Clock(100.0, late=0.01)
    budget = StepBudget(0.1, clock=clock, sleep=clock.sleep)
    began = clock.t
    for _ in range(50):
        budget.begin()
        clock.t += 0.03
        budget.end()
    assert clock.t - began == pytest.approx(50 * 0.1, abs=0.011)  # without the carry: 50 * 0.11
    assert budget.overruns == 0


def test_logical_gpus_run_each_step_in_the_emulated_devices_time(tmp_path):
    target = _FakeActor()
    # A device 10x slower than nominal: a 1 s budget per step, far above what a tiny step takes here even on a
    # busy machine, so every step must wait for its device and none may overrun.
    budget_s = emulated_step_s("tiny_cnn", {"seed": 11, "num_samples": 40}, 1, 10.0)
    out = run_training(_request(tmp_path, total_steps=3, slowdown=10.0, reporter=target, report_interval_s=0.0))
    assert out.emulated and out.emulated_step_s == pytest.approx(budget_s)
    assert budget_s == pytest.approx(10.0 * reference_step_s("tiny_cnn", {}))
    assert any(f"{budget_s:.4g} s per step" in n for n in out.notes)
    assert out.overruns == 0, out.notes
    assert target.calls[0][0][1:] == (0, None)  # the loop began: no step time yet
    mean = sum(args[2] for args, _ in target.calls[1:]) / 3  # a late wake-up is paid back at the next step
    assert budget_s * 0.95 <= mean <= budget_s * 1.5


def test_a_machine_too_small_for_its_emulated_gpus_reports_every_overrun(tmp_path):
    target = _FakeActor()
    # a GPU 10^5 times faster than nominal: no real step fits its budget
    out = run_training(_request(tmp_path, total_steps=3, slowdown=1e-5, reporter=target, report_interval_s=0.0))
    # the first step is warm-up; each later one leaves the run further behind
    assert out.overruns == 2 and out.late_steps == 2
    assert any("over a step behind its device on 2 of 3 steps" in n for n in out.notes)
    assert target.calls[0][0][1:] == (0, None)  # the loop began
    assert [kw.get("overruns") for _, kw in target.calls[1:]] == [None, 1, 2]


class _FakeActor:
    def __init__(self):
        self.calls = []
        self.report_progress = self

    def remote(self, *args, **kwargs):
        self.calls.append((args, kwargs))


def test_real_gpu_progress_reports_wall_clock_seconds_per_step_between_reports(monkeypatch):
    """Checkpoints and data loading between steps delay a real job's finish: reports carry them."""
    import pcs_ray.executors.training as training

    clock = iter([100.0, 101.0, 103.0, 103.5])
    monkeypatch.setattr(training.time, "monotonic", lambda: next(clock))
    target = _FakeActor()
    reporter = ProgressReporter(target, "j", interval_s=1.0, emulated=False)
    reporter.step_done(1, 0.2)  # the first step alone
    reporter.step_done(5, 0.2)  # 4 steps of 0.2 s compute in 1 s of wall clock: a checkpoint between them
    reporter.step_done(9, 0.2)  # 4 steps in 2 s
    reporter.step_done(10, 0.2)  # under the interval: not sent
    assert [(args[1], args[2]) for args, _ in target.calls] == [(1, 0.2), (5, 0.25), (9, 0.5)]
    assert all(kw == {"emulated": False} for _, kw in target.calls)


def test_a_step_held_back_by_the_interval_is_sent_once_the_loop_goes_quiet():
    """Steps 1-10, 0.05 s apart, then a pause (an evaluation): the coordinator hears of step 10 within a
    second of it, not at the next step, however long the pause."""
    target = _FakeActor()
    reporter = ProgressReporter(target, "j", interval_s=1.0, emulated=True)
    for step in range(1, 11):
        reporter.step_done(step, 0.05)
        time.sleep(0.05)
    assert [args[1] for args, _ in target.calls] == [1]  # the rest held back by the interval, so far
    last = time.monotonic()
    wait_until(lambda: len(target.calls) == 2, timeout=3.0, every=0.01)
    assert target.calls[1][0][1] == 10 and time.monotonic() - last <= 1.0 + 0.3
    time.sleep(1.2)
    assert len(target.calls) == 2  # sent once
    reporter.step_done(11, 0.05)  # the interval has passed: at once
    reporter.step_done(12, 0.05)
    reporter.close()  # the run ended: what was held back is not sent after it
    time.sleep(1.2)
    assert [args[1] for args, _ in target.calls] == [1, 10, 11]


def test_progress_is_reported_throttled_with_the_emulation_flag(tmp_path):
    target = _FakeActor()
    reporter = ProgressReporter(target, "j", interval_s=3600, emulated=True)
    for step in range(1, 6):
        reporter.step_done(step, 0.5)
    assert target.calls == [(("j", 1, 0.5), {"emulated": True})]  # first step at once, then at most one per interval
    target = _FakeActor()
    run_training(_request(tmp_path, total_steps=4, reporter=target, report_interval_s=0.0))
    assert target.calls[0][0][1:] == (0, None)  # the loop began (the hang guard's clock starts), then each step
    assert [args[1] for args, _ in target.calls[1:]] == [1, 2, 3, 4]
    # (an "overruns" count comes along only when the machine could not keep up with the emulated GPU)
    assert all(args[2] > 0 and kw["emulated"] is True and set(kw) <= {"emulated", "overruns"}
               for args, kw in target.calls[1:])
