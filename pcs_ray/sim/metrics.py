"""Summary metrics of a simulation, as the PCS artifact reports them (its summaries in ``pcs_ray/data/pcs/reference``)."""

from __future__ import annotations

import csv

import numpy as np

from pcs_ray.sim.engine import JobRecord, SimResult


def fair_jct(rec: JobRecord, capacity: int, speedup_at) -> float:
    """Finish time at a fair share: ``service / S(min(G / n_avg, demand))``."""
    share = min(capacity / max(rec.avg_active or 1.0, 1.0), rec.max_gpus)
    return rec.service / speedup_at(rec, share)


def _linear_share(rec: JobRecord, share: float) -> float:
    return share


def without_wall(data):
    """``data`` (a summary, or lists and dicts of them) with every ``wall_s`` left out: what two runs of
    the same simulation must agree on wherever they ran."""
    if isinstance(data, dict):
        return {k: without_wall(v) for k, v in data.items() if k != "wall_s"}
    if isinstance(data, list):
        return [without_wall(v) for v in data]
    return data


def pred_errors(records: list[JobRecord]) -> tuple[np.ndarray, np.ndarray]:
    """PCS's ``100 |JCT - pred| / pred`` and its signed version, for jobs with a prediction."""
    jct, pred = [], []
    for r in records:
        if r.first_pred is not None and r.finish is not None:
            jct.append(r.finish - r.submit)
            pred.append(r.first_pred - r.submit)
    if not jct:
        return np.zeros(0), np.zeros(0)
    jct_a, pred_a = np.asarray(jct), np.asarray(pred)
    signed = 100.0 * (jct_a - pred_a) / np.maximum(pred_a, 1e-9)
    return np.abs(signed), signed


def per_job_errors(path) -> np.ndarray:
    """Prediction errors (%) of one of the artifact's per-job result files, as its summary computes them."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    jct = np.array([float(r["end_time"]) - float(r["submit_time"]) for r in rows])
    pred = np.array([float(r["estimated_end_time"]) - float(r["submit_time"]) for r in rows])
    return 100 * np.abs(jct - pred) / pred


def unfairness(records: list[JobRecord], capacity: int, speedup_at=_linear_share) -> np.ndarray:
    """Finish-time unfairness ``max(0, JCT / fair_JCT - 1)`` per job, in percent."""
    out = []
    for r in records:
        fj = fair_jct(r, capacity, speedup_at)
        out.append(max(0.0, (r.finish - r.submit) / fj - 1.0) * 100.0)
    return np.asarray(out)


def utilization(result: SimResult) -> float:
    """Busy GPU-seconds over capacity x (first arrival .. last finish)."""
    tl = result.utilization_timeline
    if not tl or not result.records:
        return 0.0
    start = min(r.submit for r in result.records)
    end = max(r.finish for r in result.records)
    if end <= start:
        return 0.0
    busy = 0.0
    for (t0, n), (t1, _) in zip(tl, tl[1:] + [(end, 0)]):
        busy += n * (min(t1, end) - max(t0, start)) if t1 > start else 0.0
    return busy / (result.capacity * (end - start))


def _pct(a: np.ndarray, q: float) -> float | None:
    return float(np.percentile(a, q)) if a.size else None


def _mean(a: np.ndarray) -> float | None:
    return float(a.mean()) if a.size else None


def summarize(result: SimResult, speedup_at=None) -> dict:
    """The figures ``pcs-ray simulate --json`` prints (times in s, errors in %)."""
    recs = result.records
    jct = np.asarray([r.finish - r.submit for r in recs])
    err, signed = pred_errors(recs)
    unfair = unfairness(recs, result.capacity, speedup_at or _linear_share)
    refreshes = [r.refreshes for r in recs if r.first_pred is not None]
    bounded = [r for r in recs if r.bound is not None]
    return {
        "policy": result.policy.get("policy"),
        "jobs": len(recs),
        "gpus": result.capacity,
        "avg_jct": _mean(jct),
        "p50_jct": _pct(jct, 50),
        "p99_jct": _pct(jct, 99),
        "makespan": float(max(r.finish for r in recs) - min(r.submit for r in recs)) if recs else 0.0,
        "avg_pred_err": _mean(err),
        "p99_pred_err": _pct(err, 99),
        "avg_signed_pred_err": _mean(signed),
        "avg_unfairness": _mean(unfant) if (unfant := unfair).size else None,
        "p99_unfairness": _pct(unfair, 99),
        "utilization": utilization(result),
        "avg_refreshes": float(np.mean(refreshes)) if refreshes else None,
        "bound_violations": sum(1 for r in bounded if r.finish > r.bound + 1e-6 * max(1.0, r.bound)),
        "jobs_with_bound": len(bounded),
        "events": result.events,
        "predictions": result.predictions,
        "wall_s": result.wall_s,
    }
