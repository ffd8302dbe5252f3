"""Simulator speed benchmark (issues: core simulator; 13, incremental predictions).

(a) Philly trace_0e4a51 (2,465 jobs), 64 GPUs, the PCS-jct config of that
    VC, predictions on (one forward play per arrival, refreshing every job),
    serial and with the forward plays spread over 2 processes.
(b) themis1, 500 jobs, 64 GPUs, seed 4567, load 0.9, every policy, predictions on,
    serial and with 2 processes (best of 3 each: other work shares this machine).
(c) The cost of predictions (issue 13): Philly VCs 0e4a51, ee9e8c and b436b2 scaled by
    their model speedup curves, 64 GPUs, policy ``pcs`` with that VC's bundled PCS-jct
    config; each run with predictions timed beside the same run without, in this process,
    one after the other, and their ratio (targets: <= 5x on 0e4a51, <= 10x on the others),
    with the count of forecast values that changed and the CPU time per changed value now and at
    the target (``forecast_value_budget``: the floor any exact method faces).
    The reference plays (a full fork per arrival, ``incremental=False``: the plays before
    issue 13) are timed beside them on the VCs ``--reference`` names (default 0e4a51), as
    the anchor, and their forecasts compared with the incremental ones.
(d) The whole 6214e9 trace (51,258 jobs), same setting, predictions on, in a child
    process of its own: wall seconds and its peak RSS.

Prints one JSON object. ``--sections`` picks some of themis1, trace, ratios, 6214e9.
Anchor of (a): the PCS artifact's simulator on the same run, its wall time read from
``pcs_ray/data/pcs/reference/artifact-timing.json`` (with where and how it was measured), printed beside ours.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

from pcs_ray.api import strict_json
from pcs_ray.sim.metrics import summarize
from pcs_ray.data import data_dir, pcs_config
from pcs_ray.policies import POLICIES, WFQConfig, WFQPolicy, build_policy
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.generator import generate_workload
from pcs_ray.workloads.traces import read_pcs_trace

ARTIFACT = json.loads((data_dir() / "pcs" / "reference" / "artifact-timing.json").read_text())


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
        "artifact_wall_s": ARTIFACT["wall_s"], "artifact_timing": ARTIFACT["source"],
        "speedup_vs_artifact": round(ARTIFACT["wall_s"] / wall, 1),
        "forward_plays": result.predictions, "avg_pred_err": s["avg_pred_err"],
        "peak_rss_mib_main": round(peak_rss_mib(), 1),
        "peak_rss_mib_workers": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0, 1),
    }


def bench_policies() -> list[dict]:
    jobs = generate_workload("themis1", 500, 64, load=0.9, seed=4567)
    runs = []
    policies = [(n, build_policy(n)) for n in POLICIES if n != "pcs"]
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


RATIO_TARGETS = {"0e4a51": 5.0, "ee9e8c": 10.0, "b436b2": 10.0}


def philly_vc(vc: str):
    """A Philly VC scaled by its model curves, with the policy ``pcs`` on that VC's bundled PCS-jct config."""
    data = data_dir() / "pcs"
    jobs = read_pcs_trace(data / "traces" / f"trace_{vc}.csv", speedup="model")
    return jobs, WFQPolicy(WFQConfig.load(data / "configs" / f"PCS_config_{vc}_jct.json"))


def timed(jobs, policy, **kw) -> tuple[float, float, object]:
    """Wall and CPU seconds of this process (CPU time is what other work on the machine cannot inflate)."""
    t0, c0 = time.perf_counter(), time.process_time()
    result = simulate(jobs, 64, policy, **kw)
    return time.perf_counter() - t0, time.process_time() - c0, result


def bench_ratios(reference: set[str]) -> list[dict]:
    runs = []
    for vc, target in RATIO_TARGETS.items():
        jobs, policy = philly_vc(vc)
        load0 = os.getloadavg()[0]
        without, without_cpu, _ = timed(jobs, policy, predict=False)
        with_, with_cpu, result = timed(jobs, policy, predict=True)
        row = {
            "trace": f"trace_{vc}", "jobs": len(jobs), "gpus": 64, "speedup": "model", "policy": f"pcs ({vc} jct config)",
            "wall_s_without_predictions": round(without, 3), "wall_s_with_predictions": round(with_, 3),
            "cpu_s_without_predictions": round(without_cpu, 3), "cpu_s_with_predictions": round(with_cpu, 3),
            "ratio_wall": round(with_ / without, 2), "ratio_cpu": round(with_cpu / without_cpu, 2),
            "target_ratio_cpu": target,  # beside ratio_cpu: CPU time, as wall time follows the load
            "forward_plays": result.predictions, "events": result.events,
            **forecast_value_budget(result, without_cpu, with_cpu, target),
        }
        if vc in reference:
            ref, ref_cpu, ref_result = timed(jobs, policy, predict=True, incremental=False)
            same = all(
                (a.first_pred, a.last_pred, a.refreshes, a.bound) == (b.first_pred, b.last_pred, b.refreshes, b.bound)
                for a, b in zip(result.records, ref_result.records)
            )
            row.update({
                "wall_s_reference_plays": round(ref, 3), "cpu_s_reference_plays": round(ref_cpu, 3),
                "reference_ratio_cpu": round(ref_cpu / without_cpu, 2),
                "forecasts_identical_to_reference": same,
            })
        row["load_average_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]  # before, after
        runs.append(row)
        print(strict_json.dumps(row), file=sys.stderr, flush=True)  # each VC as soon as it is measured
    return runs


def forecast_value_budget(result, without_cpu: float, with_cpu: float, target: float) -> dict:
    """What the target leaves per forecast value that any exact method must compute.

    A job's forecast must be recomputed at every arrival where it changes (each change is counted in
    ``refreshes``), plus once at its own arrival: that many values are new, whatever shares the rest.
    Each is the finish of an event some play decides with the policy's own code, so the target's CPU
    budget for predictions divided by this count is a ceiling on what computing one such value may
    cost, every decision it takes included.
    """
    values = sum(r.refreshes for r in result.records) + len(result.records)
    return {
        "forecast_values_changed": values,
        "us_per_changed_value_now": round(1e6 * (with_cpu - without_cpu) / values, 2),
        "us_per_changed_value_at_target": round(1e6 * (target - 1.0) * without_cpu / values, 2),
    }


def bench_6214e9_child() -> dict:
    jobs, policy = philly_vc("6214e9")
    wall, cpu, result = timed(jobs, policy, predict=True)
    return {
        "trace": "trace_6214e9", "jobs": len(jobs), "gpus": 64, "speedup": "model", "policy": "pcs (6214e9 jct config)",
        "wall_s_with_predictions": round(wall, 1), "cpu_s_with_predictions": round(cpu, 1), "forward_plays": result.predictions, "events": result.events,
        "peak_rss_mib": round(peak_rss_mib(), 1), "load_average_1min_at_end": round(os.getloadavg()[0], 2),
    }


def bench_6214e9() -> dict:
    """In a child process, so that its peak RSS is its own."""
    out = subprocess.run(
        [sys.executable, __file__, "--sections", "6214e9-child"], check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)["trace_6214e9_with_predictions"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="themis1,trace,ratios,6214e9",
                    help="comma-separated: themis1, trace, ratios, 6214e9")
    ap.add_argument("--reference", default="0e4a51",
                    help="comma-separated VCs whose reference plays 'ratios' also times ('' for none)")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    out = {"machine_cores": os.cpu_count()}
    if "6214e9-child" in sections:
        print(strict_json.dumps({"trace_6214e9_with_predictions": bench_6214e9_child()}))
        return
    if "ratios" in sections:
        out["prediction_cost_ratios"] = bench_ratios(set(filter(None, args.reference.split(','))))
    if "themis1" in sections:
        out["themis1_500apps_64gpus"] = bench_policies()
    if "trace" in sections:
        out["trace_0e4a51_64gpus_pcs_jct"] = [bench_trace(1), bench_trace(2)]
    if "6214e9" in sections:
        out["trace_6214e9_with_predictions"] = bench_6214e9()
    out["load_average_1min_at_end"] = os.getloadavg()[0]  # other work on the machine skews wall times
    out["peak_rss_mib"] = round(peak_rss_mib(), 1)
    print(strict_json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
