"""The demo's report: per job, predicted (at submission and mid-life) vs actual JCT, preemptions, GPUs used."""

from __future__ import annotations

import numpy as np
from rich.table import Table

from pcs_ray.cluster import ClusterSpec

TENTH = 0.1  # the share of a job's steps at which its forecast should stand on its own measurements


def build_report(status: dict, submitted: dict[int, dict], cluster: ClusterSpec, notes: list[str], wall_s: float) -> dict:
    """Per-job predicted (at submission) vs actual JCT, PCS's error metric, preemptions and GPU segments."""
    t0 = min(j["submit"] for j in status["jobs"])
    jobs = []
    for j in status["jobs"]:
        sub = submitted.get(j["id"], {})
        jct = j["finish"] - j["submit"] if j["state"] == "finished" else None
        pred = sub.get("predicted")
        pred_jct = pred - j["submit"] if pred is not None else None
        mid = _prediction_at(sub.get("history", []), j["submit"] + jct / 2) if jct else None
        mid_jct = mid - j["submit"] if mid is not None else None
        tenth = _prediction_at_step(sub.get("history", []), TENTH * j["total_steps"]) if jct and j["total_steps"] else None
        tenth_jct = tenth - j["submit"] if tenth is not None else None
        jobs.append({
            "id": j["id"], "name": j["name"], "workload": j["workload"], "class": j["class"], "state": j["state"],
            "demand": j["demand"], "steps": j["steps"], "total_steps": j["total_steps"],
            "submit_s": j["submit"] - t0, "finish_s": None if j["finish"] is None else j["finish"] - t0,
            "jct_s": jct, "predicted_jct_s": pred_jct,
            "bound_jct_s": None if sub.get("bound") is None else sub["bound"] - j["submit"],
            "error_pct": None if jct is None or not pred_jct else 100.0 * abs(jct - pred_jct) / pred_jct,
            "midlife_predicted_jct_s": mid_jct,
            "midlife_error_pct": None if jct is None or not mid_jct else 100.0 * abs(jct - mid_jct) / mid_jct,
            "tenth_predicted_jct_s": tenth_jct,
            "tenth_error_pct": None if jct is None or not tenth_jct else 100.0 * abs(jct - tenth_jct) / tenth_jct,
            "signed_error_s": None if jct is None or pred_jct is None else jct - pred_jct,
            "preemptions": j["preemptions"], "attempts": j["attempts"], "emulated": j["emulated"],
            "overruns": j.get("emulation_overruns") or 0,
            "late_steps": j.get("emulation_late_steps") or 0,
            "energy": j.get("energy"),
            "segments": [
                {"start_s": s["start"] - t0, "end_s": None if s["end"] is None else s["end"] - t0,
                 "gpus": s["gpus"], "kind": s["kind"]}
                for s in j["segments"]
            ],
        })
    errs = [j["error_pct"] for j in jobs if j["error_pct"] is not None]
    mid_errs = [j["midlife_error_pct"] for j in jobs if j["midlife_error_pct"] is not None]
    tenth_errs = [j["tenth_error_pct"] for j in jobs if j["tenth_error_pct"] is not None]
    abs_s = [abs(j["signed_error_s"]) for j in jobs if j["signed_error_s"] is not None]
    finished = [j for j in jobs if j["state"] == "finished"]
    energies = [j["energy"] for j in jobs if j["energy"]]
    return {
        "cluster": {"nodes": [n.name for n in cluster.nodes], "gpus": cluster.num_gpus,
                    "locality_penalty": cluster.locality_penalty, "notes": notes},
        "policy": status["policy"],
        "summary": {
            "jobs": len(jobs), "finished": len(finished),
            "mean_abs_error_pct": float(np.mean(errs)) if errs else float("nan"),
            "mean_abs_error_s": float(np.mean(abs_s)) if abs_s else float("nan"),
            "mean_abs_error_midlife_pct": float(np.mean(mid_errs)) if mid_errs else float("nan"),
            "mean_abs_error_tenth_pct": float(np.mean(tenth_errs)) if tenth_errs else float("nan"),
            "avg_jct_s": float(np.mean([j["jct_s"] for j in finished])) if finished else None,
            "makespan_s": max((j["finish_s"] for j in finished), default=None),
            "preemptions": sum(j["preemptions"] for j in jobs),
            "restart_overhead_s": status["restart_overhead"], "wall_s": wall_s,
            "energy_j": sum(e["joules"] for e in energies) if energies else None,
            "energy_sources": sorted({e["source"] for e in energies}),
        },
        "jobs": jobs,
    }


def _prediction_at(history: list, t: float) -> float | None:
    """The prediction in force at time ``t`` (the last one made at or before it)."""
    before = [entry[1] for entry in history if entry[0] <= t]
    return before[-1] if before else None


def _prediction_at_step(history: list, step: float) -> float | None:
    """The first prediction made once the job had reported ``step`` steps (None: never seen there)."""
    return next((entry[1] for entry in history if len(entry) > 2 and entry[2] >= step), None)


def result_table(report: dict) -> Table:
    table = Table(title="pcs-ray demo: predicted (at submission) vs actual JCT", title_justify="left")
    for col in ("job", "class", "GPUs (demand)", "state", "predicted JCT", "actual JCT", "error", "mid-life error",
                "preempt", "GPUs used"):
        table.add_column(col)
    for j in report["jobs"]:
        used = sorted({g for s in j["segments"] for g in s["gpus"]})
        fmt = lambda v: "-" if v is None else f"{v:.1f} s"  # noqa: E731
        table.add_row(
            j["name"], j["class"], f"{j['demand'][0]}..{j['demand'][1]}", j["state"], fmt(j["predicted_jct_s"]),
            fmt(j["jct_s"]), "-" if j["error_pct"] is None else f"{j['error_pct']:.0f}%",
            "-" if j["midlife_error_pct"] is None else f"{j['midlife_error_pct']:.0f}%", str(j["preemptions"]),
            ",".join(used),
        )
    s = report["summary"]
    table.caption = (f"{s['finished']}/{s['jobs']} finished, {s['preemptions']} preemption(s), "
                     f"mean |error| at submission {s['mean_abs_error_pct']:.1f}% ({s['mean_abs_error_s']:.1f} s), "
                     f"at mid-life {s['mean_abs_error_midlife_pct']:.1f}%, wall {s['wall_s']:.0f} s")
    return table
