"""Several placements and seeds in one ``pcs-ray simulate``: one set of options per combination of them.

``--placement``, ``--seed`` and ``--profile-seed`` take a value, several
comma-separated, or repeat (as ``--policy`` does); every combination of them
is one plan (``simulate_plan``), whose policies are its runs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pcs_ray.commands.inputs import UsageError
from pcs_ray.commands.simulate_options import SimulateOptions

#: The options that may hold several values, with the value a plan gets when one is not given.
AXES = {"placement": None, "seed": None, "profile_seed": 0}


@dataclass(frozen=True)
class Combination:
    options: SimulateOptions  # checked, with one placement, one seed and one profile seed
    tag: str  # the values that set it apart from the other combinations ("" when it is the only one)

    def label(self, run_label: str) -> str:
        """A run's label within this combination, unique among all the command's runs."""
        return f"{run_label} ({self.tag})" if self.tag else run_label


def listed(values: list[str] | None, option: str) -> list[str]:
    """Repeatable, comma-separated ``values`` in order, repeats dropped; [] when the option was not given."""
    if not values:
        return []
    tokens = list(dict.fromkeys(t.strip() for value in values for t in value.split(",") if t.strip()))
    if not tokens:
        raise UsageError(f"{option} is empty; give a value or several, comma-separated")
    return tokens


def integers(values: list[str] | None, option: str) -> list[int]:
    """``listed`` values as integers; a one-line error for one that is not."""
    out = []
    for token in listed(values, option):
        try:
            out.append(int(token))
        except ValueError:
            raise UsageError(f"{option} takes integers, got {token!r}") from None
    return list(dict.fromkeys(out))


def combinations(given: dict) -> list[Combination]:
    """``given``: the command's options by name (``placement``, ``seed``, ``profile_seed`` as lists of strings,
    or None); one checked ``Combination`` per placement x seed x profile seed, in that nesting order."""
    rest = {k: v for k, v in given.items() if k not in AXES}
    values = {
        "placement": listed(given.get("placement"), "--placement"),
        "seed": integers(given.get("seed"), "--seed"),
        "profile_seed": integers(given.get("profile_seed"), "--profile-seed"),
    }
    axes = {name: vals or [AXES[name]] for name, vals in values.items()}
    varying = [name for name, vals in axes.items() if len(vals) > 1]
    out = []
    for picked in itertools.product(*axes.values()):
        one = dict(zip(axes, picked))
        tag = ", ".join(f"{name.replace('_', ' ')} {one[name]}" for name in varying)
        out.append(Combination(SimulateOptions(**rest, **one).checked(), tag))
    return out
