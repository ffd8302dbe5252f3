"""``pcs-ray simulate --tenants``: several traces as tenants of one cluster, static / shared / flat side by side."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from pcs_ray.commands.inputs import UsageError
from pcs_ray.data import locate
from pcs_ray.jobs.spec import JobSpec
from pcs_ray.tenants.spec import TenantsFile, load_tenants, parse_quotas, tenants_from_dict

DEFAULT_INNER = "pcs-bal"


def tenant_workloads(value: str, speedup: str | None = None) -> tuple[dict[str, list[JobSpec]], TenantsFile]:
    """Each tenant's jobs and the tenants, from ``NAME=QUOTA,...`` or a tenants file whose tenant names are
    traces (bundled names or CSV files). Tenants are renamed to their traces' file stems."""
    from pcs_ray.workloads.traces import default_speedup, read_trace

    if "=" not in value and Path(value).exists():
        declared = load_tenants(value)
    else:
        declared = tenants_from_dict({"tenants": {name: {"quota": q} for name, q in parse_quotas(value).items()}},
                                     "--tenants")
    if not declared.tenants:
        raise UsageError("--tenants: no tenants declared")
    workloads: dict[str, list[JobSpec]] = {}
    renamed = {}
    for name, tenant in declared.tenants.items():
        path = locate("trace", name)
        stem = Path(path).stem
        if stem in workloads:
            raise UsageError(f"--tenants: two tenants are trace {stem}")
        workloads[stem] = read_trace(path, speedup=speedup or default_speedup(path))
        renamed[stem] = tenant
    return workloads, declared.model_copy(update={"tenants": renamed})


def inner_name(policy: list[str] | None) -> str:
    names = [t.strip() for value in policy or [] for t in value.split(",") if t.strip()]
    if len(names) > 1 or names == ["all"]:
        raise UsageError("--tenants runs one inner policy: give one --policy")
    return names[0].lower() if names else DEFAULT_INNER


def run(value: str, policy: list[str] | None, *, speedup: str | None, predict: bool, overhead: float) -> dict:
    from pcs_ray.policies import build_policy
    from pcs_ray.sim.tenant_setups import run_setups

    name = inner_name(policy)
    if name == "tenants":
        raise UsageError("--tenants: the policy given is the one inside each tenant, not 'tenants'")
    build_policy(name)  # an unknown name fails here, before any trace is read
    workloads, tenants = tenant_workloads(value, speedup)
    out = run_setups(workloads, tenants, lambda: build_policy(name), predict=predict, overhead=overhead)
    out["workload"] = {"source": "tenants", "policy": name, "predict": predict, "overhead": overhead,
                       "quotas": {k: t.quota for k, t in tenants.tenants.items()},
                       "jobs": {k: len(v) for k, v in workloads.items()}}
    return out


def setups_table(out: dict) -> Table:
    """One row per setup and tenant: average JCT (h), prediction error, GPU-hours borrowed and lent, preemptions."""
    table = Table(title=f"tenants on {next(iter(out['setups'].values()))['gpus']} GPUs, {out['workload']['policy']} "
                        "inside each")
    for col in ("setup", "tenant", "jobs", "avg JCT (h)", "pred err %", "borrowed GPU-h", "lent GPU-h", "preemptions"):
        table.add_column(col, justify="left" if col in ("setup", "tenant") else "right")
    for setup, s in out["setups"].items():
        table.add_row(setup, "(all)", str(sum(t["jobs"] for t in s["tenants"].values())), f"{s['avg_jct'] / 3600:.2f}",
                      "", "", "", "")
        for name, t in s["tenants"].items():
            err = "-" if t["avg_pred_err"] is None else f"{t['avg_pred_err']:.2f}"
            table.add_row("", name, str(t["jobs"]), f"{t['avg_jct'] / 3600:.2f}", err, f"{t['borrowed_gpu_s'] / 3600:.0f}",
                          f"{t['lent_gpu_s'] / 3600:.0f}", str(t["preemptions"]))
    return table
