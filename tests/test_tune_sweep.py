"""A Ray Tune sweep scheduled by pcs-ray: preempted and resumed while another job comes and goes.

The coordinator core runs in-process (Ray-free, behind ``LocalCoordinator``)
with a 2-GPU cluster whose GPUs are the ``node0_gpu0/1`` custom resources of
the session's local Ray. The competing job is a runner job whose start and
finish this test plays (it holds GPUs in the coordinator's accounting only);
the sweep's trials are real Tune trials training tiny_cnn on CPU.
"""

from __future__ import annotations

import pytest

import threading
import time

from pcs_ray.executors.tune_trial import reference_run
from pcs_ray.coordinator.local import LocalCoordinator
from builders import coordinator

pytestmark = pytest.mark.slow  # Ray Tune sweeps with real training

ITERS, STEPS_PER_ITER = 5, 2


def _coordinator(tmp_path, gpus=2, policy="srsf"):
    return LocalCoordinator(coordinator(gpus=gpus, policy=policy, checkpoint_root=tmp_path / "ckpt", workloads=("tiny_cnn",),
                                        restart_overhead=2.0))


class _Competitor(threading.Thread):
    """Another, shorter job (SRSF runs it first): a 1-GPU job that holds a GPU before the sweep arrives,
    leaves, and comes back ``rounds`` times as a 2-GPU job while a trial is mid-training; it leaves
    once the sweep has given its GPUs up."""

    def __init__(self, link, rounds: int) -> None:
        super().__init__(daemon=True)
        self.link, self.rounds = link, rounds
        self.stop = threading.Event()
        self.sched = None
        self.first = self._arrive()

    def _arrive(self, gpus: int = 1) -> int:
        with self.link.lock:
            jid, _ = self.link.core.submit({"workload": "tiny_cnn", "steps": 1000, "gpus": gpus, "step_time": 0.01})
            return jid

    def _leave(self, jid: int) -> None:
        while not self.stop.is_set():  # it can finish only once it has started (its GPU may be being vacated)
            with self.link.lock:
                job = self.link.core.jobs[jid]
                if job.state == "running":
                    self.link.external_ended(jid, job.attempt, "finished", 1000)  # plays its runner's end
                    return
            time.sleep(0.1)

    def _until(self, cond, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while not self.stop.is_set() and time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(0.1)
        return False

    def _mid_training(self) -> bool:
        s = self.sched
        return any(p.trial.status == "RUNNING" and tid not in s._chosen_at and 0 < s.done_iters.get(tid, 0) < ITERS - 1
                   for tid, p in list(s.placed.items()))

    def run(self) -> None:
        s = self.sched
        self._until(lambda: any(s.done_iters.values()))
        self._leave(self.first)
        for _ in range(self.rounds):
            if not self._until(self._mid_training):
                return
            jid = self._arrive(gpus=2)
            self._leave(jid)


def _config(lr, momentum):
    return {"workload": "tiny_cnn", "params": {"lr": lr, "momentum": momentum, "num_samples": 128},
            "iterations": ITERS, "steps_per_iteration": STEPS_PER_ITER, "sleep_s": 2.0}


def test_sweep_is_preempted_resumed_pinned_and_bitwise_identical(ray_local, tmp_path):
    from ray import tune

    from pcs_ray.executors.tune import PCSTuner, session_trainable

    link = _coordinator(tmp_path)
    competitor = _Competitor(link, rounds=2)  # holds a GPU before the sweep arrives
    results: list[dict] = []

    class Collect(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            results.append({"trial": trial.trial_id, **{k: result[k] for k in (
                "pid", "training_iteration", "step", "gpu_resources", "cuda_visible_devices", "loss", "weights_sha256")}})

    began = time.time()
    tuner = PCSTuner(
        session_trainable,
        param_space={**_config(tune.grid_search([0.05, 0.1, 0.02]), tune.grid_search([0.0, 0.9])),
                     "iterations": ITERS},
        iterations=ITERS, client=link, iteration_time=0.5, storage_path=str(tmp_path / "tune"), grace_s=20,
        callbacks=[Collect()],
    )
    prediction = tuner.predict()
    assert prediction["predicted_completion"] > began  # how soon it comes, and how close: bench/tune_overhead.py
    assert len(link.assignment(tuner.job_id)["gpus"]) == 1  # the competitor holds the other GPU
    competitor.sched = tuner.scheduler
    competitor.start()
    try:
        grid = tuner.fit()
    finally:
        competitor.stop.set()
        competitor.join(10)
    sched = tuner.scheduler
    assert not grid.errors, grid.errors
    assert len(grid) == 6

    # Preempted and resumed several times, never losing or repeating an iteration.
    assert sched.log.acks >= 2 and len(sched.log.pauses) + sched.log.hard_stops >= 2, sched.log
    resumed = [tid for tid, p in sched.log.placements.items() if len(p) >= 2]
    assert resumed, sched.log.placements
    by_trial: dict[str, list[dict]] = {}
    for r in results:
        by_trial.setdefault(r["trial"], []).append(r)
    # Resumed mid-training: a trial's results come from another process after a preemption.
    moves = sum(sum(1 for x, y in zip(rs, rs[1:]) if x["pid"] != y["pid"]) for rs in by_trial.values())
    assert moves >= 2, by_trial
    for tid, rs in by_trial.items():
        iters = [r["training_iteration"] for r in rs]
        assert iters == list(range(1, ITERS + 1)), (tid, iters)
        assert [r["step"] for r in rs] == [STEPS_PER_ITER * i for i in iters]
        # Pinned: every result came from GPUs the coordinator assigned to this trial.
        placed = {",".join(g) for g in sched.log.placements[tid]}
        for r in rs:
            assert r["gpu_resources"] in placed, (r, placed)
            assert r["cuda_visible_devices"] == ",".join(g.rsplit("_gpu", 1)[1] for g in r["gpu_resources"].split(","))
    assert {g for p in sched.log.placements.values() for gs in p for g in gs} <= {"node0_gpu0", "node0_gpu1"}

    # Bitwise identical to uninterrupted runs.
    for result in grid:
        ref = reference_run(result.config)
        assert result.metrics["weights_sha256"] == ref["weights_sha256"]
        assert result.metrics["loss"] == ref["loss"] and result.metrics["step"] == ref["step"]

    final = link.core.jobs[tuner.job_id]
    assert final.state == "finished" and final.steps == 6 * ITERS and final.preemptions >= 2


def test_asha_stopped_trial_frees_its_gpu_for_another_job(ray_local, tmp_path):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from pcs_ray.executors.tune import PCSTuner, session_trainable

    link = _coordinator(tmp_path, policy="fifo")
    good = {"params": {"lr": 0.05, "momentum": 0.9, "num_samples": 128}}
    slow = {**good, "sleep_s": 2.5}  # the same, slower (ASHA ties continue): still training when ...
    bad = {"params": {"lr": 2.0, "momentum": 0.9, "num_samples": 128}}  # ... this one starts (after good) and is cut
    tuner = PCSTuner(
        session_trainable,
        param_space={"workload": "tiny_cnn", "iterations": 6, "steps_per_iteration": 1, "sleep_s": 0.2,
                     "variant": tune.grid_search([good, slow, bad])},
        iterations=6, client=link, iteration_time=0.5, storage_path=str(tmp_path / "tune"), metric="loss", mode="min",
        scheduler=ASHAScheduler(time_attr="training_iteration", max_t=6, grace_period=1, reduction_factor=2),
    )
    assert len(link.assignment(tuner.job_id)["gpus"]) == 2
    with link.lock:  # FIFO: another job waits behind the sweep, which holds both GPUs
        other, _ = link.core.submit({"workload": "tiny_cnn", "steps": 10, "gpus": 1, "step_time": 0.1})
    assert link.core.jobs[other].state == "queued"
    grid = tuner.fit()
    assert not grid.errors
    sched = tuner.scheduler
    stopped = {(r.config["variant"]["params"]["lr"], "sleep_s" in r.config["variant"]): r.metrics["training_iteration"] for r in grid}
    assert stopped[2.0, False] < 6 and stopped[0.05, False] == stopped[0.05, True] == 6 and len(sched.log.stopped_early) == 1
    sweep, started = link.core.jobs[tuner.job_id], link.core.jobs[other]
    # The other job got a GPU while the sweep's remaining trial was still training.
    assert started.first_start is not None and started.first_start < sweep.finish
    assert sweep.spec.gpus == 1 and sweep.state == "finished"
