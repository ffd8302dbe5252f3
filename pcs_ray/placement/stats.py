"""What placement gave each job: effective bandwidth over its life, migrations, nodes spanned.

``PlacementLog`` wraps any placement and records, whenever a job's GPUs
change, the effective bandwidth of its pattern on them (single-node
allocations of 2+ GPUs on nodes with a topology). At the end each job has a
time-weighted mean effective bandwidth; the CLI and the experiments report
its percentiles for bandwidth-sensitive jobs. Forks (predictions) are not logged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from pcs_ray.placement.base import Placement
from pcs_ray.jobs.state import JobState, Snapshot


class PlacementLog:
    """A transparent wrapper: same interface as the placement it wraps."""

    def __init__(self, inner: Placement) -> None:
        self.inner = inner
        self._since: dict[int, tuple[float, float | None, tuple[int, ...]]] = {}
        self._area: dict[int, float] = {}
        self._time: dict[int, float] = {}
        self.moves: dict[int, int] = {}
        self.spread: dict[int, bool] = {}
        self.sensitive: dict[int, bool] = {}
        self.gpus_of: dict[int, int] = {}
        self.now = 0.0

    def __getattr__(self, name):
        if name == "inner":  # unpickling asks before ``inner`` is set: no recursion into itself
            raise AttributeError(name)
        return getattr(self.inner, name)

    def place(self, snap: Snapshot, changed: Iterable[JobState], alloc: Mapping[int, int] | None = None, settle=None):
        self.now = snap.now
        touched = self.inner.place(snap, changed, alloc, settle)
        for job in touched:
            jid = job.spec.job_id
            before = self._since.get(jid)
            self._close(jid)
            if job.gpus:
                if before is not None and len(before[2]) == len(job.gpus) and set(before[2]) != set(job.gpus):
                    self.moves[jid] = self.moves.get(jid, 0) + 1  # same count, other GPUs: a migration
                self.gpus_of[jid] = len(job.gpus)
                self.sensitive[jid] = job.spec.bw_sensitive
                self.spread[jid] = self.spread.get(jid, False) or self.inner.spans(job.gpus)
                self._since[jid] = (snap.now, self.effective_bandwidth(job), job.gpus)
        return touched

    def release(self, job: JobState) -> None:
        self.now = max(self.now, job.anchor)  # the engine settled the job at its finish time
        self._close(job.spec.job_id)
        self.inner.release(job)

    def fork(self):
        return self.inner.fork()

    def effective_bandwidth(self, job: JobState) -> float | None:
        comm = getattr(self.inner, "comm", None)
        gpus = job.gpus
        if comm is None or len(gpus) < 2 or self.inner.spans(gpus):
            return None
        node = int(self.inner.node[gpus[0]])
        return comm.effective_bandwidth(job.spec, node, self.inner.local[list(gpus)])

    def _close(self, jid: int) -> None:
        start = self._since.pop(jid, None)
        if start is None:
            return
        t0, bw, _ = start
        dt = max(0.0, self.now - t0)
        if bw is not None:
            self._area[jid] = self._area.get(jid, 0.0) + bw * dt
            self._time[jid] = self._time.get(jid, 0.0) + dt

    def job_bandwidth(self) -> dict[int, float]:
        """Time-weighted mean effective bandwidth (GB/s) per job that had one."""
        return {jid: self._area[jid] / t for jid, t in self._time.items() if t > 0}

    def summary(self) -> dict:
        """Effective-bandwidth percentiles of sensitive multi-GPU jobs, migrations, jobs spread over nodes."""
        bw = self.job_bandwidth()
        sens = np.asarray([v for jid, v in bw.items() if self.sensitive.get(jid)], dtype=np.float64)
        out: dict = {
            "migrations": int(sum(self.moves.values())),
            "jobs_across_nodes": int(sum(1 for jid, s in self.spread.items() if s and self.gpus_of.get(jid, 0) > 1)),
        }
        if len(sens):
            p = np.percentile(sens, [0, 25, 50, 75, 100])
            out["sensitive_effbw_gbps"] = {
                "jobs": int(len(sens)), "min": float(p[0]), "p25": float(p[1]), "p50": float(p[2]),
                "p75": float(p[3]), "max": float(p[4]), "mean": float(sens.mean()),
            }
        return out


__all__ = ["PlacementLog"]
