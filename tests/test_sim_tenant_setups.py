"""Tenants on one simulated cluster (``pcs_ray.sim.tenant_setups``, ``tenant_report``): the ledger of
borrowed and lent GPU-seconds, the three setups side by side, and ``pcs-ray simulate --tenants``."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from pcs_ray.policies import build_policy
from pcs_ray.tenants.spec import Tenant, TenantsError, TenantsFile
from pcs_ray.workloads.generator import generate_workload
from builders import job_spec, running

#: A job of up to four GPUs, any of them, with a thousand GPU-seconds of work (``tenant=`` names its tenant).
spec = partial(job_spec, service=1000.0, max_gpus=4)


def test_the_ledger_counts_borrowed_and_lent_gpu_seconds():
    from pcs_ray.sim.tenant_report import TenantLedger

    ledger = TenantLedger({"a": 4, "b": 4}, 8)
    ledger.observe(0.0, [running(spec(0, tenant="a", max_gpus=8), alloc=8)])  # a borrows all of b's quota
    ledger.observe(100.0, [running(spec(0, tenant="a", max_gpus=8), alloc=4), running(spec(1, tenant="b"), alloc=2)])
    ledger.observe(300.0, [])
    assert ledger.borrowed == {"a": 400.0, "b": 0.0} and ledger.lent == {"a": 0.0, "b": 400.0}


def test_three_setups_side_by_side():
    from pcs_ray.sim.tenant_setups import run_setups

    busy = generate_workload("themis1", 40, 8, load=2.0, seed=1)
    idle = [replace(s, submit_time=s.submit_time * 20) for s in generate_workload("themis1", 10, 8, load=0.5, seed=2)]
    tenants = TenantsFile(tenants={"busy": Tenant(quota=8), "idle": Tenant(quota=8)})
    out = run_setups({"busy": busy, "idle": idle}, tenants, lambda: build_policy("fifo"))["setups"]
    assert set(out) == {"static", "shared", "flat"} and all(s["gpus"] == 16 for s in out.values())
    static, shared = out["static"]["tenants"], out["shared"]["tenants"]
    assert static["busy"]["borrowed_gpu_s"] == 0 and shared["busy"]["borrowed_gpu_s"] > 0
    assert shared["busy"]["borrowed_gpu_s"] == pytest.approx(shared["idle"]["lent_gpu_s"])
    assert shared["busy"]["avg_jct"] < static["busy"]["avg_jct"]
    assert shared["idle"]["avg_jct"] <= static["idle"]["avg_jct"]  # its quota back at once, and it borrows too
    assert all(t["avg_pred_err"] is not None for s in out.values() for t in s["tenants"].values())
    with pytest.raises(TenantsError, match="no quota for tenant"):
        run_setups({"busy": busy, "other": idle}, tenants, lambda: build_policy("fifo"))


@pytest.mark.parametrize("args, message", [
    (["--tenants", "philly/51b7ef=-8"], "quota: Input should be greater than or equal to 0"),
    (["--tenants", "philly/51b7ef"], "expected NAME=QUOTA"),
    (["--tenants", "philly/51b7ef=8", "--placement", "pal"], "--tenants does not combine with --placement"),
    (["--tenants", "philly/51b7ef=8", "-p", "fifo,srsf"], "one inner policy"),
    (["--tenants", "philly/nope=8"], "trace 'philly/nope' is neither a file nor a bundled name"),
    (["--tenants", "philly/51b7ef=0,philly/ed69ec=8"], "more than its quota of 0"),
])
def test_simulate_tenants_bad_input_is_one_line(args, message, capsys):
    from pcs_ray.cli import run

    assert run(["simulate", *args, "--no-predict"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_simulate_tenants_prints_three_setups(capsys):
    import json

    from pcs_ray.cli import run

    assert run(["simulate", "--tenants", "philly/51b7ef=8,philly/ed69ec=8", "-p", "fifo", "--json", "--no-predict"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["setups"]) == {"static", "shared", "flat"}
    assert set(out["setups"]["shared"]["tenants"]) == {"trace_51b7ef", "trace_ed69ec"}
    assert out["workload"]["quotas"] == {"trace_51b7ef": 8, "trace_ed69ec": 8}
