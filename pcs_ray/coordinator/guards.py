"""What keeps a job from holding GPUs it no longer uses: an external executor's lease, a time limit, a hang.

The coordinator checks these on its timer (:meth:`Coordinator.tick`); each check here only says
whether a job crossed its line and why, in one line. The limits are the operator's
(:class:`RunLimits`, from the coordinator's configuration); a job may ask for its own
``max_runtime_s`` and ``report_timeout_s`` within the operator's bounds (:func:`check_request`).

* **Lease** (``executor: external`` jobs): the executor renews it with every call about its job
  (``renew_lease``, a progress report, an acknowledgement, a demand). A job whose executor was silent
  for ``lease_s`` (its driver died, or never connected) ends ``failed``; nothing runs to be stopped.
* **Time limit**: the seconds a job held GPUs, over all its runs (waiting in the queue does not
  count). Reached, its run is asked to checkpoint and stop; it then ends ``timed_out``.
* **Hang** (pcs-ray's runners): a run that reported no step for ``report_timeout_s`` (counted from when
  its ranks began running its code until its first report: start-up is not a silence). Its ranks dump
  their stacks into their logs a little before (``faulthandler``, armed at their start and at each
  report), then it is killed: retried from its newest checkpoint while the job's ``max_failures`` allow
  (a hang counts as a failure of its code), else the job ends ``failed``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pcs_ray.contract import JobSpecError
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.jobs.jobfile import JobFile

#: A hung run is killed this long after its ranks were due to dump their stacks, so the dumps are in its logs first.
HANG_DUMP_MARGIN_S = 5.0


@dataclass(frozen=True)
class RunLimits:
    """The operator's limits (seconds; None: no limit). ``*_bound_s``: the most a job may ask for (None: any)."""

    lease_s: float = 30.0
    max_runtime_s: float | None = None
    max_runtime_bound_s: float | None = None
    report_timeout_s: float | None = 1800.0
    report_timeout_bound_s: float | None = 6 * 3600.0
    log_bytes_per_rank: int | None = 64 * 1024 * 1024  # a user rank's log rotates past this (pcs_ray.executors.log_cap)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")

    def max_runtime(self, spec: JobFile) -> float | None:
        return spec.max_runtime_s if spec.max_runtime_s is not None else self.max_runtime_s

    def report_timeout(self, spec: JobFile) -> float | None:
        return spec.report_timeout_s if spec.report_timeout_s is not None else self.report_timeout_s


def check_request(spec: JobFile, limits: RunLimits) -> None:
    """Refuse a job that asks for more than the operator allows, in one line naming the field."""
    for field, asked, bound in (("max_runtime_s", spec.max_runtime_s, limits.max_runtime_bound_s),
                                ("report_timeout_s", spec.report_timeout_s, limits.report_timeout_bound_s)):
        if asked is not None and bound is not None and asked > bound:
            raise JobSpecError(f"job spec: {field}: {asked:g} s is more than this cluster allows ({bound:g} s)")


def held_s(job: LiveJob, now: float) -> float:
    """Seconds the job has held GPUs, over all its runs, up to ``now``."""
    return sum((s["end"] if s["end"] is not None else now) - s["start"] for s in job.segments)


def lease_lapsed(job: LiveJob, renewed: float, now: float, limits: RunLimits) -> str | None:
    """Why an external job's executor is taken for gone (None: its lease holds)."""
    silent = now - renewed
    if silent <= limits.lease_s:
        return None
    return (f"its executor (the sweep's driver) stopped renewing its lease: nothing from it for {silent:.0f} s "
            f"(lease {limits.lease_s:g} s); the driver died or never connected, so its GPUs went back")


def over_time(job: LiveJob, now: float, limits: RunLimits) -> str | None:
    """Why a job's time is up (None: it has time left, or no limit)."""
    limit = limits.max_runtime(job.spec)
    if limit is None or held_s(job, now) < limit:
        return None
    return f"reached its time limit: held GPUs for {limit:g} s (max_runtime_s); stopped at its checkpoint"


def hung(job: LiveJob, now: float, limits: RunLimits, began: float | None = None) -> str | None:
    """Why a running job's run is taken for hung (None: it reports, it is still starting, or no timeout
    applies). ``began``: when its ranks began running its code; until then it is starting up (a runtime
    env's installs may take long), which is not a silence."""
    timeout = limits.report_timeout(job.spec)
    if timeout is None or job.spec.executor == "external" or job.started_at is None:
        return None
    reported = job.reported_at is not None and job.reported_at >= job.started_at
    since = job.reported_at if reported else began
    if since is None or now - since < timeout + HANG_DUMP_MARGIN_S:
        return None
    what = f"reported nothing after step {job.steps}" if reported else "reported no step since its ranks began"
    return (f"hang: its run {what} for {now - since:.0f} s (report_timeout_s {timeout:g} s); "
            f"its ranks' stacks are in its logs (pcs-ray logs {job.job_id} --attempt {job.attempt}); killed")
