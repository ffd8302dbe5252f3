"""Demand functions: how a job's throughput grows with its GPU count.

PCS calls the execution time under n GPUs the demand function; we store its
inverse, the speedup ``S(n) = T(1) / T(n)``, tabulated for ``n = 0..max``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class DemandFunction(Protocol):
    name: str

    def speedup(self, n: int) -> float: ...


@dataclass(frozen=True)
class LinearDemand:
    """Perfect scaling (the PCS artifact's default)."""

    name: str = "linear"

    def speedup(self, n: int) -> float:
        return float(max(n, 0))


@dataclass(frozen=True)
class SubLinearDemand:
    """``S(n) = n ** alpha`` with ``0 < alpha <= 1``: diminishing returns."""

    alpha: float = 0.8
    name: str = "sublinear"

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1:
            raise ValueError(f"sub-linear exponent must be in (0, 1], got {self.alpha}")

    def speedup(self, n: int) -> float:
        return float(n) ** self.alpha if n > 0 else 0.0


@dataclass(frozen=True)
class TabulatedDemand:
    """Measured per-iteration times by GPU count; flat beyond the last entry."""

    iteration_times: tuple[float, ...]
    name: str = "tabulated"

    def __post_init__(self) -> None:
        if not self.iteration_times or any(t <= 0 for t in self.iteration_times):
            raise ValueError(f"{self.name}: iteration times must be positive")

    def speedup(self, n: int) -> float:
        if n <= 0:
            return 0.0
        times = self.iteration_times
        return times[0] / times[min(n, len(times)) - 1]


def speedup_table(demand: DemandFunction, max_gpus: int) -> tuple[float, ...]:
    """Tabulate ``demand`` for ``0..max_gpus`` as ``JobSpec.speedup`` expects.

    Made non-decreasing: a job never runs slower with more GPUs, because the
    scheduler would simply leave the extra GPUs idle for it.
    """
    table = [0.0]
    for n in range(1, max_gpus + 1):
        table.append(max(table[-1], demand.speedup(n)))
    return tuple(table)


def load_speedup_curves(path: str | Path) -> dict[str, TabulatedDemand]:
    """Read ``speedup-curves.json`` (PCS artifact) into demand functions by model name."""
    raw = json.loads(Path(path).read_text())
    return {
        name: TabulatedDemand(tuple(float(t) for t in entry["iteration_time_us_by_gpus"]), name=name)
        for name, entry in raw["models"].items()
    }
