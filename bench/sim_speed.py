"""Simulator speed benchmark (issue: core simulator).

(a) Philly trace_0e4a51 (2,465 jobs), 64 GPUs, the PCS-jct config of that
    VC, predictions on (one forward play per arrival, refreshing every job),
    serial and with the forward plays spread over 2 processes.
(b) themis1, 500 apps, 64 GPUs, seed 4567, load 0.9, every policy, predictions on,
    serial and with 2 processes (best of 3 each: other work shares this machine).

Prints one JSON object: wall seconds, jobs per second and peak RSS.
Anchor: the PCS reference simulator needs 493 s for (a) on this machine.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pcs_ray.metrics import summarize  # noqa: E402
from pcs_ray.data import data_dir, pcs_config  # noqa: E402
from pcs_ray.policies import POLICIES, WFQConfig, WFQPolicy, create_policy  # noqa: E402
from pcs_ray.simulator import simulate  # noqa: E402
from workloads.generator import generate_workload  # noqa: E402
from workloads.traces import read_pcs_trace  # noqa: E402

REFERENCE_TRACE_S = 493.0


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_trace(workers: int) -> dict:
    data = data_dir() / "pcs"
    jobs = read_pcs_trace(data / "traces" / "trace_0e4a51.csv")
    policy = WFQPolicy(WFQConfig.load(data / "configs" / "PCS_config_0e4a51_jct.json"))
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    result = simulate(jobs, 64, policy, predict=True, workers=workers)
    wall = time.perf_counter() - t0
    s = summarize(result)
    return {
        "trace": "trace_0e4a51", "jobs": len(jobs), "gpus": 64, "policy": "pcs-jct", "workers": workers,
        "wall_s": round(wall, 3), "main_process_cpu_s": round(time.process_time() - cpu0, 3),
        "jobs_per_s": round(len(jobs) / wall, 1),
        "speedup_vs_reference": round(REFERENCE_TRACE_S / wall, 1),
        "forward_plays": result.predictions, "avg_pred_err": s["avg_pred_err"],
        "peak_rss_mib_main": round(peak_rss_mib(), 1),
        "peak_rss_mib_workers": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0, 1),
    }


def bench_policies() -> list[dict]:
    jobs = generate_workload("themis1", 500, 64, load=0.9, seed=4567)
    runs = []
    policies = [(n, create_policy(n)) for n in POLICIES if n != "pcs"]
    for kind in ("jct", "bal", "pred"):
        policies.append((f"pcs-{kind}", WFQPolicy(WFQConfig.load(pcs_config("themis1", kind)))))
    for label, policy in policies:
        walls = {}
        for workers in (1, 2):
            best = math.inf
            for _ in range(3):
                t0 = time.perf_counter()
                result = simulate(jobs, 64, policy, predict=True, workers=workers)
                best = min(best, time.perf_counter() - t0)
            walls[workers] = best
        s = summarize(result)
        runs.append({
            "policy": label, "wall_s": round(walls[1], 3), "wall_s_2_workers": round(walls[2], 3),
            "jobs_per_s": round(len(jobs) / walls[1], 1),
            "avg_jct": s["avg_jct"], "avg_pred_err": s["avg_pred_err"], "events": s["events"],
        })
    return runs


def main() -> None:
    out = {"machine_cores": os.cpu_count()}
    out["themis1_500apps_64gpus"] = bench_policies()
    out["trace_0e4a51_64gpus_pcs_jct"] = [bench_trace(1), bench_trace(2)]
    out["load_average_1min_at_end"] = os.getloadavg()[0]  # other work on the machine skews wall times
    out["peak_rss_mib"] = round(peak_rss_mib(), 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
