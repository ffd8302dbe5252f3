"""What the coordinator hands out about its jobs: JSON-able views and the job-history record.

Inside the coordinator times are seconds since its epoch; every view gives
absolute times (``time.time()`` seconds) and GPUs by name (``node:index``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pcs_ray.coordinator.jobs import UNKNOWN_REMAINING_S, LiveJob
from pcs_ray.power.measured import energy_view
from pcs_ray.workloads.history import HistoryRecord


def wall(epoch: float, t: float | None) -> float | None:
    return None if t is None else epoch + t


def modelled_energy(job: LiveJob, watts: Callable[[str, int], float | None] | None, now: float) -> dict | None:
    """The job's energy so far from the cluster spec's predicted power per GPU (``GPUSpec.power``) over its
    runs (``now``: seconds since the epoch); None where a GPU it ran on has no power for its class."""
    if watts is None or not job.segments:
        return None
    joules = 0.0
    for seg in job.segments:
        per_gpu = [watts(job.spec.job_class, g) for g in seg["gpus"]]
        if any(p is None for p in per_gpu):
            return None
        end = seg["end"] if seg["end"] is not None else now
        joules += sum(per_gpu) * max(0.0, end - seg["start"])
    return {"joules": joules, "modelled": True}


def job_energy(job: LiveJob, watts: Callable[[str, int], float | None] | None, now: float) -> dict | None:
    """Measured (NVML readings of its runs) where any came in, else modelled, else None (``energy_view``)."""
    modelled = None if job.energy else modelled_energy(job, watts, now)
    return energy_view(job.energy, None if modelled is None else modelled["joules"])


def job_view(job: LiveJob, epoch: float, gpu_name: Callable[[int], str],
             watts: Callable[[str, int], float | None] | None = None, now: float | None = None) -> dict:
    def w(t):
        return wall(epoch, t)

    return {
        "id": job.job_id, "name": job.spec.name or f"{job.spec.workload}-{job.job_id}",
        "workload": job.spec.workload, "class": job.spec.job_class, "state": job.state.value,
        "tenant": job.spec.tenant, "user": job.spec.user, "gpus": [gpu_name(g) for g in job.gpus],
        "demand": [job.spec.fewest_gpus, job.spec.gpus], "steps": job.steps, "total_steps": job.spec.steps,
        "step_time": job.step_time, "emulated": job.emulated, "submit": w(job.submit),
        "start": w(job.first_start), "finish": w(job.finish), "predicted_completion": w(job.predicted),
        "predicted_start": w(job.predicted_start) if job.state.value == "queued" else None,
        "first_predicted": w(job.first_predicted), "bound": w(job.bound), "preemptions": job.preemptions,
        "attempts": job.attempt, "retries": job.code_failures, "error": job.error, "note": job.note, "lost_steps": job.lost_steps,
        "end_reason": end_reason(job),
        "metrics": job.metrics, "checkpoint": job.checkpoint, "skips": job.skips, "skip_reason": job.skip_reason,
        "segments": [
            {**s, "start": w(s["start"]), "end": w(s["end"]), "gpus": [gpu_name(g) for g in s["gpus"]]}
            for s in job.segments
        ],
        "energy": job_energy(job, watts, now if now is not None else (job.finish or 0.0)),
    }


def end_reason(job: LiveJob) -> dict | None:
    """Why the coordinator itself ended (or is ending) the job: ``{code, text}`` (``contract.EndCode``), else None."""
    if job.end_code is not None:
        return {"code": job.end_code, "text": job.error}
    if job.ending is not None and not job.done:
        return {"code": job.ending["code"], "text": job.ending["reason"]}
    return None


def prediction(job: LiveJob, epoch: float, placement: dict | None = None, uncertainty: dict | None = None) -> dict:
    """The job's predicted completion (its finish once done), worst-case bound and first prediction,
    its range (p10, p90), which of its inputs are still estimates and what each comes from
    (``estimated_from``: ``SpeedModel.estimated``), and why its latest placement
    chose its GPUs (``Placement.explain``; null if never placed). ``basis``: how the prediction at
    submission was played, ``branch`` (from the latest refresh play, ``refresh_age_s`` old, plus the
    job) or ``fresh`` (the whole current state); null for a job submitted before a restart."""
    return {
        "id": job.job_id, "state": job.state.value,
        "predicted_completion": wall(epoch, job.finish if job.done else job.predicted),
        "predicted_start": wall(epoch, job.predicted_start) if job.state.value == "queued" else None,
        "bound": wall(epoch, job.bound), "first_predicted": wall(epoch, job.first_predicted),
        "range": (uncertainty or {}).get("range"), "estimates": (uncertainty or {}).get("estimates", []),
        "estimated_from": (uncertainty or {}).get("estimated_from", {}),
        "placement": placement, "basis": job.forecast_basis, "refresh_age_s": job.refresh_age,
        **unknown_total(job),
    }


def unknown_total(job: LiveJob) -> dict:
    """For a job that gave no total steps and runs still: that it has none, and the size its prediction assumes."""
    if job.spec.total_known or job.done:
        return {}
    assumed = job.total_steps()
    return {"total_steps": None, "assumed_total_steps": assumed,
            "note": f"no total steps given: predicted as if it took {assumed} steps (as many more as it has done, "
                    f"at least {UNKNOWN_REMAINING_S / 3600:g} GPU-hour more); it ends when its function returns"}


def status(now: float, epoch: float, policy: dict, gpus: int, restart_overhead: float,
           jobs: Iterable[LiveJob], gpu_name: Callable[[int], str],
           watts: Callable[[str, int], float | None] | None = None) -> dict:
    """The whole cluster (``now`` is absolute)."""
    return {
        "now": now, "epoch": epoch, "policy": policy, "gpus": gpus, "restart_overhead": restart_overhead,
        "jobs": [job_view(j, epoch, gpu_name, watts, now - epoch) for j in jobs],
    }


def history_record(job: LiveJob, epoch: float, speedup: tuple[float, ...],
                   watts: Callable[[str, int], float | None] | None = None) -> HistoryRecord:
    """A finished job as the solver resamples it (``pcs-ray solve --history``), with its energy."""
    energy = job_energy(job, watts, job.finish or 0.0)
    return HistoryRecord(
        job_id=job.job_id, submit_time=wall(epoch, job.submit), gpus=job.spec.gpus,
        service=job.total_steps() * job.t1, min_gpus=job.spec.fewest_gpus, iteration_time=job.t1,
        model=job.spec.workload, job_class=job.spec.job_class, speedup=speedup,
        finish_time=wall(epoch, job.finish),
        energy_j=None if energy is None else energy["joules"], energy_source=None if energy is None else energy["source"],
    )
