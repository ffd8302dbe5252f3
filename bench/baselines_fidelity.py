"""Our baselines beside the PCS artifact's: its themis1 sample, and every Philly VC of Fig. 7 we have.

themis1: the artifact's own 500-job sample (``reference/themis1-artifact``,
64 GPUs, linear speedups), every policy with predictions, against the
artifact's ``summary.json``: average JCT, average and p99 prediction error.

Philly: each VC whose Fig. 7 row is in ``reference/*_results.csv`` and whose
trace is bundled, 64 GPUs, model speedup curves (as the artifact replays
traces); FIFO, SRSF (Fig. 7's "Tiresias"), Themis, AFS and PCS with the VC's
three configurations. Average JCT normalised to AFS beside Fig. 7's, and the
schemes ranked by it; prediction errors only for VCs of at most
``--predict-max-jobs`` jobs (forward plays cost grows with the backlog).

Usage: ``python bench/baselines_fidelity.py [--vcs 0e4a51,ee9e8c] [--predict-max-jobs N] [--skip-themis1]``;
prints one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import time

import numpy as np

from pcs_ray.api import strict_json
from pcs_ray.data import data_dir, locate, names
from pcs_ray.sim.metrics import per_job_errors, summarize
from pcs_ray.policies import build_policy
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.traces import read_trace
from common import log

REF = data_dir() / "pcs" / "reference"
GPUS = 64
#: our policy name -> the artifact's name in summary.json
THEMIS1 = {"fifo": "FIFO", "srsf": "SRSF", "themis": "THEMIS", "afs": "AFS",
           "pcs-jct": "PCS_jct", "pcs-bal": "PCS_bal", "pcs-pred": "PCS_pred"}
#: the earlier readings, for context (no artifact counterpart)
VARIANTS = ("themis-lease", "afs-l")
#: Fig. 7's column -> our policy name (PCS columns use the VC's own configuration)
FIG7 = {"AFS": "afs", "Tiresias": "srsf", "Themis": "themis", "FIFO": "fifo",
        "PCS-JCT": "pcs-jct", "PCS-bal": "pcs-bal", "PCS-pred": "pcs-pred"}


def figures(result) -> dict:
    s = summarize(result)
    return {"avg_jct_s": s["avg_jct"], "avg_pred_err_pct": s["avg_pred_err"], "p99_pred_err_pct": s["p99_pred_err"],
            "wall_s": round(result.wall_s, 2)}


def themis1() -> dict:
    ref = json.loads((REF / "themis1-artifact" / "summary.json").read_text())
    jobs = read_trace(locate("trace", "themis1-artifact"))
    out = {}
    for name in [*THEMIS1, *VARIANTS]:
        log(f"themis1 {name} ...")
        ours = figures(simulate(jobs, GPUS, build_policy(name)))
        row = {"ours": ours}
        if name in THEMIS1:
            art = ref[THEMIS1[name]]
            row["artifact"] = {"avg_jct_s": art["avg_jct_s"], "avg_pred_err_pct": art["avg_pred_error_pct"],
                               "p99_pred_err_pct": art["p99_pred_error_pct"]}
            row["jct_ratio"] = ours["avg_jct_s"] / art["avg_jct_s"]
        if name == "themis":
            # The artifact's current code predicts Themis differently from summary.json (see the README there).
            errs = per_job_errors(REF / "themis1-artifact" / "per-job-THEMIS-62a6ca3.csv")
            row["artifact_62a6ca3"] = {"avg_pred_err_pct": float(errs.mean()),
                                       "p99_pred_err_pct": float(np.percentile(errs, 99))}
        out[name] = row
    return out


def fig7_rows() -> dict[str, dict[str, dict[str, float]]]:
    """{vc: {metric: {column: value}}} from the three Fig. 7 tables."""
    rows: dict[str, dict] = {}
    for metric, fname in (("avg_jct_norm", "avg_jct_results.csv"), ("avg_pred_err_pct", "avg_error_results.csv"),
                          ("p99_pred_err_pct", "p99_error_results.csv")):
        with (REF / fname).open() as f:
            for row in csv.DictReader(f):
                rows.setdefault(row["workload"], {})[metric] = {k: float(v) for k, v in row.items() if k != "workload"}
    return rows


def rank(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda k: values[k])


def philly(vcs: list[str], predict_max_jobs: int) -> dict:
    fig7 = fig7_rows()
    out = {}
    for vc in vcs:
        jobs = read_trace(locate("trace", f"philly/{vc}"))
        predict = len(jobs) <= predict_max_jobs
        ours: dict[str, dict] = {}
        for col, name in FIG7.items():
            log(f"philly {vc} ({len(jobs)} jobs) {name}{' with predictions' if predict else ''} ...")
            started = time.perf_counter()
            policy = build_policy("pcs", config=f"{vc}-{name[4:]}") if name.startswith("pcs-") else build_policy(name)
            res = simulate(jobs, GPUS, policy, predict=predict)
            ours[col] = figures(res)
            log(f"  {time.perf_counter() - started:.1f} s")
        afs = ours["AFS"]["avg_jct_s"]
        norm = {col: f["avg_jct_s"] / afs for col, f in ours.items()}
        entry = {
            "jobs": len(jobs), "predictions": predict,
            "avg_jct_norm": {col: {"ours": norm[col], "fig7": fig7[vc]["avg_jct_norm"][col]} for col in FIG7},
            "rank_by_avg_jct": {"ours": rank(norm), "fig7": rank(fig7[vc]["avg_jct_norm"])},
            "avg_jct_s": {col: f["avg_jct_s"] for col, f in ours.items()},
            "wall_s": {col: f["wall_s"] for col, f in ours.items()},
        }
        entry["same_rank"] = entry["rank_by_avg_jct"]["ours"] == entry["rank_by_avg_jct"]["fig7"]
        if predict:
            for metric in ("avg_pred_err_pct", "p99_pred_err_pct"):
                entry[metric] = {col: {"ours": ours[col][metric], "fig7": fig7[vc][metric][col]} for col in FIG7}
        out[vc] = entry
        log(strict_json.dumps({vc: entry}))  # a long run stopped later keeps what it finished
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    have = {n.split("/", 1)[1] for n in names("trace") if n.startswith("philly/")}
    default_vcs = [vc for vc in fig7_rows() if vc in have]
    ap.add_argument("--vcs", default=",".join(default_vcs), help="comma-separated Philly VCs (default: every "
                    "Fig. 7 VC with a bundled trace)")
    ap.add_argument("--predict-max-jobs", type=int, default=2500,
                    help="predict only on VCs of at most this many jobs")
    ap.add_argument("--skip-themis1", action="store_true")
    args = ap.parse_args()
    vcs = [v for v in args.vcs.split(",") if v]
    missing = [v for v in vcs if v not in have or v not in fig7_rows()]
    if missing:
        raise SystemExit(f"error: no bundled trace or Fig. 7 row for {', '.join(missing)}")
    out = {"gpus": GPUS, "fig7_vcs_without_trace": sorted(set(fig7_rows()) - have)}
    if not args.skip_themis1:
        out["themis1"] = themis1()
    out["philly"] = philly(vcs, args.predict_max_jobs)
    print(strict_json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
