"""What scheduling a Ray Tune sweep through pcs-ray costs: 8 trials on 4 logical GPUs, three ways.

1. ``tune_fifo``: Tune's FIFO scheduler, one GPU per trial, no preemption (the floor).
2. ``pcs_ray``: :class:`pcs_ray.executors.tune.PCSTuneScheduler` on a 4-GPU in-process coordinator
   (``fair`` policy) while another 2-GPU job arrives and leaves a few times, so trials are
   preempted (checkpointed), parked and resumed on the GPUs the coordinator picks.
3. ``tune_pause_resume``: Tune's own pause/resume (what PBT does): a FIFO scheduler that
   PAUSEs trials as often as pcs-ray preempted them; FIFO resumes them at once.

Per-preemption cost, the same way for both: from the moment the scheduler hands a paused
trial back to Tune (pcs-ray: GPUs given again; Tune: FIFO's ``choose_trial_to_run``) to its
next result, less that iteration's own compute time (``iter_s``): actor start, set-up,
restore. The sweep's estimate of seconds per iteration comes from a one-trial calibration
run on this machine. Prints one JSON object (Tune's tables go to stderr). The machine is
shared and its 2 cores back every logical GPU: timings are noisy.

    .venv/bin/python bench/tune_overhead.py [--trials 8 --gpus 4 --iterations 4]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import log, start_ray, summary
from pcs_ray.api import strict_json

COSTS = ("n", "median", "mean")  # what each list of seconds reports


def space(args) -> dict:
    from ray import tune

    lrs = [0.01, 0.02, 0.05, 0.1]
    return {"workload": "tiny_cnn", "iterations": args.iterations, "steps_per_iteration": args.steps_per_iteration,
            "sleep_s": args.sleep_s, "params": {"lr": tune.grid_search(lrs[: max(1, args.trials // 2)]), "momentum": tune.grid_search([0.0, 0.9]),
                       "num_samples": 128}}


class Timeline:
    """Every result's wall time per trial (a Tune callback fills it)."""

    def __init__(self) -> None:
        self.results: dict[str, list[tuple[float, dict]]] = {}
        self.started: dict[str, float] = {}

    def callback(self):
        from ray import tune

        outer = self

        class Collect(tune.Callback):
            def on_trial_start(self, iteration, trials, trial, **info):
                outer.started.setdefault(trial.trial_id, time.monotonic())

            def on_trial_result(self, iteration, trials, trial, result, **info):
                outer.results.setdefault(trial.trial_id, []).append((time.monotonic(), dict(result)))

        return Collect()


def run_tune(args, work: Path, name: str, pauses: int) -> dict:
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    from pcs_ray.executors.tune import session_trainable

    paused_at: dict[str, float] = {}
    resumed_at: dict[str, float] = {}
    budget = {"left": pauses}
    timeline = Timeline()

    class PauseEvery(FIFOScheduler):
        """Pause each trial once at iteration ``k`` (round robin over trials) until ``pauses`` are spent."""

        def on_trial_result(self, tc, trial, result):
            it = result["training_iteration"]
            if budget["left"] > 0 and it < args.iterations and trial.trial_id not in paused_at:
                budget["left"] -= 1
                paused_at[trial.trial_id] = time.monotonic()
                return TrialScheduler.PAUSE
            return TrialScheduler.CONTINUE

        def choose_trial_to_run(self, tc):
            trial = super().choose_trial_to_run(tc)
            if trial is not None and trial.trial_id in paused_at and trial.trial_id not in resumed_at:
                resumed_at[trial.trial_id] = time.monotonic()
            return trial

    began = time.monotonic()
    grid = tune.Tuner(
        tune.with_resources(session_trainable, {"CPU": 1, "GPU": 1}),
        param_space=space(args),
        tune_config=tune.TuneConfig(scheduler=PauseEvery(), reuse_actors=False),
        run_config=tune.RunConfig(name=name, storage_path=str(work), verbose=0, callbacks=[timeline.callback()]),
    ).fit()
    wall = time.monotonic() - began
    costs = []
    for tid, t0 in resumed_at.items():
        after = [(t, r) for t, r in timeline.results[tid] if t > t0]
        if after:
            costs.append(after[0][0] - t0 - after[0][1]["iter_s"])
    first = [timeline.results[tid][0][0] - t0 - timeline.results[tid][0][1]["iter_s"]
             for tid, t0 in timeline.started.items() if timeline.results.get(tid)]
    return {"wall_s": wall, "errors": len(grid.errors), "pauses": len(paused_at), "per_pause_cost_s": summary(costs, COSTS),
            "first_start_cost_s": summary(first, COSTS)}


class Competitor(threading.Thread):
    """A 2-GPU job that arrives, holds its GPUs ``hold_s`` and leaves, ``rounds`` times (accounting only)."""

    def __init__(self, link, rounds: int, hold_s: float, gap_s: float) -> None:
        super().__init__(daemon=True)
        self.link, self.rounds, self.hold_s, self.gap_s = link, rounds, hold_s, gap_s
        self.stop = threading.Event()

    def run(self) -> None:
        for _ in range(self.rounds):
            if self.stop.wait(self.gap_s):
                return
            with self.link.lock:
                jid, _ = self.link.core.submit({"workload": "tiny_cnn", "steps": 1000, "gpus": 2, "step_time": 0.01})
            if self.stop.wait(self.hold_s):
                return
            while not self.stop.is_set():
                with self.link.lock:
                    job = self.link.core.jobs[jid]
                    if job.state == "running":
                        self.link.core.run_ended(jid, job.attempt, "finished", 1000)
                        break
                time.sleep(0.1)


def run_pcs(args, work: Path, trial_startup_s: float) -> dict:
    from pcs_ray.executors.tune import PCSTuner, session_trainable
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.coordinator import Coordinator, Journal
    from pcs_ray.coordinator.local import LocalCoordinator
    from pcs_ray.policies import build_policy

    core = Coordinator(ClusterSpec.homogeneous(args.gpus, args.gpus), build_policy("fair"), Journal(":memory:"),
                       checkpoint_root=work / "ckpt", workloads=("tiny_cnn",), restart_overhead=3.0)
    link = LocalCoordinator(core)
    competitor = Competitor(link, args.rounds, hold_s=args.hold_s, gap_s=args.gap_s)
    began = time.monotonic()
    tuner = PCSTuner(session_trainable, param_space=space(args), iterations=args.iterations, client=link,
                     iteration_time=args.iteration_time, trial_startup_s=trial_startup_s, storage_path=str(work),
                     name="pcs", grace_s=20)
    predicted_after_s = time.monotonic() - began
    first = tuner.predict()
    samples: list[tuple[float, float]] = []  # (when, predicted completion), both relative to the epoch
    done = threading.Event()

    def sample() -> None:
        while not done.wait(2.0):
            samples.append((core.now(), tuner.predict()["predicted_completion"] - core.epoch))

    sampler = threading.Thread(target=sample, daemon=True)
    competitor.start()
    sampler.start()
    try:
        grid = tuner.fit()
    finally:
        done.set()
        competitor.stop.set()
        competitor.join(10)
    wall = time.monotonic() - began
    sweep = core.jobs[tuner.job_id]
    jct = sweep.finish - sweep.submit
    predicted = first["predicted_completion"] - core.epoch - sweep.submit
    sched = tuner.scheduler
    mid = min(samples, key=lambda s: abs(s[0] - sweep.submit - jct / 2), default=None)
    return {
        "wall_s": wall, "errors": len(grid.errors), "pauses": len(sched.log.pauses), "hard_stops": sched.log.hard_stops,
        "acknowledged_changes": sched.log.acks, "coordinator_preemptions": sweep.preemptions,
        "per_pause_cost_s": summary(sched.log.resumes, COSTS), "first_start_cost_s": summary(sched.log.startups, COSTS),
        "prediction": {"available_after_s": predicted_after_s, "predicted_jct_s": predicted, "actual_jct_s": jct,
                       "error_pct": 100 * abs(jct - predicted) / predicted,
                       "mid_run_error_pct": None if mid is None else 100 * abs(sweep.finish - mid[1]) / (mid[1] - sweep.submit),
                       "note": "at submission and at half the run; the competitor's later arrivals are unknown to it"},
    }


def calibrate(args) -> float:
    """Seconds per iteration of one trial alone on this machine (what a user would measure once)."""
    from pcs_ray.executors.tune_trial import reference_run

    one = {"workload": "tiny_cnn", "iterations": 2, "steps_per_iteration": args.steps_per_iteration,
           "params": {"num_samples": 128}}
    reference_run({**one, "iterations": 1})  # warm caches and imports
    began = time.perf_counter()
    reference_run(one)
    return (time.perf_counter() - began) / 2 + args.sleep_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--steps-per-iteration", type=int, default=2)
    ap.add_argument("--iteration-time", type=float, default=None, help="default: measured by a calibration run")
    ap.add_argument("--sleep-s", type=float, default=1.0,
                    help="added to every iteration, so trials train for a while after their start-up (else every "
                         "preemption lands on a trial still starting)")
    ap.add_argument("--rounds", type=int, default=3, help="competitor arrivals (forced preemptions)")
    ap.add_argument("--hold-s", type=float, default=6.0)
    ap.add_argument("--gap-s", type=float, default=4.0)
    args = ap.parse_args()

    if args.iteration_time is None:
        args.iteration_time = calibrate(args)
        log(f"calibrated: {args.iteration_time:.2f} s per iteration")
    ray = start_ray(args.gpus, cpus=args.gpus, logging_level="ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="tune-overhead-") as tmp, contextlib.redirect_stdout(sys.stderr):
            work = Path(tmp)
            log("tune FIFO, no preemption")
            fifo = run_tune(args, work, "fifo", pauses=0)
            log("pcs-ray with a competing job")
            # The sweep's start-up estimate: what the previous sweep on this cluster measured.
            startup = fifo["first_start_cost_s"]["median"] or 5.0
            pcs = run_pcs(args, work, startup)
            pcs["trial_startup_estimate_s"] = startup
            preemptions = pcs["pauses"] + pcs["hard_stops"]
            log(f"tune pause/resume x{preemptions}")
            pbt = run_tune(args, work, "pause", pauses=max(1, preemptions))
    finally:
        ray.shutdown()
    print(strict_json.dumps({
        "trials": args.trials, "gpus": args.gpus, "iterations": args.iterations,
        "iteration_time_estimate_s": args.iteration_time, "tune_fifo": fifo, "pcs_ray": pcs,
        "tune_pause_resume": pbt,
        "pcs_over_fifo_wall": pcs["wall_s"] / fifo["wall_s"],
        "note": "pcs_ray also loses GPUs to the competing job for part of its run; compare per-pause costs for overhead",
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
