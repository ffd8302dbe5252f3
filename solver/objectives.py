"""What the operator asks the solver to minimise: a metric and a measure.

PCS §3.2: objectives are ``<Metric, Measure>`` pairs, metric one of JCT,
prediction error and unfairness, measure ``avg`` or a percentile ``pNN``;
the same metric may appear with different measures. All are minimised.
Units: JCT in seconds, prediction error and unfairness in percent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from pcs_ray.sim.metrics import pred_errors, unfairness
from pcs_ray.sim.engine import SimResult

METRICS = {"jct": "JCT (s)", "pred_err": "prediction error (%)", "unfairness": "unfairness (%)"}
ALIASES = {"pred": "pred_err", "pred_error": "pred_err", "prediction_error": "pred_err", "unfair": "unfairness",
           "fairness": "unfairness"}
_PERCENTILE = re.compile(r"^p(\d+(?:\.\d+)?)$")


class ObjectiveError(ValueError):
    """An objective the solver does not know."""


@dataclass(frozen=True)
class Objective:
    metric: str  # one of METRICS
    measure: str  # "avg" or "pNN"

    @property
    def label(self) -> str:
        return f"{self.metric}:{self.measure}"

    @property
    def unit(self) -> str:
        return "s" if self.metric == "jct" else "%"

    def percentile(self) -> float | None:
        m = _PERCENTILE.match(self.measure)
        return float(m.group(1)) if m else None

    def of(self, values: np.ndarray) -> float:
        """The measure of per-job values; inf when there are none (an unusable run)."""
        if values.size == 0:
            return float("inf")
        q = self.percentile()
        return float(values.mean()) if q is None else float(np.percentile(values, q))


def parse_objective(text: str) -> Objective:
    """``"jct:avg"``, ``"pred_err:p99"``, ``"unfairness:p95"`` (also ``metric_measure`` or ``measure_metric``)."""
    raw = text.strip().lower()
    parts = re.split(r"[:/ ]", raw, maxsplit=1) if any(c in raw for c in ":/ ") else None
    if parts is None:
        # The artifact's spelling: avg_jct, p99_pred_error; or jct_avg.
        head, _, tail = raw.partition("_")
        parts = [tail, head] if head == "avg" or _PERCENTILE.match(head) else raw.rsplit("_", 1)
    if len(parts) != 2 or not all(parts):
        raise ObjectiveError(f"objective {text!r} must be METRIC:MEASURE, e.g. jct:avg or pred_err:p99")
    metric, measure = (p.strip() for p in parts)
    metric = ALIASES.get(metric, metric)
    if metric not in METRICS:
        raise ObjectiveError(f"unknown objective metric {metric!r} in {text!r}; known: {', '.join(METRICS)}")
    if measure == "mean":
        measure = "avg"
    m = _PERCENTILE.match(measure)
    if measure != "avg" and not (m and 0 < float(m.group(1)) <= 100):
        raise ObjectiveError(f"unknown measure {measure!r} in {text!r}; use avg or pNN with 0 < NN <= 100, e.g. p99")
    if m:
        measure = f"p{float(m.group(1)):g}"
    return Objective(metric, measure)


def parse_objectives(spec: str | Iterable[str | tuple[str, str] | Objective]) -> tuple[Objective, ...]:
    """A comma-separated string or a sequence of specs, ``(metric, measure)`` pairs or ``Objective``s."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = []
    for item in items:
        if isinstance(item, Objective):
            out.append(item)
        elif isinstance(item, tuple):
            if len(item) != 2:
                raise ObjectiveError(f"objective {item!r} must be a (metric, measure) pair")
            out.append(parse_objective(f"{item[0]}:{item[1]}"))
        elif str(item).strip():
            out.append(parse_objective(str(item)))
    if not out:
        raise ObjectiveError("give at least one objective, e.g. jct:avg,pred_err:avg")
    if len(set(out)) != len(out):
        raise ObjectiveError(f"objective listed twice: {', '.join(o.label for o in out)}")
    return tuple(out)


def per_job_values(result: SimResult) -> dict[str, np.ndarray]:
    """Per-job JCT (s), first-prediction error (%) and finish-time unfairness (%), as PCS measures them."""
    records = result.records
    return {
        "jct": np.asarray([r.finish - r.submit for r in records], dtype=float),
        "pred_err": pred_errors(records)[0],
        "unfairness": unfairness(records, result.capacity),
    }


def measure(result: SimResult, objectives: Sequence[Objective]) -> tuple[float, ...]:
    values = per_job_values(result)
    return tuple(o.of(values[o.metric]) for o in objectives)
