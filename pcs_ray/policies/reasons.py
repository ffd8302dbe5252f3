"""Why a job has no GPUs: a typed code and one line of text (``SchedulingPolicy.why_waiting``).

The policy's codes say why it gives a job no GPUs; the live coordinator adds two of its own for the
moments between a decision and the runs that carry it out (``hand-over``, ``stopping``).

Codes are stable strings (views, metrics tags and tests match on them); the
text is for people and may change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from pcs_ray.jobs.state import JobState, Snapshot


class WaitCode(StrEnum):
    QUEUE = "queue"  # behind others in its WFQ queue, or its queue's share is used
    TENANT_QUOTA = "tenant-quota"  # its tenant holds its quota and nothing is left to borrow
    GPUS = "gpus"  # not enough free GPUs for its demand
    POWER = "power-budget"  # starting it would break the power budget
    RUSH_SKIP = "rush-skip"  # predicted to run slow on the free GPUs, skipped
    MIN_RUNTIME = "min-runtime"  # the GPUs it needs are held by runs younger than their minimum runtime
    HAND_OVER = "hand-over"  # GPUs are planned for it; the runs on them are still stopping (live only)
    STOPPING = "stopping"  # its run is checkpointing before it gives up its GPUs (live only)


@dataclass(frozen=True)
class WaitReason:
    code: WaitCode
    text: str

    def to_dict(self) -> dict:
        return {"code": self.code.value, "text": self.text}  # status builds one per waiting job: no asdict


def gpus_plural(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


def waiting_for_gpus(snap: Snapshot, alloc: Mapping[int, int], job: JobState) -> WaitReason:
    """The generic reason: how many GPUs it needs, how many are free, how many jobs ahead hold GPUs."""
    free = snap.capacity - sum(alloc.values())
    need = job.spec.min_gpus
    ahead = 0
    for other in snap.jobs:
        if other is job:
            break
        ahead += other.spec.job_id in alloc
    kind = "all" if job.spec.rigid else "at least"
    return WaitReason(WaitCode.GPUS, f"needs {kind} {gpus_plural(need)}; {free} free, {ahead} earlier job"
                                     f"{'s' if ahead != 1 else ''} running")
