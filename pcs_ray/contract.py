"""The contract between the coordinator and the runners (no Ray import).

The coordinator decides *what* runs *where*; ``executors`` makes it happen.
It launches a job with a :class:`RunRequest` and gets back a handle (see
``executors.launch``) whose ``done`` object ref resolves to a
:class:`RunOutcome`. Runners report progress while they train through the
``reporter`` callback target so predictions use measured speeds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class GPUSlot:
    """One GPU chosen by placement: its node and its index on that node."""

    node: str
    index: int


@dataclass(frozen=True)
class RunRequest:
    """Start (or resume) one job on exactly ``gpus``.

    ``workload`` names a model registered in ``workloads.models``; ``params``
    are its options (batch size, learning rate, seed, dataset path ...).
    ``total_steps`` is the job's whole budget: a resumed job continues from
    the step in its newest valid checkpoint under ``checkpoint_dir``.
    ``slowdown`` is what the cluster model says these GPUs cost (slowest
    GPU × locality × topology); runners on logical GPUs stretch each step
    by it, runners on real GPUs ignore it. ``attempt`` counts starts.
    """

    job_id: str
    workload: str
    total_steps: int
    gpus: tuple[GPUSlot, ...]
    checkpoint_dir: str
    params: dict[str, Any] = field(default_factory=dict)
    slowdown: float = 1.0
    checkpoint_every: int = 0  # 0: only when asked to stop
    attempt: int = 0
    reporter: Any = None  # an actor handle with report_progress(job_id, step, step_time_s, emulated=bool); fire-and-forget
    report_interval_s: float = 1.0  # at most one progress report per interval (the first step is reported at once)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("reporter")
        return d


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: finished its budget, stopped on request, or failed."""

    job_id: str
    status: Literal["finished", "preempted", "failed"]
    step: int
    step_time_s: float | None = None
    error: str | None = None
    emulated: bool = False
    start_step: int = 0  # the step this run resumed from (0: fresh start)
    gpus: tuple[GPUSlot, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. a checkpoint fallback warning, the data source
    timings: dict[str, float] | None = None  # wall-clock stamps (time.time()) of the run's phases
