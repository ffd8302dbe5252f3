"""The external-executor protocol: jobs that something else (a Ray Tune sweep) runs on the GPUs it is assigned.

An ``executor: external`` job gets no runner. Its executor polls its
:func:`assignment`: while the job is ``running`` it may use ``gpus``; when the
coordinator wants some back (``stopping``) it may keep only ``target``, and
once nothing of it runs outside ``target`` it acknowledges with
``external_ended(..., "preempted")``, after which the job starts again on
``target`` as a new ``attempt``. It reports its end the same way
(``finished``, ``failed``), and a change of size (trials stopped early) with
``set_demand``: the GPUs it no longer needs go back to the policy at once.

It holds the job on a lease (``lease_s`` in the assignment, the operator's ``external_lease_s``): every
call it makes about the job but :func:`assignment` renews it (``renew_lease``, ``report_progress``,
``external_ended``, ``set_demand``). A job whose executor is silent longer than that (its driver died or
never connected) ends ``failed``, ``end_reason.code`` ``driver-lost``, and its GPUs go back at once
(``pcs_ray.coordinator.guards``). When the job is cancelled or ended while it runs, ``target`` is empty.
"""

from __future__ import annotations

from collections.abc import Callable

from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.jobs.jobfile import JobFile


def assignment(job: LiveJob, target: tuple[int, ...], resource: Callable[[int], str]) -> dict:
    """What the executor may use now; GPUs as their Ray custom resources (``node0_gpu3``)."""
    return {
        "id": job.job_id, "state": job.state.value, "attempt": job.attempt, "steps": job.steps,
        "gpus": [resource(g) for g in job.gpus], "target": [resource(g) for g in target],
    }


def demand_update(spec: JobFile, gpus: int | None, steps: int | None) -> dict | None:
    """The spec fields a new demand (most GPUs, total steps) sets, or None when nothing changes."""
    update = {k: v for k, v in (("gpus", gpus), ("steps", steps)) if v is not None}
    if "gpus" in update:
        update["gpus"] = max(1, int(update["gpus"]))
        if spec.min_gpus is not None:
            update["min_gpus"] = min(spec.min_gpus, update["gpus"])
    if "steps" in update:
        update["steps"] = max(1, int(update["steps"]))
    if not update or all(getattr(spec, k) == v for k, v in update.items()):
        return None
    return update
