"""RUSH experiments (issue 15): slow runs under run-to-run variability replayed from the Longhorn records.

A Sia-Philly trace (160 jobs, as the paper's ~190) on 64 GPUs (16 nodes x 4);
every run on a GPU replays that GPU's next recorded run (``--run-variability
longhorn``: each simulated GPU is one recorded V100, its later runs in time
order, seeded). Five seeds (the replay's seed: which devices, where in their
record each starts). Runs, no forecasts unless said:

* ``fcfs-easy``  FCFS+EASY, placement ``combined`` (the paper's baseline);
* ``rush``       RUSH (skip threshold 5, passes every 60 s), ``combined-slow-run``;
* ``fcfs-easy+filter``  FCFS+EASY with ``combined-slow-run`` (the filter alone, an ablation);
* ``pcs``        PCS (pcs-bal), ``combined``, with forecasts (prediction error);
* ``pcs+filter`` PCS (pcs-bal), ``combined-slow-run``, with forecasts.

Per run: slow runs (runs more than 1.5 sigma above their application's mean),
runs, average JCT, makespan, maximum run time of a job (finish - start), and
for PCS the average and p99 prediction error. The summary gives the means
over seeds, RUSH's slow runs against FCFS+EASY's (target: at most half) and
in how many seeds RUSH's makespan is no worse. The slow-run model's own
figures (``slow-runs fit`` on the same data) are included.

Usage: ``python bench/rush_experiments.py [--seeds 5] [--trace workload-1] [--skip-threshold 5]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from pcs_ray.cluster import ClusterSpec
from pcs_ray.data import data_dir
from pcs_ray.metrics import summarize
from pcs_ray.placement import create_placement
from pcs_ray.placement.stats import PlacementLog
from pcs_ray.policies import build_policy
from pcs_ray.policies.rush import RushPolicy
from pcs_ray.runvariability import ReplayedPlacement, longhorn_devices, longhorn_replay
from pcs_ray.simulator import simulate
from workloads.traces import read_sia_philly

RUNS = [
    ("fcfs-easy", "fcfs-easy", "combined", False),
    ("rush", "rush", "combined-slow-run", False),
    ("fcfs-easy+filter", "fcfs-easy", "combined-slow-run", False),
    ("pcs", "pcs-bal", "combined", True),
    ("pcs+filter", "pcs-bal", "combined-slow-run", True),
]


def one(label, policy_name, placement, predict, jobs, cluster, seed, threshold):
    policy = RushPolicy(skip_threshold=threshold) if policy_name == "rush" else build_policy(policy_name)
    placed = ReplayedPlacement(PlacementLog(create_placement(placement, cluster, seed=seed)),
                               longhorn_replay(cluster.num_gpus, seed))
    if isinstance(policy, RushPolicy):
        policy.predictor = placed.replay
    result = simulate(jobs, cluster.num_gpus, policy, predict=predict, placement=placed)
    s = summarize(result)
    rep = placed.replay.summary()
    out = {
        "run": label, "seed": seed, "slow_runs": rep["slow_runs"], "runs": rep["runs"],
        "predicted_slow_runs": rep["predicted_slow_runs"], "predicted_and_slow": rep["predicted_and_slow"],
        "avg_jct": s["avg_jct"], "makespan": s["makespan"],
        "max_run_time": max(r.finish - r.start for r in result.records),
        "avg_pred_err": s["avg_pred_err"], "p99_pred_err": s["p99_pred_err"], "wall_s": round(result.wall_s, 2),
    }
    if isinstance(policy, RushPolicy):
        out["skips"] = len(result.extra.get("skips", ())) if result.extra.get("skips") else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trace", default="workload-1")
    ap.add_argument("--skip-threshold", type=int, default=5)
    args = ap.parse_args()
    started = time.perf_counter()
    jobs = read_sia_philly(data_dir() / "pal" / "sia-philly" / f"{args.trace}.csv")
    cluster = ClusterSpec.homogeneous(64, 4)
    print("fitting the slow-run model ...", file=sys.stderr)
    _, model = longhorn_devices()
    rows = []
    for seed in range(args.seeds):
        for label, name, placement, predict in RUNS:
            print(f"seed {seed}: {label}", file=sys.stderr)
            rows.append(one(label, name, placement, predict, jobs, cluster, seed, args.skip_threshold))
    by = {label: [r for r in rows if r["run"] == label] for label, *_ in RUNS}

    def mean(label, key):
        vals = [r[key] for r in by[label] if r[key] is not None]
        return round(statistics.fmean(vals), 4) if vals else None

    summary = {label: {k: mean(label, k) for k in ("slow_runs", "runs", "avg_jct", "makespan", "max_run_time",
                                                    "avg_pred_err", "p99_pred_err")} for label in by}
    easy, rush = by["fcfs-easy"], by["rush"]
    summary["rush_vs_fcfs_easy"] = {
        "slow_runs_ratio": round(summary["rush"]["slow_runs"] / summary["fcfs-easy"]["slow_runs"], 4)
        if summary["fcfs-easy"]["slow_runs"] else None,
        "slow_runs_halved": summary["rush"]["slow_runs"] <= 0.5 * summary["fcfs-easy"]["slow_runs"],
        "makespan_ratio": round(summary["rush"]["makespan"] / summary["fcfs-easy"]["makespan"], 4),
        "seeds_makespan_no_worse": sum(r["makespan"] <= e["makespan"] * (1 + 1e-9) for r, e in zip(rush, easy)),
        "max_run_time_ratio": round(summary["rush"]["max_run_time"] / summary["fcfs-easy"]["max_run_time"], 4),
    }
    summary["pcs_filter_vs_pcs"] = {
        "avg_jct_ratio": round(summary["pcs+filter"]["avg_jct"] / summary["pcs"]["avg_jct"], 4),
        "slow_runs": [summary["pcs"]["slow_runs"], summary["pcs+filter"]["slow_runs"]],
        "avg_pred_err": [summary["pcs"]["avg_pred_err"], summary["pcs+filter"]["avg_pred_err"]],
    }
    print(json.dumps({
        "setup": {"trace": f"sia-philly/{args.trace}", "jobs": len(jobs), "gpus": 64, "gpus_per_node": 4,
                  "seeds": args.seeds, "skip_threshold": args.skip_threshold, "run_variability": "longhorn"},
        "model": model, "summary": summary, "runs": rows, "wall_s": round(time.perf_counter() - started, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
