"""Synthetic workloads drawn from the PCS artifact's CDF files.

A workload ``<name>`` is a set of ``cdf-<quantity>-<name>.csv`` files
(``#label,cdf`` rows). The files keep the artifact's (Themis's) terms: an
*app* there is one of our jobs, and its *jobs* are the job's trials, each of
up to ``max-gpus-per-job`` GPUs. Only the service-time CDF is required; the
others default to one trial per job, one GPU per trial, and exponential
inter-arrivals.
Arrivals are scaled to a target offered load so experiments compare policies
at the same utilisation rather than at whatever rate the CDF happened to give.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.data import data_dir
from pcs_ray.workloads.errors import WorkloadError

SERVICE = "app-service-times"
TRIALS_PER_JOB = "num-jobs-per-app"
MAX_GPUS_PER_TRIAL = "max-gpus-per-job"
MIN_GPUS = "min-gpus-per-job"
INTERARRIVAL = "app-interarrival-times"


class EmpiricalCDF:
    """A piecewise-linear CDF through ``(value, cdf)`` points.

    Points are sorted by (cdf, value), so files with rows out of order and
    repeated values (jumps) work. Below the first cdf the value is the first
    value, above the last the last value; cdf values beyond 1 are cut at 1.
    """

    def __init__(self, values, probs, source: str = "cdf") -> None:
        values = np.asarray(values, dtype=float)
        probs = np.asarray(probs, dtype=float)
        if values.ndim != 1 or values.shape != probs.shape or values.size == 0:
            raise WorkloadError(f"{source}: need at least one (value, cdf) point")
        if not (np.all(np.isfinite(values)) and np.all(np.isfinite(probs))):
            raise WorkloadError(f"{source}: values and cdf must be finite numbers")
        if np.any(probs < 0):
            raise WorkloadError(f"{source}: cdf values must be >= 0")
        order = np.lexsort((values, probs))
        self.values = values[order]
        self.probs = probs[order]
        self.source = source

    @classmethod
    def from_csv(cls, path: str | Path) -> "EmpiricalCDF":
        """Read a ``#label,cdf`` file; lines starting with ``#`` and a textual header are skipped."""
        p = Path(path)
        if not p.is_file():
            raise WorkloadError(f"no such CDF file: {path}")
        values, probs = [], []
        for lineno, raw in enumerate(p.read_text(encoding="utf-8-sig").splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = [s.strip() for s in line.split(",")]
            if len(parts) != 2:
                raise WorkloadError.at(path, lineno, f"expected 'value,cdf', got {line!r}")
            try:
                value, prob = float(parts[0]), float(parts[1])
            except ValueError:
                if lineno == 1:  # a header without '#', e.g. 'error,cdf'
                    continue
                raise WorkloadError.at(path, lineno, f"not a number in {line!r}") from None
            values.append(value)
            probs.append(prob)
        if not values:
            raise WorkloadError.at(path, 1, "no (value, cdf) rows")
        return cls(values, probs, source=str(path))

    def _quantile(self, u: np.ndarray) -> np.ndarray:
        c, v = self.probs, self.values
        # Segment i spans [c[i], c[i+1]); side="right" skips zero-width segments (jumps).
        i = np.searchsorted(c, u, side="right") - 1
        inside = (i >= 0) & (i < c.size - 1)
        j = np.clip(i, 0, max(c.size - 2, 0))
        k = np.minimum(j + 1, c.size - 1)
        lo_c, hi_c, lo_v, hi_v = c[j], c[k], v[j], v[k]
        width = np.where(hi_c > lo_c, hi_c - lo_c, 1.0)
        x = lo_v + (u - lo_c) / width * (hi_v - lo_v)
        return np.where(inside, x, np.where(i < 0, v[0], v[-1]))

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws by inverse-CDF sampling."""
        return self._quantile(rng.random(size))

    def mean(self) -> float:
        """Exact mean of the distribution ``sample`` draws from (integral of the quantile over [0, 1])."""
        c, v = self.probs, self.values
        total = v[0] * min(c[0], 1.0)  # flat part below the first point
        for k in range(c.size - 1):
            a, b = c[k], c[k + 1]
            if b > a and a < 1.0:
                end = min(b, 1.0)  # cut at cdf = 1: the value there is interpolated
                v_end = v[k] + (end - a) / (b - a) * (v[k + 1] - v[k])
                total += (end - a) * (v[k] + v_end) / 2
        total += v[-1] * max(0.0, 1.0 - c[-1])  # flat part above the last point
        return float(total)


def _cdf_path(quantity: str, name: str, dirs: list[Path]) -> Path | None:
    for d in dirs:
        candidate = Path(d) / f"cdf-{quantity}-{name}.csv"
        if candidate.is_file():
            return candidate
    return None


def available_workloads(dirs: list[str | Path] | None = None) -> list[str]:
    """Names that have a service-time CDF in any of ``dirs``."""
    prefix = f"cdf-{SERVICE}-"
    names = set()
    for d in map(Path, dirs if dirs is not None else [data_dir() / "pcs" / "workloads"]):
        if d.is_dir():
            names.update(p.name[len(prefix) : -len(".csv")] for p in d.glob(f"{prefix}*.csv"))
    return sorted(names)


def _counts(cdf: EmpiricalCDF | None, rng: np.random.Generator, n: int) -> np.ndarray:
    """Whole counts >= 1; interpolated draws are rounded to the nearest integer."""
    if cdf is None:
        return np.ones(n, dtype=int)
    return np.maximum(np.rint(cdf.sample(rng, n)), 1).astype(int)


def generate_workload(
    name: str,
    num_jobs: int,
    num_gpus: int,
    load: float = 0.9,
    seed: int = 0,
    dirs: list[str | Path] | None = None,
) -> list[JobSpec]:
    """``num_jobs`` elastic jobs from workload ``name`` at offered load ``load`` on ``num_gpus`` GPUs.

    CDF values are read as seconds whatever the label says: several PCS files
    (e.g. ``philly``, ``gavel``) say ``#minutes`` but the artifact uses the
    numbers as seconds, and we match it.
    """
    if num_jobs < 1:
        raise WorkloadError(f"num_jobs must be >= 1, got {num_jobs}")
    if num_gpus < 1:
        raise WorkloadError(f"num_gpus must be >= 1, got {num_gpus}")
    if not (load > 0 and math.isfinite(load)):
        raise WorkloadError(f"load must be > 0, got {load}")
    search = [Path(d) for d in (dirs if dirs is not None else [data_dir() / "pcs" / "workloads"])]

    def cdf(quantity: str) -> EmpiricalCDF | None:
        path = _cdf_path(quantity, name, search)
        return EmpiricalCDF.from_csv(path) if path is not None else None

    service_cdf = cdf(SERVICE)
    if service_cdf is None:
        known = ", ".join(available_workloads(search)) or "none"
        raise WorkloadError(
            f"unknown workload {name!r}: no cdf-{SERVICE}-{name}.csv in {', '.join(map(str, search))}; "
            f"available: {known}"
        )
    if service_cdf.values[0] <= 0:
        raise WorkloadError(f"{service_cdf.source}: service times must be > 0")
    interarrival_cdf = cdf(INTERARRIVAL)
    if interarrival_cdf is not None and interarrival_cdf.values[0] < 0:
        raise WorkloadError(f"{interarrival_cdf.source}: inter-arrival times must be >= 0")

    rng = np.random.default_rng(seed)
    service = service_cdf.sample(rng, num_jobs)
    trials = _counts(cdf(TRIALS_PER_JOB), rng, num_jobs)
    max_gpus = trials * _counts(cdf(MAX_GPUS_PER_TRIAL), rng, num_jobs)
    min_gpus = np.minimum(_counts(cdf(MIN_GPUS), rng, num_jobs), max_gpus)

    gaps = np.zeros(num_jobs)
    if num_jobs > 1:
        raw = interarrival_cdf.sample(rng, num_jobs - 1) if interarrival_cdf else rng.exponential(1.0, num_jobs - 1)
        if raw.mean() <= 0:
            raise WorkloadError(f"{interarrival_cdf.source}: inter-arrival times are all zero")
        target = service.mean() / (num_gpus * load)
        gaps[1:] = raw * (target / raw.mean())
    arrivals = np.cumsum(gaps)

    return [
        JobSpec(job_id=i, submit_time=float(arrivals[i]), service=float(service[i]),
                max_gpus=int(max_gpus[i]), speedup=linear_speedup(int(max_gpus[i])),
                min_gpus=int(min_gpus[i]), name=f"{name}-{i}")
        for i in range(num_jobs)
    ]
