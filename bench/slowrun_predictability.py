"""Can anything known before a run predict that it will be slow? Measured on the Longhorn per-run records.

RUSH's premise is that the system's state before a run (node and system
counters over a recent window) predicts a slow run. The Longhorn records
carry no network or I/O counters; what they carry before a run is the
history of earlier runs (slowdowns per device, node and cabinet, the last
run's temperature, power and clocks) and where and when the run starts.
This script measures, per application, how slow runs are distributed (in
time, per node and cabinet, as node-wide events) and how well each feature
of ``pcs_ray.variability.slow_runs.build_dataset`` separates slow runs from the rest:

* ``events``: slow runs grouped by (node, start time). Longhorn runs are
  node-wide jobs (the GPUs of a node start together), so a slow event is
  usually all GPUs of one node at once: its GPUs cannot warn each other.
* ``signal_before``: per slow event, the hours since the previous slow run
  on the same device, node and cabinet (strictly earlier starts).
* ``recent_slow_rule``: "a slow run started on this node / cabinet within
  the last H hours" as a predictor: precision and recall per H.
* ``features``: per feature, ROC AUC on the later (test) runs, and the
  best F1 and its recall of any single threshold on it, chosen on the test
  runs themselves (an optimistic bound: no model trained on earlier runs
  can beat the best threshold picked with the answers, per feature).
* ``model``: the chosen model's per-application result (``slowruns.fit``,
  trained on the earlier runs), the figure the simulator's replay uses;
* ``per_app_models``: the same selection fitted on one application's runs
  alone (an ablation: one model per application instead of RUSH's one
  model with the application as a feature).

Usage: ``python bench/slowrun_predictability.py [--apps resnet,bert,pagerank]``; prints one JSON object.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from pcs_ray.api import strict_json
from pcs_ray.variability.slow_runs import SlowRunError, build_dataset, fit, load_records

WINDOWS_H = (1, 3, 6, 12, 24)


def _auc(score: np.ndarray, y: np.ndarray) -> float | None:
    from sklearn.metrics import roc_auc_score

    return round(float(roc_auc_score(y, score)), 3) if 0 < y.sum() < len(y) else None


def _best_threshold(x: np.ndarray, y: np.ndarray) -> dict:
    """The best F1 of ``x > t`` or ``x < t`` over every t, with its precision and recall."""
    best = {"f1": 0.0, "precision": 0.0, "recall": 0.0}
    for t in np.unique(x):
        for pred in (x > t, x < t, x >= t, x <= t):
            tp = int((pred & y).sum())
            if tp == 0:
                continue
            p, r = tp / pred.sum(), tp / y.sum()
            f = 2 * p * r / (p + r)
            if f > best["f1"]:
                best = {"f1": round(f, 3), "precision": round(p, 3), "recall": round(r, 3)}
    return best


def analyse(ds, app: str, test: np.ndarray) -> dict:
    idx = np.array([i for i, r in enumerate(ds.runs) if r.app == app])
    runs = [ds.runs[i] for i in idx]
    y = ds.y[idx].astype(bool)
    out = {"runs": len(idx), "slow": int(y.sum()), "slow_test": int(y[test[idx]].sum()),
           "threshold": round(ds.thresholds[app], 4)}
    if not y.any():
        return out
    t0 = min(r.ts for r in runs)
    slow_runs = [r for r, s in zip(runs, y) if s]
    out["devices_with_slow"] = len({r.device for r in slow_runs})
    out["nodes_with_slow"] = len({(r.cabinet, r.node) for r in slow_runs})
    by_cab = defaultdict(lambda: [0, 0])
    for r, s in zip(runs, y):
        by_cab[r.cabinet or "?"][0] += 1
        by_cab[r.cabinet or "?"][1] += int(s)
    out["slow_by_cabinet"] = {c: {"runs": n, "slow": k} for c, (n, k) in sorted(by_cab.items()) if k}
    # events: slow runs that started together on one node; their GPUs (not) slow beside them
    mates = defaultdict(list)
    for r, s in zip(runs, y):
        mates[(r.cabinet, r.node, r.ts)].append(bool(s))
    events = []
    for (cab, node, ts), flags in sorted(mates.items(), key=lambda kv: kv[0][2]):
        if any(flags):
            before = [r for r, s in zip(runs, y) if s and r.ts < ts]
            def since(match):
                times = [r.ts for r in before if match(r)]
                return round((ts - max(times)) / 3600, 2) if times else None
            events.append({"t_h": round((ts - t0) / 3600, 2), "node": f"{cab}-{node}", "gpus": len(flags),
                           "slow_gpus": sum(flags), "test": bool(test[idx][[r.ts == ts for r in runs].index(True)]),
                           "since_slow_on_node_h": since(lambda r: (r.cabinet, r.node) == (cab, node)),
                           "since_slow_in_cabinet_h": since(lambda r: r.cabinet == cab)})
    out["events"] = events
    out["slow_runs_in_multi_gpu_events"] = sum(e["slow_gpus"] for e in events if e["slow_gpus"] > 1)
    f = {n: i for i, n in enumerate(ds.features)}
    rule = {}
    for where in ("node", "cab"):
        since = ds.X[idx, f[f"{where}_since_slow_h"]]
        for h in WINDOWS_H:
            pred = since <= h
            tp = int((pred & y).sum())
            rule[f"{where}_{h}h"] = {"flagged": int(pred.sum()), "slow_flagged": tp,
                                     "precision": round(tp / pred.sum(), 3) if pred.any() else None,
                                     "recall": round(tp / y.sum(), 3)}
    out["recent_slow_rule"] = rule
    te = idx[test[idx]]
    yt = ds.y[te].astype(bool)
    if yt.any():
        feats = {}
        for name, col in f.items():
            if name.startswith("app_"):
                continue
            x = ds.X[te, col]
            feats[name] = {"auc": _auc(x, yt), **_best_threshold(x, yt)}
        out["features_test"] = dict(sorted(feats.items(), key=lambda kv: -kv[1]["f1"]))
        best = max(feats.values(), key=lambda v: v["f1"])
        out["best_single_feature_test"] = {"feature": max(feats, key=lambda k: feats[k]["f1"]), **best}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apps", default="resnet,bert,pagerank")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    apps = tuple(args.apps.split(","))
    ds = build_dataset([r for r in load_records("longhorn") if r.app in apps])
    result = fit(ds, data=f"longhorn ({', '.join(apps)})", seed=args.seed)
    report = result.to_json()
    alone = {}
    for app in apps:
        try:
            one = fit(build_dataset([r for r in ds.runs if r.app == app]), data=app, seed=args.seed).to_json()
        except SlowRunError as e:
            alone[app] = {"error": str(e)}
            continue
        alone[app] = {k: one[k] for k in ("chosen", "cv_f1", "grouped_cv_f1", "test_f1", "chosen_test_f1",
                                          "chosen_by_app", "baseline", "features")}
    print(strict_json.dumps({
        "apps": list(apps), "runs": len(ds.runs), "slow": int(ds.y.sum()),
        "per_app": {app: analyse(ds, app, result.test) for app in apps},
        "model": {k: report[k] for k in ("chosen", "cv_f1", "grouped_cv_f1", "test_f1", "chosen_test_f1",
                                         "chosen_by_app", "baseline", "features")},
        "per_app_models": alone,
    }, indent=1))


if __name__ == "__main__":
    main()
