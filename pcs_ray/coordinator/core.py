"""The coordinator's core: events in, journal first, actions out. No Ray.

Each call (a submission, a cancel, a runner's report or end, a timer, an
external executor's demand, the operator's policy swap or tenants file) validates its input,
journals what happened (:mod:`.state`), and lets :meth:`Coordinator.decide`
sync the cluster model, run the policy and placement, and return the diff
(:mod:`.decisions`) as :class:`~pcs_ray.contract.StartRun` /
:class:`~pcs_ray.contract.StopRun` actions for its host to carry out.
Predictions are forward plays of the same model; what is handed out is
built in :mod:`.views` and :mod:`.external`.

Times inside are seconds since the coordinator's epoch (journaled once);
everything handed out is absolute (``time.time()`` seconds).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from pcs_ray.cluster import ClusterSpec
from pcs_ray.contract import (Action, ConfigError, CoordinatorError, EndCode, GPUSlot, JobSpecError, JobStatus,
                              StartRun, StopRun, UnknownJobError)
import pcs_ray.coordinator.external as external
import pcs_ray.coordinator.guards as guards
import pcs_ray.coordinator.retention as retention
import pcs_ray.coordinator.views as views
from pcs_ray.coordinator.decisions import Start, diff, hand_overs, run_request
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.coordinator.journal import Journal
from pcs_ray.coordinator.speed import SpeedModel
from pcs_ray.coordinator.state import CoordinatorState, PolicyFactory
from pcs_ray.tenants.identity import Caller
from pcs_ray.jobs.jobfile import JobFile, parse_job
from pcs_ray.tenants.ownership import check_cancel, check_operator
from pcs_ray.coordinator.tenants import admitted_spec, checked_tenants_file, tenant_usage
import pcs_ray.train.store as store
from pcs_ray.forecast import BranchPoints
from pcs_ray.forecast.result import starts_of
from pcs_ray.policies.base import SchedulingPolicy
from pcs_ray.cluster.resources import gpu_resource
from pcs_ray.workloads.history import append_history

#: GPU readings journaled per job and GPU at most this often (a multi-GPU job reports every GPU)
TELEMETRY_JOURNAL_EVERY_S = 60.0
#: A submission's forecast branches from the latest refresh play only while its state is younger than this (seconds)
BRANCH_MAX_AGE_S = 10.0
#: ... or while it is younger than this many times the latest refresh play took from its state to its
#: forecasts: at 100,000 queued a play takes seconds, and its state is as young as any play's can be
BRANCH_AGE_PER_PLAY = 2.0
#: A refresh play's forecasts are written this many jobs at a time (Coordinator.end_play_refresh_in_parts)
REFRESH_PART = 1000


class Coordinator(CoordinatorState):
    """Decisions and predictions of the live cluster manager.

    ``checkpoint_root/<job id>`` is each job's checkpoint folder (it must be
    reachable from every node). ``clock`` is injectable for tests.
    ``policies`` builds a policy from its name and WFQ configuration: without
    it the policy cannot be swapped (:meth:`set_policy`). ``keep_runs``: after
    a restart, the host says which runs still train (:meth:`settle_runs`). ``branch_max_age_s``: a
    submission's forecast branches from the latest refresh play while that play's state is younger
    than this (seconds; 0: every forecast is a fresh play), see :meth:`play_submission`. ``limits``: the
    operator's lease, time limit and hang timeout (:class:`~.guards.RunLimits`), checked by :meth:`tick`.
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        policy: SchedulingPolicy,
        journal: Journal,
        *,
        checkpoint_root: str | Path,
        placement=None,
        clock: Callable[[], float] = time.time,
        workloads: Collection[str] | None = None,
        default_step_time: float = 1.0,
        restart_overhead: float = 3.0,
        history_path: str | Path | None = None,
        speeds_path: str | Path | None = None,
        max_failures: int = 3,
        progress_journal_every: float = 5.0,
        policies: PolicyFactory | None = None,
        keep_runs: bool = False,
        branch_max_age_s: float = BRANCH_MAX_AGE_S,
        limits: guards.RunLimits | None = None,
        retain: retention.Retention | None = None,
        storage: str | None = None,
    ) -> None:
        if not branch_max_age_s >= 0:
            raise ConfigError(f"the forecast's refresh age bound must be >= 0 seconds, got {branch_max_age_s}")
        self.branch_max_age_s = branch_max_age_s
        self._branch_age_limit = branch_max_age_s  # and at least BRANCH_AGE_PER_PLAY times the latest play's length
        # The refresh play in flight and the latest one done, each with the policy it played and the
        # first job id it does not hold: a submission's forecast branches from the latest (see forecast).
        self._refreshing: tuple[BranchPoints, SchedulingPolicy, int] | None = None
        self._branches: tuple[BranchPoints, SchedulingPolicy, int] | None = None
        self.checkpoint_root = Path(checkpoint_root)
        self.storage = storage  # the cluster's storage URI: runs keep their checkpoints and logs there
        self.workloads = workloads
        self.history_path = history_path
        self.speeds_path = speeds_path
        speed = SpeedModel(default_step_time, restart_overhead)
        self.max_failures = max_failures
        self.progress_journal_every = progress_journal_every
        self._progress_logged: dict[int, float] = {}
        self._telemetry_logged: dict[tuple[int, int], float] = {}
        self.decision_s: deque[float] = deque(maxlen=100_000)  # wall seconds of each decide() (load benches read it)
        # The same decisions' CPU seconds in this thread: their own cost, without the waits for a CPU or the
        # interpreter (other processes, other threads, a garbage collection) that the wall time includes.
        self.decision_cpu_s: deque[float] = deque(maxlen=100_000)
        self.limits = limits if limits is not None else guards.RunLimits()
        self.retain = retain if retain is not None else retention.Retention()
        self._retention_checked = -math.inf
        # External jobs' latest lease renewal (seconds since the epoch); not journaled: after a restart each
        # external job has a whole lease from then (``_lease_origin``) for its executor to speak again.
        self._renewed: dict[int, float] = {}
        self._began: dict[int, tuple[int, float]] = {}  # job -> (attempt, when its ranks began), until a first step
        super().__init__(cluster, policy, journal, placement=placement, clock=clock, policies=policies,
                         speed=speed, keep_runs=keep_runs)
        if speeds_path is not None:  # after the journal's own measurements: the file fills in what they lack
            self.speed.load(speeds_path)
        self._lease_origin = self.now()
        self._external = {jid for jid, job in self.active.items() if job.spec.executor == "external"}  # active ones

    # -- events --------------------------------------------------------------------
    def submit(
        self, raw: dict | JobFile, submission_id: str | None = None, *, refresh: bool = True,
        caller: Caller | None = None,
    ) -> tuple[int, list[Action]]:
        """Validate, journal and admit a job; return its id and the actions it causes.

        A repeated ``submission_id`` (a client retrying) returns the first job, not a new one.
        ``refresh=False`` leaves the forward play to the caller (a batch of submissions). Otherwise
        the job's own forecast is made at once, by a play that stops at its finish
        (:meth:`play_submission`); the other jobs' forecasts wait for the next :meth:`play_refresh`.
        A spec without a ``user`` or ``tenant`` takes the ``caller``'s; with tenants in force, its tenant
        must be declared and its ``min_runtime_s`` within the operator's bound.
        """
        if submission_id and submission_id in self.by_submission:
            return self.by_submission[submission_id], []
        spec = raw if isinstance(raw, JobFile) else parse_job(
            raw, "job spec", capacity=self.cluster.num_gpus, workloads=self.workloads
        )
        spec = admitted_spec(spec, caller, self.tenants)
        guards.check_request(spec, self.limits)
        if spec.fewest_gpus > self.cluster.num_gpus:
            raise JobSpecError(f"job spec: gpus: the job needs {spec.fewest_gpus} GPUs; the cluster has {self.cluster.num_gpus}")
        jid = self.next_id
        self._record("submit", jid, spec=spec.to_dict(), t1=self.speed.estimate(spec), submission_id=submission_id)
        if spec.executor == "external":
            self._renewed[jid] = self.now()
            self._external.add(jid)
        actions = self.decide()
        self.jobs[jid].bound = self._bound(jid)
        if refresh:
            self.play_submission(jid)
        return jid, actions

    def cancel(self, jid: int, caller: Caller | None = None) -> list[Action]:
        """``caller``: who asks (None: the coordinator's own process, never refused)."""
        job = self._job(jid)
        if caller is not None:
            check_cancel(self.tenants, caller, jid, job.spec.tenant, job.spec.user)
        if job.done or job.cancel_requested:
            return []
        self._record("cancel", jid)
        actions: list[Action] = []
        if job.state == JobStatus.RUNNING:
            self._record("stop", jid, attempt=job.attempt, reason="cancel")
            actions.append(StopRun(jid, job.attempt, "cancel"))
        return actions + self.decide()

    def runner_kind(self, jid: int, attempt: int, runner: str) -> None:
        """Which runners took the job's run ``attempt`` ("warm": pooled; "cold"): its start-up is learned as that kind."""
        job = self.jobs.get(jid)
        if runner != "cold" and job is not None and job.attempt == attempt and job.state.holds_gpus:
            self._record("runner", jid, attempt=attempt, runner=runner)

    def note_prediction(self, jid: int) -> None:
        """Journal the job's forecast at submission, for ``pcs-ray report`` and for a restart to keep it."""
        job = self.jobs.get(jid)
        if job is not None and job.first_predicted is not None:
            self._record("predicted", jid, completion=job.first_predicted)

    def progress(self, jid: int, step: int, step_time: float | None, emulated: bool = False) -> None:
        """A runner's report; journaled at most every ``progress_journal_every`` seconds per job. A report
        without a step time before the run's first step says only that a runner's ranks began
        (``guards.hung`` counts from there); it changes nothing else."""
        job = self.jobs.get(jid)
        if job is None or not job.state.holds_gpus:
            return
        now = self.now()
        if step_time is None and job.reported_at is None and job.spec.executor == "runner":
            self._began[jid] = (job.attempt, now)
            return
        report = {"step": step, "step_time": step_time, "emulated": emulated}
        if now - self._progress_logged.get(jid, -math.inf) >= self.progress_journal_every:
            self._progress_logged[jid] = now
            self._record("progress", jid, **report)
        else:  # applied as a journaled one is: a later report, or the run's end, journals the step it reached
            self._apply(now, "progress", jid, report)

    def telemetry(self, jid: int, attempt: int, node: str, index: int, reading: dict) -> None:
        """A rank's NVML reading of its GPU (``pcs_ray.power.measured.RunMeter``); journaled at most every
        ``TELEMETRY_JOURNAL_EVERY_S`` per job and GPU (a crash loses at most that much of a run's measured
        energy), and always when it is the run's last (``final``). Readings of an older run, or of a GPU
        the run does not hold, are dropped."""
        job = self.jobs.get(jid)
        if job is None or job.attempt != attempt or not job.segments:
            return
        held = job.gpus or tuple(job.segments[-1]["gpus"])  # the last reading may come after the run ended
        gid = next((g for g in held if self.slot(g) == GPUSlot(node, int(index))), None)
        if gid is None:
            return
        now = self.now()
        if reading.get("final") or now - self._telemetry_logged.get((jid, gid), -math.inf) >= TELEMETRY_JOURNAL_EVERY_S:
            self._telemetry_logged[(jid, gid)] = now
            self._record("telemetry", jid, attempt=attempt, gpu=gid, reading=reading)
        else:
            job.note_reading(attempt, gid, reading)

    def run_ended(
        self, jid: int, attempt: int, status: str, step: int, step_time: float | None = None,
        error: str | None = None, *, fatal: bool = False, note: str | None = None, metrics: dict | None = None,
        emulated: bool = False,
    ) -> list[Action]:
        """A run ended: finished its budget, stopped on request (``preempted``), or failed (or was killed)."""
        changed = self.record_run_end(jid, attempt, status, step, step_time, error, fatal=fatal, note=note,
                                      metrics=metrics, emulated=emulated)
        return self.decide() if changed else []

    def record_run_end(
        self, jid: int, attempt: int, status: str, step: int, step_time: float | None = None,
        error: str | None = None, *, fatal: bool = False, note: str | None = None, metrics: dict | None = None,
        emulated: bool = False,
    ) -> bool:
        """:meth:`run_ended` without the decision, for a host that collected several ends at once and
        decides once for all of them (one decision instead of one per end, the lock held that much less).
        False for a stale outcome (an attempt already written off): nothing changed.

        ``fatal``: the job's own code raised: it is restarted from its newest checkpoint while its
        ``max_failures`` allow (each such failure kept in its runs), else it fails; a run killed as hung
        (:meth:`guard_end`) counts as such a failure, with the hang as its error. A run that
        ends behind the steps it reported (killed after the grace period, or lost) redoes them from its
        checkpoint: they are counted as ``lost_steps``. ``note``: how a finished run ended, when not at
        its budget (user code that returned early). ``metrics``: what the run last reported (user code);
        a finished job keeps them and its newest checkpoint's folder for ``Trainer.fit``. ``emulated``: the
        run emulated a GPU (its end's event says so)."""
        job = self.jobs.get(jid)
        if job is None or job.attempt != attempt or not job.state.holds_gpus:
            return False
        if step_time and job.gpus:
            self._apply(self.now(), "progress", jid, {"step": step, "step_time": step_time, "emulated": emulated})
        ran = {"emulated": True} if emulated else {}
        if job.stop_reason == EndCode.HANG and job.stop_why and status != "finished":
            status, fatal, error = "failed", True, job.stop_why  # killed as hung, to be retried
        if status == "finished":
            extra = {"note": note} if note else {}
            if job.spec.user_code:
                extra.update(metrics=metrics or {}, checkpoint=self._checkpoint_path(jid))
            self._record("finished", jid, step=step, **extra, **ran)
            self._write_history(job)
        elif job.cancel_requested:
            self._record("cancelled", jid, step=step, **ran)
        elif job.ending is not None:  # a guard stopped it for good (guard_end)
            self._record(job.ending["state"], jid, step=step, error=job.ending["reason"], code=job.ending["code"], **ran)
        elif status == "failed" and (fatal and job.code_failures >= job.spec.max_failures or not fatal
                                     and job.state == JobStatus.RUNNING and job.failures + 1 >= self.max_failures):
            self._record("failed", jid, step=step, error=error, **ran)
        else:
            unexpected = status == "failed" and (fatal or job.state == JobStatus.RUNNING)
            lost = max(0, job.steps - step)
            self._record(
                "requeue", jid, step=step, preempted=job.state == JobStatus.STOPPING and not fatal, failed=unexpected,
                error=error, **({"fatal": True} if fatal else {}), **({"lost_steps": lost} if lost else {}), **ran,
            )
        self.save_speeds()
        return True

    def tick(self) -> list[Action]:
        """Called periodically: end the jobs past a guard's line (:mod:`.guards`), and act when the policy
        asked for a review (a lease or round expiry)."""
        ended, actions = self.check_guards()
        if self.now() - self._retention_checked >= retention.CHECK_EVERY_S:
            self.forget_ended()
        review = self.model.review_time()
        if ended or (review is not None and review <= self.now()):
            return actions + self.decide()
        return actions

    def forget_ended(self) -> list[int]:
        """Forget the ended jobs the operator's retention lets go (:mod:`.retention`), their checkpoints and
        logs with them; returns their ids."""
        self._retention_checked = self.now()
        ids = retention.due(self.jobs.values(), self.now(), self.retain)
        if not ids:
            return []
        self.save_speeds()  # what they taught the speed model outlives their events
        staged = [(self.jobs[j].spec.datasets or {}).get("token") for j in ids if j in self.jobs]
        ids = self.forget(ids)
        retention.delete_files(ids, self.checkpoint_root, self.checkpoint_root.parent / "logs", self.storage,
                               datasets=[t for t in staged if t])
        return ids

    def _checkpoint_path(self, jid: int) -> str | None:
        """Where a finished job's newest checkpoint is: its folder, or its URI in the cluster's storage."""
        if self.storage:
            from pcs_ray.storage import StorageError, open_storage
            from pcs_ray.train.remote_store import remote_url

            try:
                return remote_url(open_storage(self.storage, retry_s=10.0), str(jid))
            except StorageError:
                return None
        found = store.newest(self.checkpoint_root / str(jid))
        return str(found[0]) if found else None

    def _forgotten(self, jid: int) -> None:
        for per_job in (self._progress_logged, self._renewed, self._began, self._forecast_at):
            per_job.pop(jid, None)
        for key in [k for k in self._telemetry_logged if k[0] == jid]:
            del self._telemetry_logged[key]
        self.speed.forget_job(jid)
        self.model.placement.forget(jid)

    # -- guards: leases, time limits, hangs ------------------------------------------------
    def renew_lease(self, jid: int) -> None:
        """An external job's executor spoke: its lease runs ``limits.lease_s`` from now."""
        job = self.jobs.get(jid)
        if job is not None and not job.done and job.spec.executor == "external":
            self._renewed[jid] = self.now()

    def external_failed(self, jid: int, reason: str) -> list[Action]:
        """An external job's executor gives it up for good (its driver raised or was interrupted): it ends
        now (:meth:`guard_end`, ``EndCode.DRIVER_FAILED``), as a lapsed lease would end it later."""
        job = self._job(jid)
        if job.spec.executor != "external":
            raise CoordinatorError(f"job {jid} is run by pcs-ray, not by an external executor: cancel it instead")
        if job.done:
            return []
        line = " ".join(str(reason).split())[:300] or "its executor gave it up"
        return self.guard_end(job, EndCode.DRIVER_FAILED, line) + self.decide()

    def check_guards(self) -> tuple[bool, list[Action]]:
        """End every job past its lease, its time limit or its report timeout (:mod:`.guards`): whether any
        was (then decide: GPUs may be free), and the runs to stop."""
        now = self.now()
        ended = False
        actions: list[Action] = []
        # Only jobs holding GPUs and external ones have a guard to pass: not the queue, walked every tick.
        for jid in sorted(self.holders.keys() | self._external):
            job = self.active.get(jid)
            if job is None:
                self._external.discard(jid)
                continue
            if job.spec.executor == "external":
                why = guards.lease_lapsed(job, self._renewed.get(jid, self._lease_origin), now, self.limits)
                if why is not None:
                    actions += self.guard_end(job, EndCode.DRIVER_LOST, why)
                    ended = True
                    continue
            if job.ending is not None or job.cancel_requested:
                continue
            if job.state.holds_gpus:
                why = guards.over_time(job, now, self.limits)
                if why is not None:
                    actions += self.guard_end(job, EndCode.TIME_LIMIT, why, JobStatus.TIMED_OUT)
                    ended = True
                    continue
            if job.state == JobStatus.RUNNING:
                attempt, began = self._began.get(jid, (None, None))
                why = guards.hung(job, now, self.limits, began if attempt == job.attempt else None)
                if why is not None:
                    actions += self.guard_end(job, EndCode.HANG, why)
                    ended = True
        return ended, actions

    def guard_end(self, job: LiveJob, code: EndCode, reason: str, state: JobStatus = JobStatus.FAILED) -> list[Action]:
        """The one place a guard ends a job. An external job whose executor is gone (or a job with no run)
        ends now: nothing runs to be stopped, so a hand-over of its GPUs completes at once. A running job's
        run is stopped (``StopRun`` with ``code`` as its reason: a hung run's host kills it at once), and
        the job ends ``state`` when that run's end comes in (:meth:`record_run_end`). A hung run whose job
        has retries left under its ``max_failures`` is killed the same way, but its job is not ended: the
        run's end requeues it to resume from its newest checkpoint, the hang counted as a failure of its code."""
        jid = job.job_id
        if (code == EndCode.HANG and job.state == JobStatus.RUNNING
                and job.code_failures < job.spec.max_failures):
            retry = job.code_failures + 1
            why = f"{reason}, to be retried from its newest checkpoint (retry {retry} of max_failures {job.spec.max_failures})"
            self._record("stop", jid, attempt=job.attempt, reason=code.value, why=why)
            return [StopRun(jid, job.attempt, code.value)]
        if code in (EndCode.DRIVER_LOST, EndCode.DRIVER_FAILED) or not job.state.holds_gpus:
            final = JobStatus.CANCELLED if job.cancel_requested else state
            self._record(final.value, jid, step=job.steps, error=reason, code=code.value)
            self._renewed.pop(jid, None)
            return []
        self._record("ending", jid, state=state.value, code=code.value, reason=reason)
        if job.state == JobStatus.RUNNING:
            self._record("stop", jid, attempt=job.attempt, reason=code.value)
            return [StopRun(jid, job.attempt, code.value)]
        return []

    def set_demand(self, jid: int, *, gpus: int | None = None, steps: int | None = None) -> list[Action]:
        """An external job changed size (a sweep's trials stopped early or finished): new most
        GPUs and total steps; its GPUs go back to the policy at once."""
        job = self._job(jid)
        update = None if job.done else external.demand_update(job.spec, gpus, steps)
        if update is None:
            return []
        self._record("demand", jid, update=update)
        actions = self.decide()
        self.play_refresh(force=True)
        return actions

    def set_policy(self, name: str, wfq: dict | None = None, caller: Caller | None = None) -> list[Action]:
        """The operator swaps the policy (``pcs-ray config set``): journaled, so a restart keeps it;
        decisions use it at once, and every prediction and bound is refreshed."""
        if caller is not None:
            check_operator(self.tenants, caller, "config set")
        self._build_policy(name, wfq)  # a configuration that cannot be built is refused before it is journaled
        self._record("config", None, source="set", name=name, wfq=wfq)
        return self._policy_changed()

    def set_tenants(self, raw: dict, caller: Caller | None = None) -> list[Action]:
        """The operator applies a tenants file (``pcs-ray tenants apply``): checked against the cluster and
        the active jobs (:func:`~pcs_ray.coordinator.tenants.checked_tenants_file`), journaled, and from then
        on the tenants policy wraps the policy in force."""
        if caller is not None:
            check_operator(self.tenants, caller, "tenants apply")
        tenants = checked_tenants_file(raw, self.cluster.num_gpus, self.active, caller)
        self._record("tenants", None, tenants=tenants.model_dump(mode="json"))
        return self._policy_changed()

    def _policy_changed(self) -> list[Action]:
        self._branches = None  # plays of the old policy
        actions = self.decide()
        self.play_refresh(force=True)
        for jid, job in self.active.items():
            job.bound = self._bound(jid)
        return actions

    # -- decisions -------------------------------------------------------------------
    def decide(self) -> list[Action]:
        """Run policy + placement on the current state and return the diff as actions."""
        began, cpu = time.perf_counter(), time.thread_time()
        actions = self._decide()
        self.decision_s.append(time.perf_counter() - began)
        self.decision_cpu_s.append(time.thread_time() - cpu)
        return actions

    def _decide(self) -> list[Action]:
        self.model.sync(self.now(), self.active, self._dirty, self.speed)
        self.model.reallocate()
        for jid, count, reason in self.model.take_skips():
            self._record("skip", jid, count=count, reason=reason)
        stops, starts = diff(self.holders.values(), self.active, self.model)
        actions: list[Action] = []
        for stop in stops:
            job = stop.job
            self._record("stop", job.job_id, attempt=job.attempt, reason=stop.reason)
            actions.append(StopRun(job.job_id, job.attempt, stop.reason))
        for start in starts:
            action = self._start(start)
            if action is not None:
                actions.append(action)
        return actions

    def _start(self, start: Start) -> StartRun | None:
        """Journal the start; the action to launch a runner (None for an external executor, which polls)."""
        job = start.job
        self._record("start", job.job_id, attempt=job.attempt + 1, gpus=list(start.gpus), kind=start.kind,
                     slowdown=self.model.slowdown(job.job_id))
        if job.spec.executor == "external":
            return None
        slots = tuple(self.slot(g) for g in start.gpus)
        return StartRun(job.job_id, start.kind, self._run_request(job, slots))

    def current_request(self, jid: int):
        """The run request of the job's current attempt, as it was launched (to adopt that run after a restart)."""
        job = self._job(jid)
        slots = tuple(self.slot(g) for g in job.gpus)
        return self._run_request(job, slots)

    def _run_request(self, job: LiveJob, slots: tuple[GPUSlot, ...]):
        return run_request(job, slots, self.checkpoint_root / str(job.job_id), self.limits.report_timeout(job.spec),
                           self.limits.log_bytes_per_rank, self.storage)

    # -- predictions -------------------------------------------------------------------
    def play_refresh(self, force: bool = False) -> None:
        """Play the current state forward (same policy and placement, no arrivals)."""
        if not (force or self._predictions_stale or self._forecast_passed()) or not self.active:
            return
        self.model.sync(self.now(), self.active, self._dirty, self.speed)
        finish = self.model.play_ahead()
        starts = starts_of(finish)
        for jid, t in finish.items():
            self._set_forecast(jid, t, starts)
        self._forecast_at.clear()
        self._predictions_stale = False

    def play_submission(self, jid: int) -> None:
        """Forecast ``jid``, just submitted, by a play that stops at its finish; jobs that finish first
        get theirs too, the rest stay stale for the next refresh.

        The play branches from the latest refresh play (:meth:`begin_play_refresh`), plus the new job and
        those of its queue submitted since that still wait, where
        that play's state is less than ``branch_max_age_s`` old, was played with the policy in force, and
        leaves the new job waiting at its arrival (``BranchPoints.branch``): only the events from the
        job's branch point to its finish are played. Otherwise it is a play of the current state (the
        number the whole play gives, at the cost of the events before the job's finish). The job
        records which (``forecast_basis``) and the refresh's age. Where the latest refresh play took long
        (a queue of 100,000), its state may be as old as ``BRANCH_AGE_PER_PLAY`` times its length, plus how
        long the play under way (if any) has run: a slow play must not send every submission to a fresh one."""
        if not self._predictions_stale:
            return
        self.model.sync(self.now(), self.active, self._dirty, self.speed)
        finish, age, job = None, None, self.jobs[jid]
        if self._branches is not None and self._branches[1] is self.policy:
            points, _, since_id = self._branches
            age = self.now() - points.started
            limit = self._branch_age_limit
            if self._refreshing is not None:  # the next play is under way: its state is that much younger
                limit += self.now() - self._refreshing[0].started
            if age < limit:
                finish = self.model.play_branch(points, jid, since_id)
            else:
                self._branches = None  # too old for any later submission too: its copies are let go
        if finish is None or jid not in finish:
            finish, age = self.model.play_ahead(until=jid), None
        job.forecast_basis, job.refresh_age = ("fresh", None) if age is None else ("branch", age)
        starts = starts_of(finish)  # a fresh play's; a branch keeps finishes only, the next refresh gives starts
        for other, t in finish.items():
            if self._set_forecast(other, t, starts):
                self._forecast_at[other] = self.changes

    def begin_play_refresh(self) -> tuple[int, Callable[..., dict[int, float]]] | None:
        """Under the caller's lock: a forward play of the current state that runs without it
        (``ClusterModel.play_detached``), so that calls are not held up for a whole play;
        hand its result to :meth:`end_play_refresh`, which also keeps where submissions' forecasts
        can branch from it (:meth:`play_submission`). None when nothing is stale or only a play under
        the lock can do it (then :meth:`play_refresh`)."""
        if not (self._predictions_stale or self._forecast_passed()) or not self.active:
            return None
        self.model.sync(self.now(), self.active, self._dirty, self.speed)
        points = self.model.play_detached()
        if points is None:
            return None
        self._refreshing = (points, self.policy, self.next_id)
        return self.changes, points.run

    def end_play_refresh(self, began: int, finish: dict[int, float]) -> None:
        """Under the caller's lock: the forecasts of a play begun at ``began`` (:meth:`begin_play_refresh`).
        A job a later submission forecast keeps that newer forecast; forecasts are fresh only if
        nothing happened since the play began."""
        for _ in self.end_play_refresh_in_parts(began, finish):
            pass

    def end_play_refresh_in_parts(self, began: int, finish: dict[int, float],
                                  part: int = REFRESH_PART) -> Iterator[None]:
        """:meth:`end_play_refresh` ``part`` jobs at a time: each step (``next``) runs under the caller's lock,
        which it may let calls take between steps, so a queue of thousands of forecasts does not hold
        them up all at once. A call between steps sees some forecasts from this play and the rest from the
        one before; one that forecasts a job keeps its forecast, as in :meth:`end_play_refresh`."""
        starts = starts_of(finish)
        written = list(finish.items())
        for at in range(0, len(written), part):
            if at:
                yield
            for jid, t in written[at:at + part]:
                if self._forecast_at.get(jid, -1) <= began:
                    self._set_forecast(jid, t, starts)
        self._forecast_at = {j: c for j, c in self._forecast_at.items() if c > began and j in self.active}
        if self.changes == began:
            self._predictions_stale = False
        refreshed, self._refreshing = self._refreshing, None
        if refreshed is not None and refreshed[0].done and refreshed[1] is self.policy:
            self._branches = refreshed
            took = self.now() - refreshed[0].started
            self._branch_age_limit = max(self.branch_max_age_s, BRANCH_AGE_PER_PLAY * took) if self.branch_max_age_s else 0.0

    def _forecast_passed(self) -> bool:
        """Whether an active job's forecast (its finish, or a queued job's start) is behind the clock: time
        alone made it stale, with no event to say so (a sweep whose trials wait reports nothing)."""
        now = self.now()
        return any(self._behind(job, now) for job in self.active.values())

    @staticmethod
    def _behind(job, now: float) -> bool:
        """Whether the job's predicted finish, or a queued job's predicted start, is earlier than ``now``."""
        return (job.predicted is not None and job.predicted < now
                or job.predicted_start is not None and job.predicted_start < now)

    def _set_forecast(self, jid: int, t: float, starts: dict[int, float] | None = None) -> bool:
        """An active job's predicted finish (its first one is kept as the prediction at submission) and, for
        a queued one, its predicted start from a whole play's ``starts`` (None: a play that gave none)."""
        job = self.active.get(jid)
        if job is None:
            return False
        job.predicted = t
        if job.state != JobStatus.QUEUED:
            job.predicted_start = None
        elif starts is not None:
            job.predicted_start = starts.get(jid)
        if job.first_predicted is None:
            job.first_predicted = t
        return True

    def _bound(self, jid: int) -> float | None:
        """The policy's worst-case finish, plus the job's own start-up if it has not started training yet."""
        if jid not in self.model:
            return None
        bound = self.model.bound(jid)
        job = self.jobs[jid]
        if bound is not None and job.reported_at is None:
            bound += self.speed.cost(job.spec.workload, "start" if job.first_start is None else "resume")
        return bound

    def prediction(self, jid: int) -> dict:
        """The job's current prediction and bound (absolute seconds); cheap: no forward play."""
        job = self._job(jid)
        if not job.done:
            self.model.sync(self.now(), self.active, self._dirty, self.speed)
            bound = self._bound(jid)
            job.bound = bound if bound is not None else job.bound
        view = views.prediction(job, self.epoch, self._explain(jid), self._uncertainty(job))
        view["waiting"] = self.waiting_for(jid)
        self.floor_passed_forecasts([view])
        return view

    def submitted(self, jid: int) -> tuple[float | None, float | None]:
        """The job's predicted completion and bound (absolute seconds) as its submission left them: what a
        submission's reply carries, read without another sync, bound or view (:meth:`prediction` has those)."""
        job = self._job(jid)
        return self.wall(job.finish if job.done else job.predicted), self.wall(job.bound)

    def waiting(self) -> dict[int, dict]:
        """Why each queued or stopping job has no GPUs to run on: the policy's reason where it gives the job
        none, else the runs it waits for (``decisions.hand_overs``)."""
        return self._waits(self.model.why_waiting(), lambda why: why.to_dict())

    def waiting_codes(self) -> dict[int, str]:
        """``waiting()``'s codes alone, for a count by reason (the metrics): the policy's without the text it
        would write for each of thousands of queued jobs."""
        return self._waits(self.model.waiting_codes(), lambda why: why.code.value)

    def _waits(self, policy_reasons: dict, shown: Callable) -> dict:
        """The hand-overs' reasons (``shown`` each), then the policy's for the jobs still queued."""
        out = {jid: shown(why) for jid, why in
               hand_overs(self.active.values(), self.holders.values(), self.model.plan(), self.gpu_name).items()}
        for jid, why in policy_reasons.items():
            job = self.active.get(jid)
            if job is not None and job.state == JobStatus.QUEUED:
                out[jid] = why
        return out

    def waiting_for(self, jid: int) -> dict | None:
        """``waiting()`` of one job, without the reasons of every other (a submission's reply reads it)."""
        job = self.active.get(jid)
        if job is None:
            return None
        if job.state == JobStatus.QUEUED and jid in self.model:
            why = self.model.why_job_waits(jid)
            if why is not None:
                return why
        why = hand_overs([job], self.holders.values(), self.model.plan(), self.gpu_name).get(jid)
        return None if why is None else why.to_dict()

    def _uncertainty(self, job: LiveJob) -> dict:
        """Which inputs of the job's forecast are still estimates, and its range (p10-p90 of the spread
        of the step times its shape measured, applied to the time it has left)."""
        if job.done or job.predicted is None:
            return {"estimates": [], "estimated_from": {}, "range": None}
        lo, hi = self.speed.spread(job)
        left = max(0.0, job.predicted - self.now())
        estimated = self.speed.estimated(job)
        return {"estimates": list(estimated), "estimated_from": estimated,
                "range": [self.wall(self.now() + left * lo), self.wall(self.now() + left * hi)]}

    def save_speeds(self) -> None:
        """Keep what was learned beside the journal, for a new coordinator (and ``pcs-ray calibrate``)."""
        if self.speeds_path is not None:
            try:
                self.speed.save(self.speeds_path)
            except OSError:
                pass  # the journal still holds every measurement; the file is a convenience

    def _explain(self, jid: int) -> dict | None:
        """Why placement gave the job its GPUs (``Placement.explain``, GPUs by name), if it placed it."""
        why = self.model.placement.explain(jid)
        return None if why is None else {**why, "gpus": [self.gpu_name(g) for g in why["gpus"]]}

    # -- what it hands out -----------------------------------------------------------
    def _job(self, jid: int) -> LiveJob:
        job = self.jobs.get(jid)
        if job is None:
            raise UnknownJobError(f"no job with id {jid}")
        return job

    def job_view(self, jid: int) -> dict:
        return views.job_view(self._job(jid), self.epoch, self.gpu_name, self.gpu_watts, self.clock() - self.epoch)

    def status(self) -> dict:
        view = views.status(self.clock(), self.epoch, self.policy.describe(), self.cluster.num_gpus,
                            self.speed.restart_overhead, self.jobs.values(), self.gpu_name, self.gpu_watts)
        view["speeds"] = self.speed.to_dict()  # what forecasts use: step times per shape and count, costs
        waiting = self.waiting()
        for job in view["jobs"]:
            job["waiting"] = waiting.get(job["id"])
        self.floor_passed_forecasts(view["jobs"])
        return view

    def floor_passed_forecasts(self, shown: list[dict]) -> None:
        """Views of active jobs whose forecast the clock passed since the latest play (the coordinator's
        loop plays again within about a second, :meth:`_forecast_passed`): their finish shown as at least
        now plus their own work left on their GPUs, their start as now at the earliest."""
        now = self.now()
        passed = [view for view in shown
                  if (job := self.active.get(view["id"])) is not None and self._behind(job, now)]
        if not passed:
            return
        self.model.sync(now, self.active, self._dirty, self.speed)
        for view in passed:
            left = self.model.time_left(view["id"])
            if view.get("predicted_completion") is not None and left is not None:
                view["predicted_completion"] = max(view["predicted_completion"], self.wall(now + left))
            if view.get("predicted_start") is not None:
                view["predicted_start"] = max(view["predicted_start"], self.wall(now))

    def gpu_watts(self, job_class: str, gid: int) -> float | None:
        """The cluster spec's predicted power of GPU ``gid`` for ``job_class`` (None: not given)."""
        if not 0 <= gid < self.cluster.num_gpus:  # a segment on a node lost since
            return None
        return self.cluster.gpu(gid).power.get(job_class)

    def tenants_view(self) -> dict:
        """The tenants file in force (None: none), since when, and per tenant its active and waiting jobs and GPUs."""
        return {"tenants": None if self.tenants is None else self.tenants.model_dump(mode="json"),
                "since": self.wall(self.tenants_since), "usage": tenant_usage(self.active.values())}

    def config(self) -> dict:
        """The policy in force (its parameters), the placement, and where and when the policy came from."""
        return {"policy": self.policy.describe(), "placement": self.model.placement.describe(),
                "source": self.config_source, "since": self.wall(self.config_since),
                "cluster": self.cluster.model_dump(mode="json")}

    def assignment(self, jid: int) -> dict:
        """What an external executor may use now (see :mod:`.external`)."""
        job = self._job(jid)
        if job.state != JobStatus.STOPPING:
            target = job.gpus
        else:  # a job withdrawn from the model (cancelled, or ended by a guard) keeps none
            target = self.model.gpus(jid) if jid in self.model else ()
        return {**external.assignment(job, target, self.resource), "lease_s": self.limits.lease_s}

    def slot(self, gid: int) -> GPUSlot:
        return GPUSlot(self.cluster.node_of(gid).name, self.cluster.gpu(gid).index)

    def gpu_name(self, gid: int) -> str:
        if not 0 <= gid < self.cluster.num_gpus:  # a segment on a node lost since (the actor rebuilt without it)
            return f"lost:{gid}"
        s = self.slot(gid)
        return f"{s.node}:{s.index}"

    def resource(self, gid: int) -> str:
        """The Ray custom resource that pins work to GPU ``gid``."""
        s = self.slot(gid)
        return gpu_resource(s.node, s.index)

    def _write_history(self, job: LiveJob) -> None:
        if self.history_path is not None:
            append_history(self.history_path, views.history_record(job, self.epoch, self.speed.speedup(job.spec),
                                                                   self.gpu_watts), self.retain.history_bytes)
