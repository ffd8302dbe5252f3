"""Real CPU seconds per training step of each workload, alone and under contention: what ``pcs_ray.workloads.device_model`` is set from.

The nominal emulated GPU (``pcs_ray.workloads.device_model``) must be slow enough that
a step's real CPU work fits inside its budget even when every logical GPU of
the demo (8 ranks) trains at once on this machine's cores. This prints, as
one JSON object, each workload's median step time (``threads`` = 1, the
default) at the given batch sizes run alone, and the same steps with
``--contended N`` processes training at once (a mix of the workloads), so
the ratio ``contended / alone`` says how much slower a step gets when the
machine is full.

    PYTHONPATH=. nice -n 10 python bench/device_steps.py --contended 8
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

from pcs_ray.api import strict_json

# workload -> (the demo's batch, a doubled batch to separate fixed from per-sample cost), num_samples as in the demo
CASES = {
    "tiny_cnn": (8, 16),
    "resnet18": (8, 16),
    "mobilenet_v2": (8, 16),
    "vgg11": (8, 16),
    "transformer": (16, 32),
}


def _time_steps(workload: str, batch: int, seconds: float, start_at: float | None = None) -> list[float]:
    from pcs_ray.executors.training import TrainingSession

    session = TrainingSession(workload, {"batch_size": batch, "num_samples": 1024, "seed": 0})
    for _ in range(2):
        session.train_step()
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    times, end = [], time.time() + seconds
    while time.time() < end or len(times) < 3:
        began = time.perf_counter()
        session.train_step()
        times.append(time.perf_counter() - began)
    return times


def _worker(args) -> tuple[str, int, float]:
    workload, batch, seconds, start_at = args
    return workload, batch, statistics.median(_time_steps(workload, batch, seconds, start_at))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="measuring time per case")
    parser.add_argument("--contended", type=int, default=8, help="processes training at once (0: skip)")
    args = parser.parse_args(argv)
    alone = {}
    for workload, batches in CASES.items():
        for batch in batches:
            alone[f"{workload}@{batch}"] = statistics.median(_time_steps(workload, batch, args.seconds))
            print(f"[device_steps] alone {workload}@{batch}: {alone[f'{workload}@{batch}']:.4f} s", file=sys.stderr, flush=True)
    report = {"alone_s": alone, "cpu_count": os.cpu_count(), "load_average_before": os.getloadavg()}
    if args.contended:
        names = list(CASES)
        jobs = [(names[k % len(names)], CASES[names[k % len(names)]][0]) for k in range(args.contended)]
        start_at = time.time() + 40.0  # every process has imported torch and built its model by then
        with mp.get_context("spawn").Pool(args.contended) as pool:
            results = pool.map(_worker, [(w, b, args.seconds * 2, start_at) for w, b in jobs])
        contended = [{"case": f"{w}@{b}", "step_s": s, "over_alone": s / alone[f"{w}@{b}"]} for w, b, s in results]
        report["contended"] = {"processes": args.contended, "steps": contended,
                               "max_over_alone": max(c["over_alone"] for c in contended),
                               "median_over_alone": statistics.median(c["over_alone"] for c in contended)}
    report["load_average_after"] = os.getloadavg()
    print(strict_json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
