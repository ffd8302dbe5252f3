"""What the coordinator asks the executors to do: the diff between the plan and reality.

The core returns these instead of carrying them out, so it stays Ray-free
and its decisions can be asserted on in tests. ``StartRun.kind`` and
``StopRun.reason`` say why: a first ``start``, a ``resume`` after
preemption, a ``migrate`` (same GPU count, other GPUs) or a ``resize``
(another count); stops are ``preempt``, ``migrate``, ``resize`` or ``cancel``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pcs_ray.contract import RunRequest


@dataclass(frozen=True)
class StartRun:
    job_id: int
    kind: str
    request: RunRequest  # without its reporter: the Ray edge fills that in


@dataclass(frozen=True)
class StopRun:
    job_id: int
    attempt: int
    reason: str


Action = StartRun | StopRun
