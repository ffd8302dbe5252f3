"""The coordinator's state, changed only by journaled events: replaying the journal rebuilds it.

Every change goes through ``_record``: the event is appended to the journal
and committed, then applied by ``_apply``. Replaying the journal through the
same ``_apply`` rebuilds the state after a restart, so the live path and the
recovery path cannot drift. The state is the jobs (:mod:`.jobs`), what was
measured (:mod:`.speed`), the cluster model kept in step with them
(:mod:`.model`) and the policy in force.

The policy in force: the one the coordinator was started with, unless a
``pcs-ray config set`` came later (a ``config`` event from source ``set``,
rebuilt on replay through ``policies``). A start with a different policy
than the last start journals a ``config`` event from source ``start``, which
takes over; restarting with the same one (a Ray actor restart) keeps what
was set.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pcs_ray.cluster import ClusterSpec
from pcs_ray.contract import TERMINAL, ConfigError, JobStatus
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.coordinator.journal import Journal
from pcs_ray.coordinator.model import ClusterModel, job_spec
from pcs_ray.coordinator.speed import SpeedModel
from pcs_ray.jobfile import JobFile
from pcs_ray.policies.base import SchedulingPolicy

#: Builds a policy from its name and WFQ configuration (``coordinator.config.coordinator_policy``).
PolicyFactory = Callable[[str, dict | None], SchedulingPolicy]


def described(policy: SchedulingPolicy) -> dict:
    """The policy's parameters as the journal stores them (JSON round trip: tuples become lists)."""
    return json.loads(json.dumps(policy.describe()))


class CoordinatorState:
    """Jobs, measurements, the model and the policy; see the module docstring."""

    def __init__(self, cluster: ClusterSpec, policy: SchedulingPolicy, journal: Journal, *, placement,
                 speed: SpeedModel, clock: Callable[[], float], policies: PolicyFactory | None,
                 keep_runs: bool = False) -> None:
        self.cluster = cluster
        self.policy = policy  # in force
        self.journal = journal
        self.clock = clock
        self.speed = speed
        self.model = ClusterModel(cluster, policy, placement)
        self.jobs: dict[int, LiveJob] = {}
        self.active: dict[int, LiveJob] = {}  # not terminal, submission order
        self.by_submission: dict[str, int] = {}
        self.next_id = 1
        self.epoch: float | None = None
        self.config_source, self.config_since = "start", 0.0  # where the policy in force came from, and when
        self._policies = policies
        self._start_policy = policy
        self._started_with: dict | None = None  # the policy the last start journaled
        self._dirty: set[int] = set()  # jobs whose modelled remaining work must be re-synced
        self._predictions_stale = True
        self.changes = 0  # events since start: a forecast begun before the latest one is not the newest
        self._forecast_at: dict[int, int] = {}  # job -> ``changes`` when a submission forecast it
        self.recovered = 0  # jobs whose runs were lost with a previous incarnation (see settle_runs)
        self.reattached = 0  # runs a previous incarnation started that this one adopted
        self._replay(keep_runs)
        if self.epoch is None:
            self._record("init", None, epoch=self.clock(), policy=described(policy))
        elif described(policy) != self._started_with:
            self._record("config", None, source="start", policy=described(policy))

    # -- time ------------------------------------------------------------------
    def now(self) -> float:
        return self.clock() - self.epoch

    def wall(self, t: float | None) -> float | None:
        return None if t is None else self.epoch + t

    # -- the journal -------------------------------------------------------------
    def _record(self, _kind: str, job_id: int | None, **data) -> None:
        t = 0.0 if self.epoch is None else self.now()
        self.journal.append(t, _kind, job_id, data)
        self._apply(t, _kind, job_id, data)

    def _replay(self, keep_runs: bool) -> None:
        """Rebuild state from the journal.

        ``keep_runs``: the jobs the journal says hold GPUs stay as they are until the host has asked
        their runners whether they still train (:meth:`settle_runs`); otherwise they are lost now.
        """
        for ev in self.journal.events():
            self._apply(ev.t, ev.kind, ev.job_id, ev.data)
        if self.epoch is not None and not keep_runs:
            self.settle_runs({})

    def holding(self) -> list[LiveJob]:
        """Jobs the state says hold GPUs (running, or stopping): after a restart, those whose runs may live on."""
        return [job for job in self.active.values() if job.state.holds_gpus]

    def settle_runs(self, alive: dict[int, int | None]) -> int:
        """After a restart: the runs in ``alive`` (job id -> the step its runner is at, if known) go on;
        every other job that held GPUs lost its runner, goes back to the queue and resumes from its
        last checkpoint. Returns how many were lost."""
        lost = 0
        for job in self.holding():
            if job.job_id in alive:
                step = alive[job.job_id]
                # Sets ``reported_at``: the adopted run's next report is not its start-up.
                self._record("progress", job.job_id, step=max(job.steps, step or 0), step_time=None,
                             emulated=job.emulated)
                self.reattached += 1
            else:
                self._record("cancelled" if job.cancel_requested else "lost", job.job_id, attempt=job.attempt)
                lost += 1
        self.recovered += lost
        return lost

    def _build_policy(self, name: str, wfq: dict | None) -> SchedulingPolicy:
        """A policy by name; what cannot be built is a :class:`ConfigError`."""
        if self._policies is None:
            raise ConfigError("this coordinator was built without a policy factory: it cannot change its policy")
        try:
            return self._policies(name, wfq)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    # -- events ------------------------------------------------------------------
    def _apply(self, t: float, kind: str, jid: int | None, data: dict) -> None:
        if kind == "init":
            self.epoch, self._started_with = data["epoch"], data.get("policy")
            return
        if kind == "measured":
            self.speed.learned(data["workload"], data["t1"])
            return
        if kind == "config":
            self._apply_config(t, data)
        elif kind == "submit":
            spec = JobFile.model_validate(data["spec"])
            job = LiveJob(jid, spec, t, t1=data["t1"], submission_id=data.get("submission_id"))
            self.jobs[jid] = self.active[jid] = job
            if job.submission_id:
                self.by_submission[job.submission_id] = jid
            self.next_id = max(self.next_id, jid + 1)
            self.model.admit(job_spec(job, self.speed))
            self._dirty.add(jid)
        else:
            self._apply_to_job(t, kind, self.jobs[jid], data)
        self._predictions_stale = True
        self.changes += 1

    def _apply_to_job(self, t: float, kind: str, job: LiveJob, data: dict) -> None:
        jid = job.job_id
        if kind == "start":
            job.launched(t, data["attempt"], tuple(data["gpus"]), data["slowdown"], data["kind"])
        elif kind == "runner":
            if job.attempt == data["attempt"]:
                job.runner = data["runner"]
        elif kind == "stop":
            job.stopping(data["reason"], t)
        elif kind == "skip":  # RUSH held the start back: the count survives a restart
            job.skips, job.skip_reason = data["count"], data["reason"]
            self.model.restore_skips(jid, data["count"])
        elif kind == "progress":
            self._apply_progress(job, t, data["step"], data["step_time"], data.get("emulated", False))
        elif kind == "telemetry":
            job.note_reading(data["attempt"], data["gpu"], data["reading"])
        elif kind == "cancel":
            job.cancel_requested = True
            self.model.remove(jid)
            if job.state == JobStatus.QUEUED:
                self._terminate(job, JobStatus.CANCELLED, t)
        elif kind in ("requeue", "lost"):
            if kind == "requeue":
                job.steps = data["step"]
                job.lost_steps += data.get("lost_steps", 0)
                if data.get("preempted"):
                    job.preemptions += 1
                    if job.stop_at is not None:
                        self.speed.observe_stop(job, t - job.stop_at)
                if data.get("failed"):
                    job.failures += 1
                    job.error = data.get("error")
            job.requeued(t)
            self._dirty.add(jid)
        elif kind == "demand":
            job.spec = job.spec.model_copy(update=data["update"])
            if jid in self.model:
                self.model.readmit(job_spec(job, self.speed))
            self._dirty.add(jid)
        elif kind in TERMINAL:
            if "step" in data:
                job.steps = data["step"]
            job.error = data.get("error", job.error)
            job.note = data.get("note", job.note)
            job.metrics = data.get("metrics", job.metrics)
            job.checkpoint = data.get("checkpoint", job.checkpoint)
            self._terminate(job, JobStatus(kind), t)

    def _apply_config(self, t: float, data: dict) -> None:
        if data["source"] == "set":
            policy = self._build_policy(data["name"], data.get("wfq"))
        else:  # the latest start's policy is the one this coordinator was started with
            policy, self._started_with = self._start_policy, data["policy"]
        self.policy = policy
        self.model.set_policy(policy)
        self.config_source, self.config_since = data["source"], t

    def _apply_progress(self, job: LiveJob, t: float, step: int, step_time: float | None, emulated: bool) -> None:
        first = job.reported_at is None and job.started_at is not None
        if step_time and first:
            self.speed.observe_start_up(job, t, step, step_time)
        job.steps, job.reported_at, job.emulated = step, t, emulated or job.emulated
        if step_time and job.gpus:
            job.step_time = step_time
            self.speed.observe_step_time(job, step_time, first_of_run=first)
        self._dirty.add(job.job_id)

    def _terminate(self, job: LiveJob, state: JobStatus, t: float) -> None:
        job.ended(state, t)
        self.active.pop(job.job_id, None)
        self.model.remove(job.job_id)
