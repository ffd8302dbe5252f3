"""``pcs_ray.policies.build_policy``: every name, every form of a WFQ configuration, and the errors."""

from __future__ import annotations

import json

import pytest

from pcs_ray.coordinator.config import coordinator_policy
from pcs_ray.data import pcs_config
from pcs_ray.policies import ABOUT, BUNDLED, POLICIES, WFQConfig, WFQPolicy, build_policy, policy_names
from pcs_ray.solver.evaluate import make_policy


def test_every_name_builds_and_is_described():
    assert set(ABOUT) == set(policy_names()) == set(POLICIES) | set(BUNDLED)
    for name in policy_names():
        assert build_policy(name).name == ("pcs" if name in BUNDLED else name)


@pytest.mark.parametrize("kind", ["jct", "bal", "pred"])
def test_bundled_names_are_the_artifact_configs(kind):
    expected = WFQConfig.load(pcs_config("themis1", kind))
    assert build_policy(f"pcs-{kind}").config == expected
    assert build_policy(f"PCS-{kind.upper()}").config == expected


def test_pcs_config_given_as_config_dict_file_or_name():
    path = pcs_config("themis1", "bal")
    expected = WFQConfig.load(path)
    for value in (expected, json.loads(path.read_text()), path, str(path), "themis1-bal"):
        policy = build_policy("pcs", config=value)
        assert isinstance(policy, WFQPolicy) and policy.config == expected


def test_errors_list_the_valid_choices():
    with pytest.raises(ValueError, match="valid policies: fifo, srsf, .*pcs-jct, pcs-bal, pcs-pred"):
        build_policy("nope")
    with pytest.raises(ValueError, match="bundled configuration and takes no arguments"):
        build_policy("pcs-jct", config="themis1-pred")
    with pytest.raises(ValueError, match=r"themis1-nope.* bundled name \(0e4a51-bal, "):
        build_policy("pcs", config="themis1-nope")


def test_coordinator_and_solver_build_through_it():
    bal = WFQConfig.load(pcs_config("themis1", "bal"))
    assert coordinator_policy("pcs-bal").config == bal
    assert coordinator_policy("pcs", bal.to_dict()).config == bal
    assert coordinator_policy("fifo", bal.to_dict()).name == "fifo"  # a config only matters to pcs
    with pytest.raises(ValueError, match="needs a WFQ configuration"):
        coordinator_policy("pcs")
    assert make_policy(json.dumps(bal.to_dict())).config == bal
    assert make_policy("themis").name == "themis"
