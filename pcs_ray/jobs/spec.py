"""What a submitted job is, independent of who runs it (simulator or live).

A *job* is a training job or a sweep of trials. The scheduler sees one
entity with a size (GPU-seconds at one GPU), a GPU range and a speedup table.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as submitted.

    ``speedup[n]`` is the throughput on ``n`` GPUs relative to one GPU, for
    ``n`` in ``0..max_gpus`` (``speedup[0] == 0``, ``speedup[1] == 1``). It is a
    precomputed table so the hot loop never calls back into a demand function.
    A rigid job has ``min_gpus == max_gpus`` and runs on all of them or none.
    """

    job_id: int
    submit_time: float
    service: float
    max_gpus: int
    speedup: tuple[float, ...]
    min_gpus: int = 1
    model: str = ""
    job_class: str = "A"
    pattern: str = "ring"
    bw_sensitive: bool = False
    name: str = field(default="", compare=False)
    #: Seconds from being given GPUs for the first time to its first step (start-up), and for every later
    #: start on other GPUs or another count (stop + restart + restore); ``None``: the engine's ``overhead``.
    start_cost: float = 0.0
    move_cost: float | None = None
    #: Who submitted it: the tenant whose quota it runs on ("": no tenant) and the user within it.
    tenant: str = ""
    user: str = ""
    #: Seconds a run of this job is kept before it may be preempted or resized (None: the operator's
    #: default, ``pcs_ray.policies.tenants.MinRuntime``). Not to be confused with ``min_runtime``.
    min_runtime_s: float | None = None

    def __post_init__(self) -> None:
        if self.service <= 0:
            raise ValueError(f"job {self.job_id}: service must be > 0, got {self.service}")
        if self.submit_time < 0:
            raise ValueError(f"job {self.job_id}: submit_time must be >= 0")
        if not 1 <= self.min_gpus <= self.max_gpus:
            raise ValueError(
                f"job {self.job_id}: need 1 <= min_gpus <= max_gpus, got {self.min_gpus}..{self.max_gpus}"
            )
        if len(self.speedup) != self.max_gpus + 1:
            raise ValueError(f"job {self.job_id}: speedup table needs {self.max_gpus + 1} entries")
        if self.min_runtime_s is not None and not self.min_runtime_s >= 0:
            raise ValueError(f"job {self.job_id}: min_runtime_s must be >= 0 seconds, got {self.min_runtime_s}")

    @property
    def rigid(self) -> bool:
        return self.min_gpus == self.max_gpus

    @property
    def min_runtime(self) -> float:
        """Fastest possible runtime: the whole service at the best allocation."""
        return self.service / max(self.speedup[self.min_gpus :])

    def efficiency_cap(self, zeta: float) -> int:
        """Largest allocation ``k`` whose efficiency ``speedup(k)/k`` is at least ``zeta``.

        Never below ``min_gpus``: a job that cannot run efficiently still runs.
        """
        if zeta <= 0:
            return self.max_gpus
        cap = self.min_gpus
        for k in range(self.min_gpus, self.max_gpus + 1):
            if self.speedup[k] / k >= zeta - 1e-12:
                cap = k
        return cap


def linear_speedup(max_gpus: int) -> tuple[float, ...]:
    """Perfect scaling, the PCS artifact's default."""
    return tuple(float(n) for n in range(max_gpus + 1))
