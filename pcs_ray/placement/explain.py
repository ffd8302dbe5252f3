"""Why a job got its GPUs: the winner's breakdown, built only when someone asks.

The hot path keeps one :class:`~pcs_ray.placement.framework.Decision` per
job (the winner's source, GPUs, score factors, tie-break factors, rejection
counts); this module turns it into the dictionary ``Placement.explain``
returns. Shares are computed on the log scale the framework ranks on: the
total is ``prod(value ** weight)``, so ``ln(total) = sum(weight * ln(value))``
and a score's share is its ``|weight * ln(value)|`` over the sum of them.
"""

from __future__ import annotations

import math

from pcs_ray.placement.framework import Configuration, Decision


def explanation(config: Configuration, job_id: int, decision: Decision, held: tuple[int, ...] | None = None) -> dict:
    """The explanation of one decision (shape: ``Placement.explain``); ``held`` are the GPUs as kept now."""
    row = decision.row
    chosen = [int(g) for g in decision.gpus]
    parts = []
    for (plugin, weight), values in zip(config.scores, decision.values):
        value = float(values[row])
        parts.append((plugin.name, value, weight, abs(weight * math.log(value)) if value > 0 else math.inf))
    size = sum(p[3] for p in parts)
    total = math.prod(value ** weight for _, value, weight, _ in parts) if parts else 1.0
    scores = [{"plugin": name, "value": value, "weight": weight, "share": _share(cost, size)}
              for name, value, weight, cost in parts]
    return {
        "job_id": job_id,
        "placement": config.name,
        "gpus": list(held if held is not None and set(held) == set(chosen) else chosen),
        "source": decision.source,
        "candidates": decision.candidates,
        "total": total,
        "scores": scores,
        "tie_breaks": [{"plugin": p.name, "value": float(v[row])} for p, v in zip(config.tie_breaks, decision.ties)],
        "rejections": dict(decision.rejections),
    }


def _share(cost: float, size: float) -> float:
    if size == 0:
        return 0.0  # every value is 1: no score pushed either way
    if math.isinf(size):  # a score at 0 or infinity dominates
        return 1.0 if math.isinf(cost) else 0.0
    return cost / size


__all__ = ["explanation"]
