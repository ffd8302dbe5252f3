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
