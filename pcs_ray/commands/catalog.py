"""The lists of policy and placement names that help texts and the README show, rendered from the registries.

Names come from ``pcs_ray.policies`` and ``pcs_ray.placement.PLACEMENTS``,
so a new policy or placement appears everywhere at once;
``tests/test_readme.py`` checks that the README shows these lists verbatim.
"""

from __future__ import annotations

from pcs_ray.placement import PLACEMENTS
from pcs_ray.policies import ABOUT, policy_names

# One line per placement. Kept here until the placement registry describes its own entries;
# ``placement_about`` is the one place that reads them.
_PLACEMENT_ABOUT = {
    "packed-sticky": "fewest nodes per app, kept until its GPU count changes (Tiresias)",
    "packed-nonsticky": "fewest nodes per app, re-placed every round (Gandiva)",
    "random-sticky": "random free GPUs, kept until the app's GPU count changes",
    "random-nonsticky": "random free GPUs, drawn again every round",
    "pm-first": "variability-sensitive classes (A first) get the GPUs with the best binned scores",
    "pal": "PM-First's scores traded against locality through PAL's L x V matrix",
    "mapa-baseline": "MAPA baseline: the lowest free GPU ids on the first node that fits (as Docker does)",
    "mapa-topo": "MAPA topo-aware: the first CPU socket that fits",
    "mapa-greedy": "MAPA greedy: the embedding of the app's communication pattern with the most bandwidth",
    "mapa-preserve": "MAPA preserve: bandwidth-sensitive apps the best predicted effective bandwidth, others "
                     "what leaves the most bandwidth free",
    "combined": "ours: the lowest variability x locality x topology slowdown per app",
}


def placement_about(name: str) -> str:
    """One line about a placement name (its class's docstring summary when none is written down)."""
    if name in _PLACEMENT_ABOUT:
        return _PLACEMENT_ABOUT[name]
    cls, _ = PLACEMENTS[name]
    return (cls.__doc__ or cls.__name__).strip().splitlines()[0].rstrip(".")


def bullets(pairs) -> str:
    """Markdown bullets, ``* `name`: about``, one per line (Typer's help and the README read the same)."""
    return "\n".join(f"* `{name}`: {about}" for name, about in pairs)


def policy_list() -> str:
    return bullets((name, ABOUT[name]) for name in policy_names())


def placement_list() -> str:
    return bullets((name, placement_about(name)) for name in PLACEMENTS)
