"""Independent samples of a workload, for training the search and for testing its front.

A workload is a named CDF workload (each sample is a fresh draw with its own
seed), or a list of jobs from a trace or the job history (each sample is a
bootstrap resample: jobs drawn with replacement, inter-arrival gaps drawn with
replacement from the observed ones). Train and test samples never share a
seed, so the front reported on test samples is not the one the search fitted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pcs_ray.jobs.spec import JobSpec
from pcs_ray.workloads.generator import generate_workload


class WorkloadSampleError(ValueError):
    """A workload too small to search on."""


def derived_seed(seed: int, *parts: object) -> int:
    """A stable 63-bit seed for ``(seed, parts...)`` (Python's ``hash`` is salted per process)."""
    text = ":".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1


@dataclass(frozen=True)
class WorkloadSource:
    """Where samples come from: ``name`` (a CDF workload) or ``jobs`` (trace or history)."""

    label: str
    name: str | None = None
    jobs: tuple[JobSpec, ...] = ()
    num_jobs: int = 500
    load: float = 0.9

    @classmethod
    def generated(cls, name: str, num_jobs: int, load: float = 0.9) -> "WorkloadSource":
        if num_jobs < 2:
            raise WorkloadSampleError(f"the workload needs at least 2 jobs to search on, got --num-jobs {num_jobs}")
        return cls(label=f"{name} ({num_jobs} jobs, load {load:g})", name=name, num_jobs=num_jobs, load=load)

    @classmethod
    def from_jobs(cls, label: str, jobs: Sequence[JobSpec], num_jobs: int | None = None) -> "WorkloadSource":
        if len(jobs) < 2:
            raise WorkloadSampleError(
                f"{label}: the workload has {len(jobs)} job{'s' if len(jobs) != 1 else ''}; "
                "the solver needs at least 2 to search on"
            )
        n = len(jobs) if num_jobs is None else num_jobs
        if n < 2:
            raise WorkloadSampleError(f"the workload needs at least 2 jobs per sample, got {n}")
        return cls(label=label, jobs=tuple(sorted(jobs, key=lambda j: (j.submit_time, j.job_id))), num_jobs=n)

    def sample(self, gpus: int, seed: int) -> list[JobSpec]:
        if self.name is not None:
            return generate_workload(self.name, self.num_jobs, gpus, load=self.load, seed=seed)
        return bootstrap(self.jobs, self.num_jobs, seed)

    def samples(self, gpus: int, seed: int, split: str, count: int) -> list[list[JobSpec]]:
        return [self.sample(gpus, derived_seed(seed, split, i)) for i in range(count)]

    def describe(self) -> dict:
        out = {"label": self.label, "num_jobs": self.num_jobs}
        if self.name is not None:
            out.update(source="generated", workload=self.name, load=self.load)
        else:
            out.update(source="jobs", jobs=len(self.jobs))
        return out


def bootstrap(jobs: Sequence[JobSpec], num_jobs: int, seed: int) -> list[JobSpec]:
    """``num_jobs`` jobs drawn with replacement, arrivals from resampled gaps; ids renumbered 0..n-1."""
    rng = np.random.default_rng(seed)
    arrivals = np.asarray([j.submit_time for j in jobs])
    gaps = np.diff(arrivals) if len(jobs) > 1 else np.zeros(1)
    picks = rng.integers(0, len(jobs), size=num_jobs)
    drawn = np.concatenate([[0.0], rng.choice(gaps, size=num_jobs - 1, replace=True)]) if num_jobs > 1 else [0.0]
    times = np.cumsum(drawn)
    return [
        replace(jobs[int(p)], job_id=i, submit_time=float(t), name=f"{jobs[int(p)].name or 'job'}#{i}")
        for i, (p, t) in enumerate(zip(picks, times))
    ]
