"""Power profiles: how much each simulated GPU draws for each job class, measured and predicted.

A profile is a table of measured GPUs, per class: the GPU's mean power for
the class's application, its mean run time (relative to the median) and the
power a model predicted for it without having seen that GPU run that
application (``predicted_w``). ``longhorn`` is built from PAL's Longhorn V100
records (``pcs_ray.variability.longhorn``): class A ResNet-50 (181 ± 14 W), B BERT (152 W),
C PageRank (81 W), D SGEMM (297 W, at the power cap), i.e. Table IV's
small/medium/large GPU jobs are C/B/D; its predictions are TSMVA(RF+RF)'s
held-out predictions (``pcs_ray.power.tsmva.held_out_predictions``), bundled in
``pal/variability/power/longhorn-tsmva.csv`` because five forest fits per run
would dominate a simulation (``pcs-ray power fit --data longhorn --predictions
FILE`` writes the same file). A file profile has the same columns::

    class,device,power_w[,predicted_w,runtime]

Sampling (``sample``) is seeded like variability profiles: per class, GPUs
draw measured GPUs without repetition; where the cluster already has a
variability score for the class, each GPU takes the measured GPU whose run
time is nearest its score, so a slow GPU has a slow GPU's power (class D's
scores come from PageRank in the variability profile and its power from
SGEMM: the match is then by run-time rank across two applications).
Idle GPUs draw ``idle_w`` (60 W, the VAHRM paper's idle GPU); ``tdp_w`` is
the V100's 300 W.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pcs_ray import data
from pcs_ray.cluster import ClusterSpec, NodeSpec

LONGHORN_CLASSES = {"A": "resnet", "B": "bert", "C": "pagerank", "D": "sgemm"}
POWER_PROFILES = ("longhorn",)
IDLE_W = 60.0
TDP_W = 300.0


class PowerProfileError(ValueError):
    """A power profile that cannot be read or used (one line)."""


@dataclass(frozen=True)
class PowerProfile:
    """Measured GPUs per class: power (W), predicted power (W) and relative run time, aligned arrays."""

    name: str
    power: dict[str, np.ndarray]
    predicted: dict[str, np.ndarray]
    runtime: dict[str, np.ndarray]
    idle_w: float = IDLE_W
    tdp_w: float = TDP_W

    @property
    def classes(self) -> list[str]:
        return sorted(self.power)

    def sample(self, cluster: ClusterSpec, seed: int = 0) -> "GPUPower":
        """Every GPU's true and predicted power per class (seeded)."""
        rng = np.random.default_rng(seed)
        n = cluster.num_gpus
        true, pred = {}, {}
        for c in self.classes:
            m = len(self.power[c])
            order = np.concatenate([rng.permutation(m) for _ in range(math.ceil(n / m))])[:n]
            scores = np.asarray([cluster.score(g, c) for g in range(n)])
            has = np.asarray([c in cluster.gpu(g).scores for g in range(n)])
            if has.any():
                ranked = np.argsort(self.runtime[c], kind="stable")
                pos = np.searchsorted(self.runtime[c][ranked], scores[has]).clip(0, m - 1)
                lower = (pos - 1).clip(0, m - 1)
                nearer = np.abs(self.runtime[c][ranked][lower] - scores[has]) < np.abs(self.runtime[c][ranked][pos] - scores[has])
                order[has] = ranked[np.where(nearer, lower, pos)]
            true[c], pred[c] = self.power[c][order], self.predicted[c][order]
        return GPUPower(true, pred, self.idle_w, self.tdp_w, self.name)


@dataclass
class GPUPower:
    """Per-GPU power of one simulated cluster: ``true`` is what it draws, ``predicted`` what a scheduler believes."""

    true: dict[str, np.ndarray]
    predicted: dict[str, np.ndarray]
    idle_w: float = IDLE_W
    tdp_w: float = TDP_W
    name: str = ""
    class_mean: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.class_mean = {c: float(v.mean()) for c, v in self.true.items()}
        self.num_gpus = len(next(iter(self.true.values()))) if self.true else 0

    def draw(self, job_class: str, gpus, count: int) -> float:
        """Watts a job of ``job_class`` draws on ``gpus`` (or ``count`` average GPUs when its GPUs are unknown)."""
        v = self.true.get(job_class)
        if v is None:
            return count * self.tdp_w
        if gpus:
            return float(v[list(gpus)].sum())
        return count * self.class_mean[job_class]

    def ideal(self) -> "GPUPower":
        """The same GPUs with a perfect model (VAHRM+IDEAL)."""
        return GPUPower(self.true, self.true, self.idle_w, self.tdp_w, self.name + "+ideal")

    def onto(self, cluster: ClusterSpec) -> ClusterSpec:
        """``cluster`` with every GPU's predicted power per class in its spec (what placement decides on)."""
        nodes, gid = [], 0
        for node in cluster.nodes:
            gpus = []
            for gpu in node.gpus:
                gpus.append(gpu.model_copy(update={"power": {c: float(v[gid]) for c, v in self.predicted.items()}}))
                gid += 1
            nodes.append(NodeSpec(name=node.name, gpus=gpus, topology=node.topology))
        return ClusterSpec(nodes=nodes, locality_penalty=cluster.locality_penalty)

    def summed_tdp_w(self) -> float:
        return self.num_gpus * self.tdp_w


def _bundled_path() -> Path:
    return data.data_dir() / "pal" / "variability" / "power" / "longhorn-tsmva.csv"


def read_profile_csv(path: Path, name: str) -> PowerProfile:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames or []
            if "class" not in fields or "power_w" not in fields:
                raise PowerProfileError(f"{path}: a power profile needs columns class,power_w[,device,predicted_w,runtime]")
            cols: dict[str, list[tuple[float, float, float]]] = {}
            for row in reader:
                where = f"{path} line {reader.line_num}"
                try:
                    p = float(row["power_w"])
                    q = float(row["predicted_w"]) if row.get("predicted_w") not in (None, "") else p
                    r = float(row["runtime"]) if row.get("runtime") not in (None, "") else 1.0
                except (TypeError, ValueError):
                    raise PowerProfileError(f"{where}: power_w, predicted_w and runtime must be numbers") from None
                if not (p > 0 and q > 0 and r > 0 and math.isfinite(p + q + r)):
                    raise PowerProfileError(f"{where}: power_w, predicted_w and runtime must be positive")
                cls = (row.get("class") or "").strip()
                if not cls:
                    raise PowerProfileError(f"{where}: 'class' is empty")
                cols.setdefault(cls, []).append((p, q, r))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise PowerProfileError(f"{path}: cannot read power profile ({e})") from None
    if not cols:
        raise PowerProfileError(f"{path}: no GPUs in the power profile")
    arr = {c: np.asarray(v, dtype=np.float64) for c, v in cols.items()}
    return PowerProfile(name, {c: a[:, 0] for c, a in arr.items()}, {c: a[:, 1] for c, a in arr.items()},
                        {c: a[:, 2] for c, a in arr.items()})


def load_power_profile(name_or_path: str | Path) -> PowerProfile:
    """``longhorn`` or a CSV file (columns above); ``PowerProfileError`` otherwise."""
    key = str(name_or_path).lower()
    if key == "longhorn":
        return read_profile_csv(_bundled_path(), "longhorn")
    path = Path(name_or_path)
    if not path.is_file():
        raise PowerProfileError(f"unknown power profile {str(name_or_path)!r}: not one of {', '.join(POWER_PROFILES)} "
                                f"and not a file")
    return read_profile_csv(path, path.stem)


def longhorn_rows(predictions: dict[tuple[str, str], float] | None = None) -> list[dict]:
    """The ``longhorn`` profile's rows from the Longhorn records: one per (class, measured GPU) with its mean
    power and run time, and ``predictions[(device, app)]`` where given."""
    from pcs_ray.variability.longhorn import load_runs

    sums: dict[tuple[str, str], list[float]] = {}
    for r in load_runs(tuple(LONGHORN_CLASSES.values())):
        s = sums.setdefault((r.device, r.app), [0.0, 0.0, 0])
        s[0] += r.power
        s[1] += r.runtime
        s[2] += 1
    rows = []
    for cls, app in LONGHORN_CLASSES.items():
        for (device, a), (p, t, k) in sorted(sums.items()):
            if a == app:
                pred = predictions.get((device, app)) if predictions else None
                rows.append({"class": cls, "device": device, "power_w": round(p / k, 3),
                             "predicted_w": None if pred is None else round(pred, 3), "runtime": round(t / k, 5)})
    return rows


__all__ = ["GPUPower", "IDLE_W", "LONGHORN_CLASSES", "POWER_PROFILES", "PowerProfile", "PowerProfileError", "TDP_W",
           "load_power_profile", "longhorn_rows", "read_profile_csv"]
