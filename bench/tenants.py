"""Does sharing one cluster among Philly's virtual clusters pay for every tenant, and keep predictions?

Each trace is a tenant with quota ``--quota`` GPUs; the cluster is their sum.
Three setups run the same jobs with the same policy inside each tenant
(``--policy``, default pcs-bal): ``static`` (each VC alone on its quota, the
PCS artifact's partition), ``shared`` (the tenant policy: quotas guaranteed,
idle quota lent by weight) and ``flat`` (one policy over all jobs, no tenants).

Usage: ``python bench/tenants.py [--traces NAME_OR_FILE ...] [--quota G] [--policy NAME] [--no-predict]
[--jobs N]``; prints one JSON object ``{"setups": {"static"|"shared"|"flat": {"avg_jct": s, "tenants": {NAME:
{"avg_jct", "avg_pred_err", "borrowed_gpu_s", "lent_gpu_s", "preemptions", "jobs"}}, "gpus", "wall_s"}},
"checks": {...}, "workload": {...}}``, tenants named by their traces' file stems. ``checks`` compares
shared with static: each tenant's JCT ratio and prediction error difference (points), and the cluster's JCT ratio.
"""

from __future__ import annotations

import argparse
import sys

from pcs_ray.api import strict_json
from pcs_ray.commands.simulate_tenants import tenant_workloads
from pcs_ray.policies import build_policy
from pcs_ray.sim.tenant_setups import run_setups

#: Four bundled Philly VCs of different loads (on 64 GPUs: 0.19, 1.38, 0.92 and 0.28).
DEFAULT_TRACES = ("philly/ed69ec", "philly/7f04ca", "philly/0e4a51", "philly/103959")


def checks(setups: dict) -> dict:
    """Shared against static: JCT ratios (shared / static) and prediction error differences (points)."""
    static, shared = setups["static"], setups["shared"]
    per = {}
    for name, s in static["tenants"].items():
        t = shared["tenants"][name]
        err = None if s["avg_pred_err"] is None else t["avg_pred_err"] - s["avg_pred_err"]
        per[name] = {"jct_ratio": t["avg_jct"] / s["avg_jct"], "pred_err_diff_points": err}
    return {
        "cluster_jct_ratio": shared["avg_jct"] / static["avg_jct"],
        "tenants": per,
        "every_tenant_within_2pct": all(v["jct_ratio"] <= 1.02 for v in per.values()),
        "pred_err_within_2_points": all(v["pred_err_diff_points"] is None or v["pred_err_diff_points"] <= 2.0
                                        for v in per.values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="+", default=list(DEFAULT_TRACES), metavar="NAME_OR_FILE")
    ap.add_argument("--quota", type=int, default=64, metavar="G", help="GPUs guaranteed to each tenant")
    ap.add_argument("--policy", default="pcs-bal", help="the policy inside each tenant (and of static and flat)")
    ap.add_argument("--no-predict", dest="predict", action="store_false")
    ap.add_argument("--jobs", type=int, default=None, metavar="N", help="only each trace's first N jobs")
    args = ap.parse_args()
    if args.quota < 1:
        sys.exit(f"error: --quota must be >= 1, got {args.quota}")
    if args.jobs is not None and args.jobs < 1:
        sys.exit(f"error: --jobs must be >= 1, got {args.jobs}")
    try:
        build_policy(args.policy)
        workloads, tenants = tenant_workloads(",".join(f"{t}={args.quota}" for t in args.traces))
        if args.jobs is not None:
            workloads = {k: v[: args.jobs] for k, v in workloads.items()}
        out = run_setups(workloads, tenants, lambda: build_policy(args.policy), predict=args.predict)
    except ValueError as e:
        sys.exit(f"error: {e}")
    out["checks"] = checks(out["setups"])
    out["workload"] = {"traces": list(args.traces), "quota": args.quota, "policy": args.policy,
                       "predict": args.predict, "jobs": {k: len(v) for k, v in workloads.items()}}
    print(strict_json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
