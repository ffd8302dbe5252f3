"""The tenants file (``pcs_ray.tenants.spec``): one-line errors, the cluster's capacity, what a job may
ask, quotas given on the command line."""

from __future__ import annotations

import pytest

from pcs_ray.tenants.spec import TenantsError, load_tenants, parse_quotas, tenants_from_dict
from builders import job_spec


@pytest.mark.parametrize("raw, message", [
    ({"tenants": {"a": {"quota": -1}}}, "tenants.a.quota: Input should be greater than or equal to 0"),
    ({"tenants": {"a": {"quota": 4, "colour": "red"}}}, "tenants.a.colour: Extra inputs are not permitted"),
    ({"tenant": {}}, "tenant: Extra inputs are not permitted"),
    ({"tenants": {"a": {"quota": 4, "weight": 0}}}, "weight: Input should be greater than 0"),
    ({"tenants": {"a=b": {"quota": 4}}}, "tenant name 'a=b'"),
    ({"min_runtime_s": -5}, "min_runtime_s: Input should be greater than or equal to 0"),
    ([1, 2], "expected a mapping"),
])
def test_a_bad_tenants_file_is_one_line(raw, message):
    with pytest.raises(TenantsError, match=message) as e:
        tenants_from_dict(raw, "t.yaml")
    assert "\n" not in str(e.value)


def test_quotas_past_the_cluster_unknown_tenants_and_long_min_runtimes_are_refused(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("tenants:\n  a: {quota: 6}\n  b: {quota: 4}\nmin_runtime_s: 60\nmax_min_runtime_s: 600\n")
    tenants = load_tenants(path)
    tenants.check_capacity(10)
    with pytest.raises(TenantsError, match="add up to 10 GPUs, more than the cluster's 8"):
        tenants.check_capacity(8)
    tenants.check_job(job_spec(0, tenant="a", min_runtime_s=600))
    with pytest.raises(TenantsError, match="unknown tenant 'c'; tenants: a, b"):
        tenants.check_job(job_spec(0, tenant="c"))
    with pytest.raises(TenantsError, match="min_runtime_s 601 is past the operator's bound of 600 s"):
        tenants.check_job(job_spec(0, tenant="a", min_runtime_s=601))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(TenantsError, match="not valid JSON"):
        load_tenants(tmp_path / "bad.json")


def test_quotas_on_the_command_line():
    assert parse_quotas("philly/0e4a51=64, ed69ec=32") == {"philly/0e4a51": 64, "ed69ec": 32}
    for bad, message in (("a", "expected NAME=QUOTA"), ("a=x", "whole number"), ("a=1,a=2", "given twice")):
        with pytest.raises(TenantsError, match=message):
            parse_quotas(bad)
