"""Energy accounting of a simulated run: busy GPUs draw their job's power, idle ones idle power.

Between events nothing changes (the simulator is event-driven), so energy is
the exact integral of piecewise-constant system power. A job's draw is the
sum of its GPUs' true power for its class; without a placement (GPU ids
unknown) it is the class's mean over the cluster per GPU.
"""

from __future__ import annotations

from collections.abc import Iterable

from pcs_ray.power.profile import GPUPower
from pcs_ray.jobs.state import JobState

J_PER_KWH = 3.6e6


class EnergyMeter:
    """Integrates system power over a run; ``job_joules`` per job."""

    def __init__(self, power: GPUPower, capacity: int) -> None:
        self.power, self.capacity = power, capacity
        self.joules = 0.0
        self.watts = 0.0
        self.peak_w = 0.0
        self.start: float | None = None
        self.last: float | None = None
        self.job_joules: dict[int, float] = {}
        self._draw: dict[int, tuple[tuple, int, float]] = {}  # job -> (gpus, count, W)

    def observe(self, t: float, running: Iterable[JobState]) -> None:
        """The system as it is from ``t`` on (call after every event's decisions)."""
        if self.last is None:
            self.start = t
        else:
            dt = t - self.last
            if dt > 0:
                self.joules += self.watts * dt
                for jid, (_, _, w) in self._draw.items():
                    self.job_joules[jid] = self.job_joules.get(jid, 0.0) + w * dt
        self.last = t
        draws, busy, total = {}, 0, 0.0
        power = self.power
        for job in running:
            jid, gpus, n = job.spec.job_id, job.gpus, job.alloc
            old = self._draw.get(jid)
            w = old[2] if old is not None and old[0] == gpus and old[1] == n else power.draw(job.spec.job_class, gpus, n)
            draws[jid] = (gpus, n, w)
            busy += n
            total += w
        self._draw = draws
        self.watts = total + power.idle_w * (self.capacity - busy)
        if self.watts > self.peak_w:
            self.peak_w = self.watts

    def summary(self, jobs: int) -> dict:
        """``kwh``, ``jobs_per_kwh``, ``avg_kw`` (over the run: first event to last) and ``peak_kw``."""
        kwh = self.joules / J_PER_KWH
        span = (self.last - self.start) if self.last is not None and self.start is not None else 0.0
        return {
            "kwh": kwh,
            "jobs_per_kwh": jobs / kwh if kwh > 0 else None,
            "avg_kw": self.joules / span / 1e3 if span > 0 else None,
            "peak_kw": self.peak_w / 1e3,
            "power_profile": self.power.name,
        }


__all__ = ["EnergyMeter", "J_PER_KWH"]
