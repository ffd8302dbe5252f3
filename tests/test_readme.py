"""The README's lists of policies and placements are the registries' own, verbatim."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pcs_ray.commands.catalog import placement_list, policy_list, semantics_list
from pcs_ray.placement import PLACEMENTS
from pcs_ray.policies import policy_names

README = Path(__file__).resolve().parent.parent / "README.md"


def block(tag: str) -> str:
    match = re.search(rf"<!-- {tag}:[^\n]*-->\n(.*?)\n<!-- /{tag} -->", README.read_text(), re.S)
    assert match, f"README.md has no <!-- {tag}: ... --> ... <!-- /{tag} --> block"
    return match.group(1)


@pytest.mark.parametrize("tag,render", [("policies", policy_list), ("placements", placement_list),
                                        ("semantics", semantics_list)])
def test_readme_list_is_rendered_from_the_registry(tag, render):
    assert block(tag) == render(), f"paste this between the README's {tag} markers:\n{render()}"


def test_every_registered_name_is_listed():
    assert re.findall(r"^\* `([^`]+)`", block("policies"), re.M) == policy_names()
    assert re.findall(r"^\* `([^`]+)`", block("placements"), re.M) == list(PLACEMENTS)


def test_every_command_and_group_is_in_the_layout_table():
    """The layout table's CLI row names every registered command and command group."""
    from pcs_ray import cli

    row = next(line for line in README.read_text().splitlines() if line.startswith("| CLI |"))
    names = [c.name for c in cli.app.registered_commands] + [g.name for g in cli.app.registered_groups]
    missing = [n for n in names if f"`{n}`" not in row]
    assert not missing, f"README's layout table does not name {missing}"


def test_slow_runs_fit_is_documented():
    text = README.read_text()
    assert "pcs-ray slow-runs fit --data longhorn" in text and "--run-variability longhorn" in text
