"""RUSH experiments (issue 15): slow runs under run-to-run variability replayed from the Longhorn records.

A Sia-Philly trace (160 jobs, as the paper's ~190) on 64 GPUs (16 nodes x 4);
every run on a GPU replays that GPU's recorded state for the job's application
(``--run-variability longhorn``: per application, each simulated GPU is one
recorded V100, its later runs in time order, seeded; ResNet-50 for class A,
BERT for B, PageRank for C and D, as PAL's profiles). ``--any-app`` is the
ablation that replays every application's records by device whatever the job,
SGEMM's included (what this bench did first). Five seeds (the replay's seed:
which devices, where in their record each starts). Runs, no forecasts unless
said:

* ``fcfs-easy``  FCFS+EASY, placement ``packed-sticky`` (the paper's baseline: one run per job, as in HPC);
* ``rush-K``     RUSH with skip threshold K (5, 20, 100; a pass every 60 s), ``packed-sticky-slow-run``;
* ``fcfs-easy+filter``  FCFS+EASY with ``packed-sticky-slow-run`` (the filter alone, an ablation);
* ``pcs``        PCS (pcs-bal), ``combined``, with forecasts (prediction error);
* ``pcs+filter`` PCS (pcs-bal), ``combined-slow-run``, with forecasts.

Per run: slow runs (runs more than 1.5 sigma above their application's mean),
of them the ones the model predicted (under FCFS+EASY: the most a start
function acting on the model can avoid), runs, average JCT, makespan, maximum run time of a job (finish - start), and
for PCS the average and p99 prediction error. The summary gives the means
over seeds, RUSH's slow runs against FCFS+EASY's (target: at most half) and
in how many seeds RUSH's makespan is no worse. The slow-run model's own
figures (``slow-runs fit`` on the same data) are included.

Usage: ``python bench/rush_experiments.py [--seeds 5] [--trace workload-1]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections import Counter
import sys
import time

from pcs_ray.api import strict_json
from pcs_ray.cluster import ClusterSpec
from pcs_ray.data import data_dir
from pcs_ray.variability.longhorn import CLASS_APPS
from pcs_ray.sim.metrics import summarize
from pcs_ray.placement import create_placement
from pcs_ray.placement.stats import PlacementLog
from pcs_ray.policies import build_policy
from pcs_ray.policies.rush import RushPolicy
from pcs_ray.variability.run_replay import ReplayedPlacement, longhorn_devices, longhorn_replay
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.traces import read_sia_philly

THRESHOLDS = (5, 20, 100)
RUNS = [
    ("fcfs-easy", "fcfs-easy", "packed-sticky", False),
    *[(f"rush-{k}", f"rush-{k}", "packed-sticky-slow-run", False) for k in THRESHOLDS],
    ("fcfs-easy+filter", "fcfs-easy", "packed-sticky-slow-run", False),
    ("pcs", "pcs-bal", "combined", True),
    ("pcs+filter", "pcs-bal", "combined-slow-run", True),
]


class CountedRush(RushPolicy):
    """RUSH keeping a reference to the engine's skip table (for the skip counts)."""

    def make_index(self, jobs):
        self.table = super().make_index(jobs)
        return self.table


def one(label, policy_name, placement, predict, jobs, cluster, seed, per_class=True):
    rush = policy_name.startswith("rush-")
    policy = CountedRush(skip_threshold=int(policy_name.split("-")[1])) if rush else build_policy(policy_name)
    placed = ReplayedPlacement(PlacementLog(create_placement(placement, cluster, seed=seed)),
                               longhorn_replay(cluster.num_gpus, seed, per_class))
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
    if rush:
        per_job = Counter(jid for _, jid, _ in policy.table.log)
        out.update(skips=len(policy.table.log), max_skips_of_a_job=max(per_job.values(), default=0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trace", default="workload-1", help="Sia-Philly trace(s), comma-separated (e.g. workload-1,workload-2)")
    ap.add_argument("--without-pcs", action="store_true", help="only the FCFS+EASY and RUSH runs")
    ap.add_argument("--any-app", action="store_true",
                    help="ablation: replay every application's records (SGEMM's included) whatever the job's class")
    args = ap.parse_args()
    started = time.perf_counter()
    traces = {t: read_sia_philly(data_dir() / "pal" / "sia-philly" / f"{t}.csv") for t in args.trace.split(",")}
    runs = [r for r in RUNS if not (args.without_pcs and r[1].startswith("pcs"))]
    cluster = ClusterSpec.homogeneous(64, 4)
    print("fitting the slow-run model ...", file=sys.stderr)
    _, model = longhorn_devices(0, None if args.any_app else tuple(sorted(set(CLASS_APPS.values()))))
    rows = []
    for trace, jobs in traces.items():
        for seed in range(args.seeds):
            for label, name, placement, predict in runs:
                print(f"{trace} seed {seed}: {label}", file=sys.stderr)
                rows.append({"trace": trace, **one(label, name, placement, predict, jobs, cluster, seed,
                                                   not args.any_app)})
    by = {label: [r for r in rows if r["run"] == label] for label, *_ in runs}

    def mean(label, key):
        vals = [r[key] for r in by[label] if r[key] is not None]
        return round(statistics.fmean(vals), 4) if vals else None

    summary = {label: {k: mean(label, k) for k in ("slow_runs", "predicted_and_slow", "runs", "avg_jct", "makespan",
                                                    "max_run_time", "avg_pred_err", "p99_pred_err")} for label in by}
    easy, base = by["fcfs-easy"], summary["fcfs-easy"]
    for k in THRESHOLDS:
        label, rush = f"rush-{k}", by[f"rush-{k}"]
        summary[f"{label}_vs_fcfs_easy"] = {
            "slow_runs_ratio": round(summary[label]["slow_runs"] / base["slow_runs"], 4) if base["slow_runs"] else None,
            "slow_runs_halved": summary[label]["slow_runs"] <= 0.5 * base["slow_runs"],
            "makespan_ratio": round(summary[label]["makespan"] / base["makespan"], 4),
            "experiments": len(rush),
            "experiments_makespan_no_worse": sum(r["makespan"] <= e["makespan"] * (1 + 1e-9) for r, e in zip(rush, easy)),
            "max_run_time_ratio": round(summary[label]["max_run_time"] / base["max_run_time"], 4),
            "avg_jct_ratio": round(summary[label]["avg_jct"] / base["avg_jct"], 4),
            "max_skips_of_a_job": max(r["max_skips_of_a_job"] for r in rush),
        }
    if "pcs" in by:
        summary["pcs_filter_vs_pcs"] = {
            "avg_jct_ratio": round(summary["pcs+filter"]["avg_jct"] / summary["pcs"]["avg_jct"], 4),
            "slow_runs": [summary["pcs"]["slow_runs"], summary["pcs+filter"]["slow_runs"]],
            "avg_pred_err": [summary["pcs"]["avg_pred_err"], summary["pcs+filter"]["avg_pred_err"]],
            "p99_pred_err": [summary["pcs"]["p99_pred_err"], summary["pcs+filter"]["p99_pred_err"]],
        }
    per_seed = {f"{r['trace']}/{r['seed']}": {} for r in rows}
    for r in rows:
        per_seed[f"{r['trace']}/{r['seed']}"][r["run"]] = {
            "slow_runs": r["slow_runs"], "avg_jct": round(r["avg_jct"]), "makespan": round(r["makespan"]),
            **({"avg_pred_err": round(r["avg_pred_err"], 2)} if r["avg_pred_err"] is not None else {})}
    summary["per_seed"] = per_seed
    easy_filter = summary["fcfs-easy+filter"]
    summary["fcfs_easy_filter_vs_fcfs_easy"] = {
        "slow_runs_ratio": round(easy_filter["slow_runs"] / base["slow_runs"], 4) if base["slow_runs"] else None,
        "makespan_ratio": round(easy_filter["makespan"] / base["makespan"], 4),
        "avg_jct_ratio": round(easy_filter["avg_jct"] / base["avg_jct"], 4),
    }
    print(strict_json.dumps({
        "setup": {"traces": [f"sia-philly/{t}" for t in traces], "jobs": [len(j) for j in traces.values()],
                  "gpus": 64, "gpus_per_node": 4,
                  "seeds": args.seeds, "skip_thresholds": list(THRESHOLDS), "retry_s": 60.0,
                  "run_variability": "longhorn, every application's records (ablation)" if args.any_app
                  else "longhorn, the job's application's records", "load_average": os.getloadavg()},
        "model": model, "summary": summary, "runs": rows, "wall_s": round(time.perf_counter() - started, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
