"""Pareto fronts an operator can read: selection, hypervolume, table, JSON and plot.

Hypervolume and non-dominance come from ``moocore`` (what deap itself uses).
All objectives are minimised; a point with an infinite value never enters a
front.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import moocore
import numpy as np

from pcs_ray.solver.objectives import Objective
from pcs_ray.solver.space import canonical_dict, config_key
from pcs_ray.policies import WFQConfig

FRONT_VERSION = 1


@dataclass
class FrontPoint:
    """One configuration on the front: parameters, decoded config and objective values."""

    config: WFQConfig
    genes: dict[str, float]
    train: tuple[float, ...]
    test: tuple[float, ...] | None = None
    train_std: tuple[float, ...] | None = None
    test_std: tuple[float, ...] | None = None

    @property
    def spec(self) -> str:
        return config_key(self.config)


@dataclass
class Reference:
    """A policy drawn on the front for comparison (a baseline or a published configuration)."""

    label: str
    spec: str
    test: tuple[float, ...]
    train: tuple[float, ...] | None = None
    extra: dict = field(default_factory=dict)


def pareto_indices(values: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the non-dominated, finite points (one of each set of duplicates)."""
    idx = [i for i, v in enumerate(values) if all(math.isfinite(x) for x in v)]
    if not idx:
        return []
    mask = moocore.is_nondominated(np.asarray([values[i] for i in idx], dtype=float))
    return [i for i, keep in zip(idx, mask) if keep]


def hypervolume(points: Sequence[Sequence[float]], ref: Sequence[float]) -> float:
    """Volume dominated by ``points`` and bounded by ``ref`` (points outside the box add nothing)."""
    finite = [p for p in points if all(math.isfinite(x) for x in p)]
    if not finite:
        return 0.0
    return float(moocore.hypervolume(np.asarray(finite, dtype=float), ref=np.asarray(ref, dtype=float)))


def normalised_hypervolume(points: Sequence[Sequence[float]], ref: Sequence[float]) -> float:
    """Hypervolume as a fraction of the box between the origin and ``ref`` (all objectives are >= 0)."""
    box = float(np.prod(ref))
    return hypervolume(points, ref) / box if box > 0 else 0.0


def reference_point(point_sets: Sequence[Sequence[Sequence[float]]], margin: float = 0.1) -> tuple[float, ...]:
    """``(1 + margin)`` x the worst finite value per objective over the given points."""
    finite = [p for points in point_sets for p in points if all(math.isfinite(x) for x in p)]
    if not finite:
        raise ValueError("no finite points to place a reference point")
    worst = np.max(np.asarray(finite, dtype=float), axis=0)
    return tuple(float(w * (1 + margin)) if w > 0 else margin for w in worst)


def weakly_dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` is at least as good as ``b`` in every objective."""
    return all(x <= y for x, y in zip(a, b))


def dominance_report(front: Sequence[Sequence[float]], others: Mapping[str, Sequence[float]]) -> dict[str, int | None]:
    """For each other point, the index of a front point that weakly dominates it (None if none does)."""
    out: dict[str, int | None] = {}
    for label, point in others.items():
        out[label] = next((i for i, p in enumerate(front) if weakly_dominates(p, point)), None)
    return out


# -- presentation -------------------------------------------------------------------


def format_value(value: float | None, objective: Objective) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if objective.metric == "jct":
        return f"{value / 3600:.2f}h"
    return f"{value:.1f}%"


def front_table(points: Sequence[FrontPoint], objectives: Sequence[Objective], references: Sequence[Reference] = (),
                title: str = "Pareto front"):
    """A rich table: one row per configuration (parameters, train and test objectives), then the references."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", caption_justify="left",
                  caption="JCT in hours, errors and unfairness in %; train = search samples, test = held-out samples")
    for header in ("#", "queues", "W", "zeta", "delta", "thresholds (GPU-s)"):
        table.add_column(header, justify="right" if header != "thresholds (GPU-s)" else "left")
    for o in objectives:
        table.add_column(f"{o.label} train", justify="right")
        table.add_column(f"{o.label} test", justify="right")
    for n, p in enumerate(points):
        c = p.config
        cuts = ", ".join(f"{t:.0f}" for t in c.thresholds[:-1]) or "-"
        if len(cuts) > 40:
            cuts = cuts[:37] + "..."
        w = c.normalised_weights
        steep = math.log(w[0] / w[1]) if len(w) > 1 else 0.0  # the W that gives these weights
        row = [str(n), str(len(c.thresholds)), f"{steep:.2f}", f"{c.zeta_min:.2f}", f"{c.delta:.2f}", cuts]
        for k, o in enumerate(objectives):
            row += [format_value(p.train[k], o), format_value(p.test[k] if p.test else None, o)]
        table.add_row(*row)
    for r in references:
        row = [r.label, "", "", "", "", ""]
        for k, o in enumerate(objectives):
            row += [format_value(r.train[k] if r.train else None, o), format_value(r.test[k], o)]
        table.add_row(*row, style="dim")
    return table


def _num(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _named(values: Sequence[float] | None, objectives: Sequence[Objective]) -> dict | None:
    if values is None:
        return None
    return {o.label: _num(v) for o, v in zip(objectives, values)}


def front_json(points: Sequence[FrontPoint], objectives: Sequence[Objective], references: Sequence[Reference],
               about: dict) -> dict:
    """The front file: problem, each configuration (loadable WFQ config + values), references."""
    return {
        "version": FRONT_VERSION,
        "objectives": [o.label for o in objectives],
        **about,
        "front": [
            {
                "index": n,
                "parameters": {k: _num(v) for k, v in p.genes.items()},
                "config": canonical_dict(p.config),
                "train": _named(p.train, objectives),
                "test": _named(p.test, objectives),
                "train_std": _named(p.train_std, objectives),
                "test_std": _named(p.test_std, objectives),
            }
            for n, p in enumerate(points)
        ],
        "references": [
            {"label": r.label, "policy": r.spec if not r.spec.startswith("{") else "pcs",
             "train": _named(r.train, objectives), "test": _named(r.test, objectives), **r.extra}
            for r in references
        ],
    }


def _axis_value(v: float, o: Objective) -> float:
    return v / 3600 if o.metric == "jct" else v


def _axis_label(o: Objective) -> str:
    unit = "hours" if o.metric == "jct" else "%"
    return f"{o.metric} {o.measure} ({unit})"


def plot_front(path, points: Sequence[FrontPoint], objectives: Sequence[Objective], references: Sequence[Reference],
               title: str = "") -> None:
    """Front (test values) with the reference policies; one panel per pair of objectives."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [(a, b) for a in range(len(objectives)) for b in range(a + 1, len(objectives))] or [(0, 0)]
    fig, axes = plt.subplots(1, len(pairs), figsize=(6 * len(pairs), 5), squeeze=False)
    values = [p.test if p.test is not None else p.train for p in points]
    for ax, (a, b) in zip(axes[0], pairs):
        oa, ob = objectives[a], objectives[b]
        finite = sorted((v for v in values if math.isfinite(v[a]) and math.isfinite(v[b])), key=lambda v: v[a])
        ax.plot([_axis_value(v[a], oa) for v in finite], [_axis_value(v[b], ob) for v in finite],
                "o-" if len(objectives) == 2 else "o", color="tab:blue", label="front (test samples)", markersize=5)
        if len(values) <= 30:  # numbers match the table's rows; beyond that they only clutter
            for n, v in enumerate(values):
                if math.isfinite(v[a]) and math.isfinite(v[b]):
                    ax.annotate(str(n), (_axis_value(v[a], oa), _axis_value(v[b], ob)), fontsize=7,
                                textcoords="offset points", xytext=(3, 3))
        markers = iter("s^vD<>ph*X")
        shown = [v for v in values] + [r.test for r in references]
        for r in references:
            if math.isfinite(r.test[a]) and math.isfinite(r.test[b]):
                ax.plot(_axis_value(r.test[a], oa), _axis_value(r.test[b], ob), next(markers, "x"), linestyle="none",
                        label=r.label, markersize=8, alpha=0.85)
        for axis, k, o in ((ax.set_xscale, a, oa), (ax.set_yscale, b, ob)):
            top = max((v[k] for v in shown if math.isfinite(v[k])), default=0.0)
            if o.metric != "jct" and top > 50:  # percentages spanning decades (FIFO's unfairness, Themis' errors)
                axis("symlog", linthresh=1.0)
        ax.set_xlabel(_axis_label(oa))
        ax.set_ylabel(_axis_label(ob))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


class FrontFileError(ValueError):
    """A front file that cannot be read."""


def read_front(path) -> tuple[tuple[Objective, ...], list[FrontPoint]]:
    """Objectives and points of a front file written by ``front_json``."""
    import json
    from pathlib import Path

    from pcs_ray.solver.objectives import parse_objectives

    p = Path(path)
    if not p.is_file():
        raise FrontFileError(f"no such front file: {path}")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
        objectives = parse_objectives(raw["objectives"])
        points = []
        for entry in raw["front"]:
            def values(split):
                named = entry.get(split)
                if named is None:
                    return None
                return tuple(math.inf if named[o.label] is None else float(named[o.label]) for o in objectives)
            points.append(FrontPoint(WFQConfig.from_dict(entry["config"], str(path)), dict(entry.get("parameters") or {}),
                                     values("train"), values("test")))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise FrontFileError(f"{path}: not a front file written by 'pcs-ray solve' ({type(e).__name__}: {e})") from None
    if raw.get("version") != FRONT_VERSION:
        raise FrontFileError(f"{path}: front file version {raw.get('version')!r}, expected {FRONT_VERSION}")
    return objectives, points
