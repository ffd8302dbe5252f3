"""The lists of policy and placement names that help texts and the README show, rendered from the registries.

Names come from ``pcs_ray.policies`` and ``pcs_ray.placement.PLACEMENTS``,
so a new policy or placement appears everywhere at once;
``tests/test_readme.py`` checks that the README shows these lists verbatim.
"""

from __future__ import annotations

from pcs_ray.placement import PLACEMENTS, placement_help
from pcs_ray.policies import ABOUT, policy_names

def bullets(pairs) -> str:
    """Markdown bullets, ``* `name`: about``, one per line (Typer's help and the README read the same)."""
    return "\n".join(f"* `{name}`: {about}" for name, about in pairs)


def policy_list() -> str:
    return bullets((name, ABOUT[name]) for name in policy_names())


def placement_list() -> str:
    return bullets((name, placement_help(name)) for name in PLACEMENTS)


def semantics_list() -> str:
    from pcs_ray.sim.semantics import SEMANTICS

    return bullets(SEMANTICS.items())
