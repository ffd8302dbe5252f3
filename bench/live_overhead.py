"""Live-system overhead benchmark: part (a) of issue 5 item 7 (part (b) is bench/coordinator_latency.py), and issue 12's warm runners.

(a) Preempt -> resume cycle of a ResNet-18 job (batch 32, CIFAR-10-format
    data), measured in one run, side by side:

    - pcs-ray: ``RunHandle.request_stop()`` -> the runner finishes its step,
      checkpoints (model, optimizer, RNG, data position), exits -> ``launch``
      on *other* GPUs (a fresh actor pinned by custom resource) -> restored.
    - Ray Tune: a ``TrialScheduler`` returns PAUSE on a result -> Tune saves
      and stops the trial actor -> the FIFO scheduler resumes the paused
      trial in a new actor (Tune cannot choose GPUs) -> restored.

    Both train through the same ``pcs_ray.executors.training.TrainingSession`` and
    write the same checkpoint format. A cycle is measured from the end of
    the last training step before the preemption to the moment the resumed
    process has restored its state and could train (``cycle_s``); the time
    to the first resumed step done is reported too. Our figure includes the
    checkpoint write after the stop request; for Tune the trainable writes
    its checkpoint on the step it is paused at (it knows the pause steps in
    advance, which favours Tune: a real Tune job must checkpoint every
    reported step to be paused without losing work).

    Warm runners (issue 12): the same cycle handed to the warm pool's runners
    (``pcs_ray.executors.pool``: one long-lived process per GPU, nothing to start or
    import; ``pcs_ray_warm``, ``warm_over_tune_median``, target <= 0.2), and
    a job's fresh start on warm runners against a cold start (``job_start``,
    from the launch call to ready to train; target <= 1 s median). The pool's
    own start-up (once per GPU) is not timed.

Prints one JSON object (stdout); progress goes to stderr. Timings are
wall-clock on a shared 2-core machine: noisy when others run CPU work.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import common
from common import log, summary
from pcs_ray.api import strict_json

NODES = {"node0": 4, "node1": 4}


def start_ray(address: str | None, temp_dir: str) -> None:
    if address:
        import ray

        ray.init(address=address, log_to_driver=False)
        return
    common.start_ray(NODES, cpus=4, _temp_dir=temp_dir)


# ----------------------------------------------------------------------------- pcs-ray


def warm_gpus():
    """The GPUs the runs below move across (a different one every attempt), which the warm pool covers."""
    from pcs_ray.contract import GPUSlot

    return [GPUSlot(f"node{a % 2}", a % 4) for a in range(4)]


def bench_pcs_ray(workload: str, params: dict, cycles: int, steps_between: int, work: Path, overlap: bool,
                  pool=None) -> dict:
    """``overlap``: launch the next run with ``after=`` right after the stop request (process start and
    imports overlap the stop); otherwise launch it once the stopped run's outcome is in (as the coordinator
    does). ``pool``: hand the runs to its warm runners instead of starting runner processes."""
    import ray

    from pcs_ray.contract import GPUSlot, RunRequest
    from pcs_ray.executors.launch import launch

    if pool is not None:
        launch = pool.launch

    @ray.remote(num_cpus=0)
    class Recorder:
        def __init__(self):
            self.step = 0

        def report_progress(self, job_id, step, step_time_s, **extra):
            self.step = max(self.step, step)

        def latest(self):
            return self.step

    recorder = Recorder.remote()
    name = ("warm-" if pool is not None else "") + ("overlapped" if overlap else "sequential")

    def request(attempt: int) -> RunRequest:
        gpu = GPUSlot(f"node{attempt % 2}", attempt % 4)  # a different GPU every time
        return RunRequest("bench", workload, 10**6, (gpu,), str(work / name), params=params, attempt=attempt, reporter=recorder, report_interval_s=0.0)

    runs = []
    launched, handle = time.time(), launch(request(0))
    for attempt in range(cycles + 1):
        start = runs[-1]["outcome"].step if runs else 0
        target = start + (steps_between if attempt < cycles else 1)
        while ray.get(recorder.latest.remote()) < target:
            time.sleep(0.01)
        stop_requested = time.time()
        handle.request_stop()
        if overlap and attempt < cycles:
            next_launched, next_handle = time.time(), launch(request(attempt + 1), after=handle.done)
        outcome = handle.outcome(timeout=600)
        if outcome.status != "preempted":
            raise RuntimeError(f"pcs-ray run ended {outcome.status}: {outcome.error}")
        runs.append({"outcome": outcome, "launched": launched, "stop_requested": stop_requested})
        log(f"pcs-ray ({name}) attempt {attempt} on {outcome.gpus[0].node}/gpu{outcome.gpus[0].index}: steps {outcome.start_step}->{outcome.step}")
        if attempt < cycles:
            if not overlap:
                next_launched, next_handle = time.time(), launch(request(attempt + 1))
            launched, handle = next_launched, next_handle
    cycles_out = []
    for old, new in zip(runs, runs[1:]):
        t_old, t_new = old["outcome"].timings, new["outcome"].timings
        cycles_out.append(
            {
                "cycle_s": t_new["restored"] - t_old["last_step_end"],
                "to_first_step_s": t_new["first_step"] - t_old["last_step_end"],
                "checkpoint_s": t_old["saved"] - t_old["last_step_end"],
                "relaunch_after_saved_s": new["launched"] - t_old["saved"],
                "actor_start_s": max(0.0, t_new["actor_created"] - new["launched"]),
                "imports_s": max(0.0, t_new["warmed"] - max(t_new["actor_created"], new["launched"])),
                "restore_s": t_new["restored"] - t_new["run_called"],
                "waited_for_step_s": t_old["last_step_end"] - old["stop_requested"],
                "runner": new["outcome"].runner,
                "steps": [new["outcome"].start_step, new["outcome"].step],
                "gpu": [new["outcome"].gpus[0].node, new["outcome"].gpus[0].index],
            }
        )
    step_times = [r["outcome"].step_time_s for r in runs if r["outcome"].step_time_s]
    return {"cycles": cycles_out, "cycle_s": summary([c["cycle_s"] for c in cycles_out]), "to_first_step_s": summary([c["to_first_step_s"] for c in cycles_out]), "step_time_s": summary(step_times)}


def bench_job_start(workload: str, params: dict, starts: int, work: Path, pool) -> dict:
    """Fresh starts of a job, warm (handed to the pool's runners) and cold (runner processes started for it),
    alternated: ``start_s`` is from the launch call to the state built and restored, ready to train;
    ``to_first_step_s`` adds the first (emulated) step."""
    from pcs_ray.contract import RunRequest
    from pcs_ray.executors.launch import launch

    gpus = warm_gpus()
    out: dict[str, list] = {"warm": [], "cold": []}
    for k in range(starts):
        for kind in ("warm", "cold"):
            request = RunRequest(f"start-{kind}-{k}", workload, 1, (gpus[k % len(gpus)],), str(work / f"start-{kind}-{k}"),
                                 params=params)
            outcome = (pool.launch if kind == "warm" else launch)(request).outcome(timeout=600)
            if outcome.status != "finished" or outcome.runner != kind:
                raise RuntimeError(f"{kind} start ended {outcome.status} on a {outcome.runner} runner: {outcome.error}")
            t = outcome.timings
            out[kind].append({"start_s": t["restored"] - t["launched"], "to_first_step_s": t["first_step"] - t["launched"]})
            log(f"{kind} start {k}: {out[kind][-1]['start_s']:.3f} s to ready, {out[kind][-1]['to_first_step_s']:.3f} s to the first step")
    return {kind: {"start_s": summary([r["start_s"] for r in rows]), "to_first_step_s": summary([r["to_first_step_s"] for r in rows]),
                   "runs": rows} for kind, rows in out.items()}


# ----------------------------------------------------------------------------- Ray Tune


def tune_trainable(config: dict) -> None:
    """The same training as a runner, as a Tune function trainable (checkpoints on the pause steps)."""
    from ray import tune

    from pcs_ray.executors.checkpoint import load_checkpoint, save_checkpoint
    from pcs_ray.executors.training import TrainingSession

    started = time.time()
    session = TrainingSession(config["workload"], config["params"])
    restored_at = None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            session.restore(load_checkpoint(directory).state)
        restored_at = time.time()
    while session.step < config["total_steps"]:
        began = time.perf_counter()
        session.train_step()
        metrics = {"step": session.step, "step_end": time.time(), "step_time_s": time.perf_counter() - began, "restored_at": restored_at, "started_at": started}
        restored_at = None
        if session.step in config["pause_steps"] or session.step == config["total_steps"]:
            with tempfile.TemporaryDirectory() as directory:
                save_checkpoint(directory, session.snapshot(session.rng_states()))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))
        else:
            tune.report(metrics)


def bench_tune(workload: str, params: dict, cycles: int, steps_between: int, work: Path) -> dict:
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    pause_steps = [steps_between * (i + 1) for i in range(cycles)]
    pauses: dict[int, float] = {}

    class PauseAtSteps(FIFOScheduler):
        """Pause the trial once at each of ``pause_steps``; FIFO resumes paused trials."""

        def on_trial_result(self, tune_controller, trial, result):
            step = result["step"]
            if step in pause_steps and step not in pauses:
                pauses[step] = time.time()
                log(f"tune: pausing at step {step}")
                return TrialScheduler.PAUSE
            return TrialScheduler.CONTINUE

    results: list[dict] = []

    class Collect(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            results.append(dict(result))

    tuner = tune.Tuner(
        tune.with_resources(tune_trainable, {"cpu": 1}),
        param_space={"workload": workload, "params": params, "pause_steps": pause_steps, "total_steps": pause_steps[-1] + 1},
        tune_config=tune.TuneConfig(scheduler=PauseAtSteps(), num_samples=1),
        run_config=tune.RunConfig(storage_path=str(work / "tune"), name="pause-resume", verbose=0, callbacks=[Collect()]),
    )
    with contextlib.redirect_stdout(sys.stderr):  # Tune prints tables to stdout; ours is JSON only
        grid = tuner.fit()
    if grid.errors:
        raise RuntimeError(f"tune trial failed: {grid.errors[0]}")
    by_step = {r["step"]: r for r in results}
    cycles_out = []
    for step in pause_steps:
        before, after = by_step[step], by_step[step + 1]
        if after.get("restored_at") is None:
            raise RuntimeError(f"tune did not restore after the pause at step {step}")
        cycles_out.append(
            {
                "cycle_s": after["restored_at"] - before["step_end"],
                "to_first_step_s": after["step_end"] - before["step_end"],
                "pause_decided_after_s": pauses[step] - before["step_end"],
                "actor_start_s": after["started_at"] - pauses[step],
                "steps": [step, step + 1],
            }
        )
    step_times = [r["step_time_s"] for r in results]
    return {"cycles": cycles_out, "cycle_s": summary([c["cycle_s"] for c in cycles_out]), "to_first_step_s": summary([c["to_first_step_s"] for c in cycles_out]), "step_time_s": summary(step_times)}


def bench_preempt_resume(args) -> dict:
    from pcs_ray.executors.pool import WarmPool

    params = {"seed": 0, "batch_size": args.batch_size, "threads": args.threads}
    with tempfile.TemporaryDirectory(prefix="pcs-live-") as tmp:
        work = Path(tmp)
        log("warm pool: starting one runner per GPU used below (not timed)")
        pool = WarmPool(warm_gpus())
        pool.ready(timeout=600)
        log(f"pcs-ray: {args.cycles} preempt->resume cycles of {args.workload}, relaunch after the stop")
        ours = bench_pcs_ray(args.workload, params, args.cycles, args.steps_between, work, overlap=False)
        log(f"pcs-ray: {args.cycles} preempt->resume cycles of {args.workload}, relaunch overlapping the stop (launch(after=...))")
        overlapped = bench_pcs_ray(args.workload, params, args.cycles, args.steps_between, work, overlap=True)
        log(f"pcs-ray warm runners: {args.cycles} preempt->resume cycles of {args.workload}, relaunch after the stop")
        warm = bench_pcs_ray(args.workload, params, args.cycles, args.steps_between, work, overlap=False, pool=pool)
        log(f"ray tune: {args.cycles} pause->resume cycles of the same trainable")
        tune_side = bench_tune(args.workload, params, args.cycles, args.steps_between, work)
        log(f"job start: {args.starts} fresh starts each on warm and on cold runners")
        starts = bench_job_start(args.workload, params, args.starts, work, pool)
        runners = pool.describe()
        pool.shutdown(kill_runners=True)
    return {
        "workload": args.workload,
        "params": params,
        "cycles": args.cycles,
        "pcs_ray": ours,
        "pcs_ray_overlapped": overlapped,
        "pcs_ray_warm": warm,
        "ray_tune": tune_side,
        "job_start": starts,
        "warm_runners": runners,
        "target_met": ours["cycle_s"]["median"] <= tune_side["cycle_s"]["median"],
        "tune_over_pcs_ray_median": tune_side["cycle_s"]["median"] / ours["cycle_s"]["median"],
        "tune_over_pcs_ray_overlapped_median": tune_side["cycle_s"]["median"] / overlapped["cycle_s"]["median"],
        # issue 12: the warm cycle at most 1/5 of Tune's, a job's start on warm runners at most 1 s (medians)
        "warm_over_tune_median": warm["cycle_s"]["median"] / tune_side["cycle_s"]["median"],
        "warm_cycle_target_met": warm["cycle_s"]["median"] <= tune_side["cycle_s"]["median"] / 5,
        "warm_start_median_s": starts["warm"]["start_s"]["median"],
        "warm_start_target_met": starts["warm"]["start_s"]["median"] <= 1.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", help="an existing Ray cluster with node0/node1 per-GPU resources (default: start a private local one)")
    parser.add_argument("--workload", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per trainer")
    parser.add_argument("--cycles", type=int, default=3, help="preempt->resume cycles per system")
    parser.add_argument("--steps-between", type=int, default=2, help="training steps between preemptions")
    parser.add_argument("--starts", type=int, default=5, help="fresh job starts on warm and on cold runners")
    args = parser.parse_args(argv)

    import ray

    began = time.time()
    with tempfile.TemporaryDirectory(prefix="ray-") as ray_tmp:
        start_ray(args.address, ray_tmp)
        try:
            report = {"preempt_resume": bench_preempt_resume(args)}
        finally:
            ray.shutdown()
    report["wall_s"] = time.time() - began
    report["load_average"] = os.getloadavg()  # at the end: 1, 5 and 15 minute averages over the measurement
    print(strict_json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
