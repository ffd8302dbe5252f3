"""Decisions as a diff: the model's plan (policy counts, placement's GPU ids) against what runs.

After the model reallocates, a running job whose planned GPUs differ from
the ones it holds is stopped (``preempt``: none planned, ``migrate``: as
many elsewhere, ``resize``: another count), and a queued job is started on
its planned GPUs once nobody holds them any more (a stopping job keeps its
GPUs until its runner acknowledges). The coordinator journals each stop and
start and hands them out as :class:`~pcs_ray.contract.StopRun` and
:class:`~pcs_ray.contract.StartRun` actions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pcs_ray.contract import GPUSlot, JobStatus, RunRequest
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.coordinator.model import ClusterModel
from pcs_ray.policies.reasons import WaitCode, WaitReason


@dataclass(frozen=True)
class Stop:
    job: LiveJob
    reason: str


@dataclass(frozen=True)
class Start:
    job: LiveJob
    gpus: tuple[int, ...]
    kind: str


def diff(holding: Iterable[LiveJob], jobs: Mapping[int, LiveJob], model: ClusterModel) -> tuple[list[Stop], list[Start]]:
    """The runs to stop and the runs to start, in submission (job id) order, for the model's current plan.

    Only two kinds of job can be in the diff: those that hold GPUs (``holding``: running or stopping,
    a cluster's worth at most) and those the plan gives GPUs, so a decision reads those and not every
    queued job. ``jobs``: the active jobs by id, where the planned ones are looked up."""
    plan = model.plan()
    holding = sorted(holding, key=_job_id)
    running, queued = JobStatus.RUNNING, JobStatus.QUEUED
    held = {g for job in holding for g in job.gpus}  # a job has GPUs only while running or stopping
    stops = []
    for job in holding:
        if job.state == running and not job.cancel_requested:
            want = plan.get(job.job_id, ())
            if want != job.gpus:
                stops.append(Stop(job, stop_reason(job.gpus, want)))
    starts = []
    for jid in sorted(plan):
        job = jobs.get(jid)
        if job is None or job.state != queued:
            continue
        want = plan[jid]
        if not want or any(g in held for g in want):
            continue  # not scheduled, or its GPUs are still being vacated
        held.update(want)
        starts.append(Start(job, want, start_kind(job, want)))
    return stops, starts


def hand_overs(jobs: Iterable[LiveJob], holding: Iterable[LiveJob], plan: dict[int, tuple[int, ...]],
               gpu_name) -> dict[int, WaitReason]:
    """Why ``jobs`` (every active job, or the one asked about), where the policy has decided on them, still
    wait for the runs that carry the decision out: a queued job planned on GPUs that other runs still hold
    (``hand-over``), and a run checkpointing before it gives its GPUs up (``stopping``), each naming the other
    jobs. ``holding``: every job that holds GPUs."""
    holder = {g: job for job in holding for g in job.gpus}
    takers: dict[int, list[int]] = {}
    for jid, gpus in plan.items():
        for g in gpus:
            takers.setdefault(g, []).append(jid)
    out: dict[int, WaitReason] = {}
    for job in jobs:
        if job.state == JobStatus.QUEUED:
            want = plan.get(job.job_id, ())
            held = sorted({holder[g].job_id for g in want if g in holder})  # a queued job holds none
            if held:
                names = ", ".join(gpu_name(g) for g in want)
                out[job.job_id] = WaitReason(WaitCode.HAND_OVER, f"planned on {names}; waiting for job"
                                                                 f"{'s' if len(held) > 1 else ''} "
                                                                 f"{', '.join(map(str, held))} to stop and hand {'it' if len(want) == 1 else 'them'} over")
        elif job.state == JobStatus.STOPPING:
            why = "cancelled" if job.cancel_requested else job.stop_reason or "stopped"
            to = sorted({t for g in job.gpus for t in takers.get(g, ()) if t != job.job_id})
            after = f"; job{'s' if len(to) > 1 else ''} {', '.join(map(str, to))} take{'' if len(to) > 1 else 's'} its GPUs" if to else ""
            out[job.job_id] = WaitReason(WaitCode.STOPPING, f"{why}: its run is checkpointing before it gives up "
                                                            f"{', '.join(gpu_name(g) for g in job.gpus)}{after}")
    return out


def _job_id(job: LiveJob) -> int:
    return job.job_id


def stop_reason(have: tuple[int, ...], want: tuple[int, ...]) -> str:
    return "preempt" if not want else "migrate" if len(want) == len(have) else "resize"


def start_kind(job: LiveJob, gpus: tuple[int, ...]) -> str:
    """``start`` (never ran), ``resume`` (on the GPUs of its last run, or after losing its runner),
    ``migrate`` (as many other GPUs) or ``resize`` (another count)."""
    last = job.segments[-1]["gpus"] if job.segments else None
    if last is None and job.steps == 0:
        return "start"
    if last is None or sorted(last) == list(gpus):
        return "resume"
    return "migrate" if len(last) == len(gpus) else "resize"


def run_request(job: LiveJob, gpus: tuple[GPUSlot, ...], checkpoint_dir: Path,
                report_timeout_s: float | None = None, log_bytes: int | None = None,
                storage: str | None = None) -> RunRequest:
    """What a runner needs for the job's current (just journaled) attempt; a user run's logs go to
    ``STATE_DIR/logs/<job>/attempt-<k>/`` beside ``STATE_DIR/checkpoints/<job>``. ``report_timeout_s``:
    the job's, after which its ranks dump their stacks (``pcs_ray.coordinator.guards``); ``log_bytes``: each
    rank's log is rotated past this size; ``storage``: the cluster's storage URI, where the runs keep both."""
    spec = job.spec
    code = None
    if spec.user_code:
        code = {"entrypoint": spec.entrypoint, "function": spec.function, "working_dir": spec.working_dir,
                "runtime_env": dict(spec.runtime_env or {}), "config": dict(spec.config),
                "torch_config": spec.torch_config, "checkpoint_config": spec.checkpoint_config}
        if spec.datasets:  # each rank finds the job's datasets in its environment (pcs_ray.train.datasets)
            import json

            from pcs_ray.train.datasets import ENV

            env = code["runtime_env"]
            env["env_vars"] = {**(env.get("env_vars") or {}), ENV: json.dumps(spec.datasets)}
    return RunRequest(
        job_id=str(job.job_id), workload=spec.workload, total_steps=spec.steps, gpus=gpus,
        checkpoint_dir=str(checkpoint_dir), params=dict(spec.params), slowdown=job.slowdown,
        checkpoint_every=spec.checkpoint_every, attempt=job.attempt, code=code,
        log_dir=str(log_dir(checkpoint_dir, job.attempt)) if code is not None else None,
        report_timeout_s=report_timeout_s, log_bytes=log_bytes if code is not None else None, storage=storage,
    )


def log_dir(checkpoint_dir: Path, attempt: int) -> Path:
    """``STATE_DIR/logs/<job>/attempt-<k>`` for the job whose checkpoints are ``STATE_DIR/checkpoints/<job>``."""
    checkpoint_dir = Path(checkpoint_dir)
    return checkpoint_dir.parent.parent / "logs" / checkpoint_dir.name / f"attempt-{attempt}"
