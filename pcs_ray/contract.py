"""The core contract: what the coordinator, its hosts, its clients and the runners agree on (no Ray import).

* Job states (:class:`JobStatus`), with the terminal set defined once (:data:`TERMINAL`).
* The coordinator's calls (:class:`CoordinatorAPI`), the same in-process and
  through Ray, and the typed errors it raises (:class:`CoordinatorError` and
  its subclasses): they cross the actor boundary as themselves, so a client or
  the CLI catches them by type.
* Actions (:class:`StartRun`, :class:`StopRun`): the diff between the plan and
  reality that the coordinator asks the executors to carry out.
* The runner contract: the coordinator decides *what* runs *where*;
  ``executors`` makes it happen. It launches a job with a :class:`RunRequest`
  and gets back a handle (see ``pcs_ray.executors.launch``) whose ``done`` object ref
  resolves to a :class:`RunOutcome`. Runners report progress while they train
  through the ``reporter`` callback target so predictions use measured speeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol


# -- job states ------------------------------------------------------------------
class JobStatus(StrEnum):
    """Where a job is. A string enum: views and the journal carry the plain value."""

    QUEUED = "queued"  # waiting for GPUs (also after a preemption, a lost runner or a failure it retries)
    RUNNING = "running"  # its runner (or external executor) holds ``gpus``
    STOPPING = "stopping"  # asked to stop; it still holds its GPUs until the stop is acknowledged
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"  # failed more often than the coordinator retries
    TIMED_OUT = "timed_out"  # ran its ``max_runtime_s`` (asked to checkpoint, then stopped)

    @property
    def done(self) -> bool:
        return self in TERMINAL

    @property
    def holds_gpus(self) -> bool:
        return self in _HOLDING


#: The states a job never leaves.
TERMINAL = frozenset({JobStatus.FINISHED, JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.TIMED_OUT})
_HOLDING = frozenset({JobStatus.RUNNING, JobStatus.STOPPING})


#: What a job's ``bound`` is, said wherever it is shown.
BOUND_MEANING = ("bound: the latest finish the policy guarantees the job whatever arrives later; a predicted "
                 "finish past it means the job ran slower, or lost more time to stops and faults, than the bound "
                 "assumed")


def past_bound(job: Mapping) -> bool:
    """A job view (``status``'s) not yet ended whose predicted finish is later than its bound."""
    predicted, bound = job.get("predicted_completion"), job.get("bound")
    return (job.get("state") not in TERMINAL and isinstance(predicted, (int, float))
            and isinstance(bound, (int, float)) and predicted > bound)


class EndCode(StrEnum):
    """Why the coordinator itself ended a job (a view's ``end_reason.code``); stable strings, the text is for people."""

    DRIVER_LOST = "driver-lost"  # an external executor (a Tune sweep's driver) stopped renewing its lease
    DRIVER_FAILED = "driver-failed"  # an external executor gave its job up (its driver raised, or was interrupted)
    TIME_LIMIT = "time-limit"  # the job ran its ``max_runtime_s``
    HANG = "hang"  # its run reported nothing for ``report_timeout_s``


# -- errors ----------------------------------------------------------------------
class CoordinatorError(ValueError):
    """A request the coordinator refuses (bad input, not a bug): the CLI prints it as one ``error:`` line."""


class JobSpecError(CoordinatorError):
    """A job spec that cannot be run, with a one-line message naming the field."""


class UnknownJobError(CoordinatorError):
    """A job id the coordinator has never seen."""


class ConfigError(CoordinatorError):
    """A policy configuration the coordinator cannot use (unknown policy, bad WFQ configuration)."""


class PermissionDeniedError(CoordinatorError):
    """A call the tenants file in force does not allow this caller (another tenant's job, an operator's command)."""


# -- the coordinator's calls -----------------------------------------------------
@dataclass(frozen=True)
class Submitted:
    """What a submission answers at once: the job's id, predicted completion and the policy's worst-case bound."""

    id: int
    predicted_completion: float | None  # absolute, time.time() seconds
    bound: float | None


class CoordinatorAPI(Protocol):
    """The coordinator's calls, whoever hosts it: in-process (``pcs_ray.coordinator.local``), as a Ray
    actor (``pcs_ray.coordinator.actor``), or reached over HTTP or Ray (``pcs_ray.client.Client``).

    Replies are plain data with absolute times (``time.time()`` seconds);
    refusals raise :class:`CoordinatorError` subclasses.
    """

    def submit(self, spec: dict, submission_id: str | None = None, caller: dict | None = None) -> Submitted:
        """Validate, journal and admit a job; a repeated ``submission_id`` answers for the first job.
        ``caller`` (``{user, tenant}``, see ``pcs_ray.tenants.identity``) fills in a spec's missing ``user`` and ``tenant``."""

    def status(self) -> dict:
        """Every job (state, GPUs, progress, predictions) and the policy in force."""

    def predict(self, job_id: int) -> dict:
        """A job's current predicted completion and bound."""

    def cancel(self, job_id: int, caller: dict | None = None) -> dict:
        """Cancel a job (a running one stops at its next step); returns its view. With tenants in force,
        only the job's tenant, its submitter or an operator may (``pcs_ray.tenants.ownership``)."""

    def logs(self, job_id: int, attempt: int | None = None, offsets: dict | None = None,
             metrics: bool = False) -> dict:
        """What a user run's ranks printed: one attempt (default the newest), each rank's text from
        ``offsets`` (rank -> byte offset) on, and the offsets to ask from next time; ``metrics``: also
        the attempt's reports (rank 0's metrics, one row each)."""

    def report_progress(self, job_id: int | str, step: int, step_time_s: float | None = None,
                        emulated: bool = False, overruns: int = 0) -> None:
        """A runner's or an external executor's progress: its step and measured seconds per step
        (``overruns``: this run's emulated steps so far whose real compute exceeded their budget)."""

    def assignment(self, job_id: int) -> dict:
        """The GPUs an ``executor: external`` job may use now: ``gpus`` while running, only ``target``
        while stopping (then it acknowledges with :meth:`external_ended`)."""

    def external_ended(self, job_id: int, attempt: int, status: str, step: int,
                       step_time_s: float | None = None) -> dict:
        """An external executor acknowledges a stop (``preempted``) or reports the end (``finished``,
        ``failed``); returns its new assignment."""

    def set_demand(self, job_id: int, gpus: int | None = None, steps: int | None = None) -> dict:
        """An external job changed size (most GPUs, total steps); returns its new assignment."""

    def external_failed(self, job_id: int, reason: str) -> dict:
        """An external executor gives its job up for good (a sweep's driver raised, or was interrupted, in
        ``fit``): it ends ``failed`` at once, ``end_reason`` ``driver-failed`` with ``reason`` (one line), its
        GPUs back, a hand-over waiting on it complete. A job that has ended stays as it was. Returns its view."""

    def renew_lease(self, job_id: int) -> dict:
        """An external executor says it lives: an ``executor: external`` job whose executor renews nothing
        (this call, a progress report, an acknowledgement, a demand) for the coordinator's lease (``lease_s``
        in the reply) ends ``failed`` and its GPUs go back. Returns its assignment."""

    def config(self) -> dict:
        """The policy configuration in force: the policy's parameters, where it came from, since when."""

    def set_config(self, policy: str, wfq: dict | None = None, caller: dict | None = None) -> dict:
        """Swap the scheduling policy (``pcs`` with a WFQ configuration, or another policy's name):
        journaled, used from the next decision on, kept across restarts; returns :meth:`config`.
        Only an operator may, once a tenants file names operators."""

    def tenants(self) -> dict:
        """The tenants file in force (``None`` when none was applied), since when, and each tenant's jobs and GPUs."""

    def set_tenants(self, tenants: dict, caller: dict | None = None) -> dict:
        """Apply a tenants file (as ``pcs_ray.tenants.spec`` reads it): journaled like :meth:`set_config`; from the
        next decision on the ``tenants`` policy wraps the policy in force. Returns :meth:`tenants`."""


    def dashboard_ticket(self, user: str, tenant: str | None = None) -> dict:
        """A single-use ticket that signs one browser in to the dashboard as ``user`` of ``tenant`` (valid
        two minutes): ``{"ticket", "expires", "path", "url"}``, ``url`` the whole link where the host
        knows its HTTP address (else None: the client joins its own)."""


# -- actions ---------------------------------------------------------------------
@dataclass(frozen=True)
class StartRun:
    """Launch (or resume) a job: ``kind`` is a first ``start``, a ``resume`` after preemption,
    a ``migrate`` (same GPU count, other GPUs) or a ``resize`` (another count)."""

    job_id: int
    kind: str
    request: RunRequest  # without its reporter: the Ray edge fills that in


@dataclass(frozen=True)
class StopRun:
    """Stop a run at a checkpoint: ``reason`` is ``preempt``, ``migrate``, ``resize`` or ``cancel``."""

    job_id: int
    attempt: int
    reason: str


Action = StartRun | StopRun


# -- the runner contract -----------------------------------------------------------
@dataclass(frozen=True)
class GPUSlot:
    """One GPU chosen by placement: its node and its index on that node."""

    node: str
    index: int


@dataclass(frozen=True)
class RunRequest:
    """Start (or resume) one job on exactly ``gpus``.

    ``workload`` names a model registered in ``pcs_ray.workloads.models``; ``params``
    are its options (batch size, learning rate, seed, dataset path ...).
    ``total_steps`` is the job's whole budget (None: the user's own code gave
    none and runs until its function returns): a resumed job continues from
    the step in its newest valid checkpoint under ``checkpoint_dir``.
    ``slowdown`` is what the cluster model says these GPUs cost (slowest
    GPU × locality × topology); runners on logical GPUs emulate devices
    whose step takes ``pcs_ray.workloads.device_model.emulated_step_s`` (which
    includes it), runners on real GPUs ignore it. ``attempt`` counts starts.
    """

    job_id: str
    workload: str
    total_steps: int | None
    gpus: tuple[GPUSlot, ...]
    checkpoint_dir: str
    params: dict[str, Any] = field(default_factory=dict)
    slowdown: float = 1.0
    checkpoint_every: int = 0  # 0: only when asked to stop
    attempt: int = 0
    # an actor handle with report_progress(job_id, step, step_time_s, emulated=bool[, overruns=int]) and, on real GPUs,
    # report_telemetry(job_id, attempt, node, index, reading) (CoordinatorHost); fire-and-forget
    reporter: Any = None
    report_interval_s: float = 1.0  # at most one progress report per interval (the first step is reported at once)
    # The user's own code (``workload`` is then its ``user:`` label): entrypoint or pickled function, working_dir,
    # runtime_env, config, torch_config and checkpoint_config, as the job file gave them (``pcs_ray.jobs.jobfile.JobFile``);
    # None for a built-in workload.
    code: dict | None = None
    log_dir: str | None = None  # where each rank's stdout and stderr go (``rank-<r>.log``); None: Ray's worker logs
    # The job's report timeout: a rank silent this long dumps its stacks to its stderr (``pcs_ray.executors.hang_dump``)
    # just before the coordinator kills the run as hung; None: no timeout.
    report_timeout_s: float | None = None
    log_bytes: int | None = None  # each rank's log is rotated past this size (``pcs_ray.executors.log_cap``); None: never
    # The cluster's storage URI (``pcs_ray.storage``): checkpoints and logs are kept there, and ``checkpoint_dir`` and
    # ``log_dir`` name the coordinator's copies; each rank works in its node's cache. None: every node shares STATE_DIR.
    storage: str | None = None

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
    overruns: int = 0  # emulated steps that left the run over a step behind its emulated GPU's schedule
    late_steps: int = 0  # emulated steps whose own compute exceeded their budget (caught up unless also overruns)
    emulated_step_s: float | None = None  # the emulated GPU's step budget (None: real GPUs)
    runner: str = "cold"  # "warm": a pooled runner took the run; "cold": runner processes started for it
    fatal: bool = False  # the job's own code raised: retrying would raise again, so the job fails at once
    metrics: dict | None = None  # the last metrics rank 0 reported (user code), as JSON numbers and strings
