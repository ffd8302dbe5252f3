"""The coordinator's core: job state, events in, actions out, journal first. No Ray.

Every state change goes through ``_record``: it is appended to the journal
and committed, then applied by ``_apply``. Replaying the journal through the
same ``_apply`` rebuilds the state after a restart, so the live path and the
recovery path cannot drift. Decisions (``decide``) read the state, let the
cluster model run the policy and placement, and return the diff as
:class:`StartRun` / :class:`StopRun` actions.

Times inside are seconds since the coordinator's epoch (journaled once);
everything handed out is absolute (``time.time()`` seconds).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from pcs_ray.contract import GPUSlot, RunRequest
from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator.actions import Action, StartRun, StopRun
from pcs_ray.coordinator.journal import Journal
from pcs_ray.coordinator.model import ClusterModel
from pcs_ray.job import JobSpec, linear_speedup
from pcs_ray.jobfile import JobFile, parse_job
from pcs_ray.policies.base import SchedulingPolicy
from pcs_ray.resources import gpu_resource

TERMINAL = ("finished", "cancelled", "failed")


class UnknownJobError(ValueError):
    """A job id the coordinator has never seen."""


@dataclass
class LiveJob:
    """One submitted job as the coordinator tracks it (``steps`` is the runner's last word)."""

    job_id: int
    spec: JobFile
    submit: float
    t1: float  # seconds per step on one nominal GPU: the estimate until its runner measures it
    state: str = "queued"  # queued | running | stopping | finished | cancelled | failed
    gpus: tuple[int, ...] = ()  # held by its runner while running or stopping
    attempt: int = 0
    steps: int = 0
    reported_at: float | None = None
    step_time: float | None = None  # measured seconds per step on ``gpus``
    measured: bool = False  # ``t1`` comes from its runner, not from the estimate
    slowdown: float = 1.0  # the model's slowdown for ``gpus``
    started_at: float | None = None  # launch of the current attempt
    start_step: int = 0  # ``steps`` when the current attempt was launched
    first_start: float | None = None
    finish: float | None = None
    preemptions: int = 0
    predicted: float | None = None
    first_predicted: float | None = None
    bound: float | None = None
    stop_reason: str | None = None
    cancel_requested: bool = False
    failures: int = 0
    error: str | None = None
    emulated: bool = False
    submission_id: str | None = None
    segments: list[dict] = field(default_factory=list)  # one per run: start, end, gpus, kind

    @property
    def done(self) -> bool:
        return self.state in TERMINAL


class Coordinator:
    """State, decisions and predictions of the live cluster manager.

    ``checkpoint_root/<job id>`` is each job's checkpoint folder (it must be
    reachable from every node). ``clock`` is injectable for tests.
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
        max_failures: int = 3,
        progress_journal_every: float = 5.0,
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.journal = journal
        self.checkpoint_root = Path(checkpoint_root)
        self.clock = clock
        self.workloads = workloads
        self.default_step_time = default_step_time
        self.restart_overhead = restart_overhead  # estimate, refined by measurement
        self.history_path = history_path
        self.max_failures = max_failures
        self.progress_journal_every = progress_journal_every
        self.model = ClusterModel(cluster, policy, placement)
        self.jobs: dict[int, LiveJob] = {}
        self.active: dict[int, LiveJob] = {}  # not terminal, submission order
        self.by_submission: dict[str, int] = {}
        self.measured_t1: dict[str, float] = {}  # workload -> last measured 1-GPU step time
        # Measured / estimated step time, over jobs that have run: estimates of jobs
        # not yet measured are scaled by it (users' guesses are off in one direction).
        self.estimate_ratio = 1.0
        self.next_id = 1
        self.epoch: float | None = None
        self._dirty: set[int] = set()  # jobs whose modelled remaining must be re-synced
        self._progress_logged: dict[int, float] = {}
        self._predictions_stale = True
        self.recovered = self._replay()
        if self.epoch is None:
            self._record("init", None, epoch=self.clock(), policy=policy.describe())

    # -- time ------------------------------------------------------------------
    def now(self) -> float:
        return self.clock() - self.epoch

    def wall(self, t: float | None) -> float | None:
        return None if t is None else self.epoch + t

    # -- journal ---------------------------------------------------------------
    def _record(self, _kind: str, job_id: int | None, **data) -> None:
        t = 0.0 if self.epoch is None else self.now()
        self.journal.append(t, _kind, job_id, data)
        self._apply(t, _kind, job_id, data)

    def _replay(self) -> int:
        """Rebuild state from the journal; return how many jobs lost their runner."""
        for ev in self.journal.events():
            self._apply(ev.t, ev.kind, ev.job_id, ev.data)
        if self.epoch is None:
            return 0
        # Runners die with the coordinator that owns them: their jobs go back to
        # the queue and resume from their last checkpoint.
        lost = [job for job in self.active.values() if job.state in ("running", "stopping")]
        for job in lost:
            self._record("cancelled" if job.cancel_requested else "lost", job.job_id, attempt=job.attempt)
        return len(lost)

    def _apply(self, t: float, kind: str, jid: int | None, data: dict) -> None:
        if kind == "init":
            self.epoch = data["epoch"]
            return
        if kind == "measured":
            self.measured_t1[data["workload"]] = data["t1"]
            return
        if kind == "submit":
            spec = JobFile.model_validate(data["spec"])
            job = LiveJob(jid, spec, t, t1=data["t1"], submission_id=data.get("submission_id"))
            self.jobs[jid] = self.active[jid] = job
            if job.submission_id:
                self.by_submission[job.submission_id] = jid
            self.next_id = max(self.next_id, jid + 1)
            self.model.admit(self._job_spec(job))
            self._dirty.add(jid)
            self._predictions_stale = True
            return
        job = self.jobs[jid]
        if kind == "start":
            job.state, job.attempt, job.gpus = "running", data["attempt"], tuple(data["gpus"])
            job.slowdown, job.started_at, job.reported_at, job.step_time = data["slowdown"], t, None, None
            job.start_step = job.steps
            job.stop_reason = None
            if job.first_start is None:
                job.first_start = t
            job.segments.append({"start": t, "end": None, "gpus": list(job.gpus), "kind": data["kind"]})
        elif kind == "stop":
            job.state, job.stop_reason = "stopping", data["reason"]
        elif kind == "progress":
            self._apply_progress(job, t, data["step"], data["step_time"], data.get("emulated", False))
        elif kind == "cancel":
            job.cancel_requested = True
            if job.job_id in self.model:
                self.model.remove(job.job_id)
            if job.state == "queued":
                self._terminate(job, "cancelled", t)
        elif kind in ("requeue", "lost"):
            if kind == "requeue":
                job.steps = data["step"]
                if data.get("preempted"):
                    job.preemptions += 1
                if data.get("failed"):
                    job.failures += 1
                    job.error = data.get("error")
            self._close_segment(job, t)
            job.state, job.gpus, job.reported_at, job.started_at = "queued", (), None, None
            self._dirty.add(jid)
        elif kind == "demand":
            job.spec = job.spec.model_copy(update=data["update"])
            if jid in self.model:  # re-admitted with the new size; placement re-decides its GPUs
                self.model.remove(jid)
                self.model.engine.prev_alloc.pop(jid, None)  # else the same id's allocation looks unchanged
                self.model.admit(self._job_spec(job))
            self._dirty.add(jid)
        elif kind in TERMINAL:
            if "step" in data:
                job.steps = data["step"]
            job.error = data.get("error", job.error)
            self._terminate(job, kind, t)
        self._predictions_stale = True

    def _terminate(self, job: LiveJob, state: str, t: float) -> None:
        self._close_segment(job, t)
        job.state, job.finish, job.gpus = state, t, ()
        self.active.pop(job.job_id, None)
        if job.job_id in self.model:
            self.model.remove(job.job_id)

    @staticmethod
    def _close_segment(job: LiveJob, t: float) -> None:
        if job.segments and job.segments[-1]["end"] is None:
            job.segments[-1]["end"] = t

    def _apply_progress(self, job: LiveJob, t: float, step: int, step_time: float | None, emulated: bool) -> None:
        if job.reported_at is None and job.started_at is not None and step_time:
            # First report of this attempt: the time not spent on its steps is the restart overhead.
            overhead = max(0.0, t - job.started_at - max(1, step - job.start_step) * step_time)
            self.restart_overhead = 0.7 * self.restart_overhead + 0.3 * overhead
        job.steps, job.reported_at, job.emulated = step, t, emulated or job.emulated
        if step_time and job.gpus:
            job.step_time = step_time
            n = min(len(job.gpus), job.spec.gpus)
            t1 = step_time * self._speedup(job)[n] / job.slowdown
            if not job.measured:
                self.estimate_ratio = 0.7 * self.estimate_ratio + 0.3 * (t1 / job.t1)
                self._dirty.update(j.job_id for j in self.active.values() if not j.measured)
            job.t1, job.measured = t1, True
            if n == 1:  # only a 1-GPU run measures t1 directly, with no speedup model in between
                self.measured_t1[job.spec.workload] = t1
        self._dirty.add(job.job_id)

    # -- the job model ---------------------------------------------------------
    def _speedup(self, job: LiveJob) -> tuple[float, ...]:
        return linear_speedup(job.spec.gpus)

    def _job_spec(self, job: LiveJob) -> JobSpec:
        return JobSpec(
            job_id=job.job_id, submit_time=job.submit, service=job.spec.steps * job.t1,
            max_gpus=job.spec.gpus, speedup=self._speedup(job), min_gpus=job.spec.fewest_gpus,
            model=job.spec.workload, job_class=job.spec.job_class, name=job.spec.name,
        )

    def _remaining(self, job: LiveJob, now: float) -> float:
        """GPU-seconds at one nominal GPU still to do, from the runner's last report."""
        steps_left = job.spec.steps - job.steps
        if job.state == "running" and job.reported_at is not None and job.step_time:
            steps_left -= (now - job.reported_at) / job.step_time
        t1 = job.t1 if job.measured else job.t1 * self.estimate_ratio
        return max(steps_left, ClusterModel.SLIVER) * t1

    def _sync_model(self, now: float) -> None:
        self.model.set_clock(now)
        engine = self.model.engine
        for jid in set(engine.running) | self._dirty:
            job = self.active.get(jid)
            if job is None or jid not in self.model:
                continue
            if job.state == "running" and job.reported_at is not None:
                stall = 0.0
            elif job.state == "running":
                stall = job.started_at + self.restart_overhead
            else:  # queued or stopping: it cannot make progress before a (re)start
                stall = now + self.restart_overhead
            self.model.set_remaining(jid, self._remaining(job, now), stall)
        self._dirty.clear()

    # -- events ------------------------------------------------------------------
    def submit(
        self, raw: dict | JobFile, submission_id: str | None = None, *, refresh: bool = True
    ) -> tuple[int, list[Action]]:
        """Validate, journal and admit a job; return its id and the actions it causes.

        A repeated ``submission_id`` (a client retrying) returns the first job, not a new one.
        ``refresh=False`` leaves the forward play to the caller (a batch of submissions).
        """
        if submission_id and submission_id in self.by_submission:
            return self.by_submission[submission_id], []
        spec = raw if isinstance(raw, JobFile) else parse_job(
            raw, "job spec", capacity=self.cluster.num_gpus, workloads=self.workloads
        )
        if spec.fewest_gpus > self.cluster.num_gpus:
            raise ValueError(f"job spec: gpus: the job needs {spec.fewest_gpus} GPUs; the cluster has {self.cluster.num_gpus}")
        t1 = spec.step_time or self.measured_t1.get(spec.workload, self.default_step_time)
        jid = self.next_id
        self._record("submit", jid, spec=spec.to_dict(), t1=t1, submission_id=submission_id)
        actions = self.decide()
        job = self.jobs[jid]
        job.bound = self._bound(jid)
        if refresh:
            self.refresh_predictions()
        return jid, actions

    def cancel(self, jid: int) -> list[Action]:
        job = self._job(jid)
        if job.done or job.cancel_requested:
            return []
        self._record("cancel", jid)
        actions: list[Action] = []
        if job.state == "running":
            self._record("stop", jid, attempt=job.attempt, reason="cancel")
            actions.append(StopRun(jid, job.attempt, "cancel"))
        return actions + self.decide()

    def progress(self, jid: int, step: int, step_time: float | None, emulated: bool = False) -> None:
        """A runner's report; journaled at most every ``progress_journal_every`` seconds per job."""
        job = self.jobs.get(jid)
        if job is None or job.state not in ("running", "stopping"):
            return
        now = self.now()
        if now - self._progress_logged.get(jid, -math.inf) >= self.progress_journal_every:
            self._progress_logged[jid] = now
            self._record("progress", jid, step=step, step_time=step_time, emulated=emulated)
        else:
            self._apply_progress(job, now, step, step_time, emulated)
            self._predictions_stale = True

    def run_ended(
        self, jid: int, attempt: int, status: str, step: int, step_time: float | None = None,
        error: str | None = None,
    ) -> list[Action]:
        """A runner exited: finished its budget, stopped on request, or failed (or was killed)."""
        job = self.jobs.get(jid)
        if job is None or job.attempt != attempt or job.state not in ("running", "stopping"):
            return []  # a stale outcome (an attempt already written off)
        if step_time and job.gpus:
            self._apply_progress(job, self.now(), step, step_time, job.emulated)
        if status == "finished":
            self._record("finished", jid, step=step)
            if job.spec.workload in self.measured_t1:
                self._record("measured", None, workload=job.spec.workload, t1=self.measured_t1[job.spec.workload])
            self._write_history(job)
        elif job.cancel_requested:
            self._record("cancelled", jid, step=step)
        elif status == "failed" and job.state == "running" and job.failures + 1 >= self.max_failures:
            self._record("failed", jid, step=step, error=error)
        else:
            unexpected = status == "failed" and job.state == "running"
            self._record(
                "requeue", jid, step=step, preempted=job.state == "stopping", failed=unexpected, error=error,
            )
        return self.decide()

    def tick(self) -> list[Action]:
        """Called periodically: act when the policy asked for a review (a lease or round expiry)."""
        review = self.model.engine.review_at
        if review is not None and review <= self.now():
            return self.decide()
        return []

    # -- decisions ---------------------------------------------------------------
    def decide(self) -> list[Action]:
        """Run policy + placement on the current state and return the diff as actions."""
        now = self.now()
        self._sync_model(now)
        self.model.reallocate()
        actions: list[Action] = []
        held: dict[int, int] = {}
        for job in self.active.values():
            if job.state in ("running", "stopping"):
                for g in job.gpus:
                    held[g] = job.job_id
        for job in list(self.active.values()):
            if job.state != "running" or job.cancel_requested:
                continue
            want = self.model.gpus(job.job_id)
            if want != job.gpus:
                reason = "preempt" if not want else "migrate" if len(want) == len(job.gpus) else "resize"
                self._record("stop", job.job_id, attempt=job.attempt, reason=reason)
                actions.append(StopRun(job.job_id, job.attempt, reason))
        for job in list(self.active.values()):
            if job.state != "queued":
                continue
            want = self.model.gpus(job.job_id)
            if not want or any(g in held for g in want):
                continue  # not scheduled, or its GPUs are still being vacated
            for g in want:
                held[g] = job.job_id
            start = self._start(job, want)
            if start is not None:
                actions.append(start)
        return actions

    def _start(self, job: LiveJob, gpus: tuple[int, ...]) -> StartRun | None:
        """Journal the start; the action to launch a runner (None for an external executor, which polls)."""
        last = job.segments[-1]["gpus"] if job.segments else None
        if last is None and job.steps == 0:
            kind = "start"
        elif last is None or sorted(last) == list(gpus):
            kind = "resume"
        else:
            kind = "migrate" if len(last) == len(gpus) else "resize"
        attempt = job.attempt + 1
        slowdown = self.model.slowdown(job.job_id)
        self._record("start", job.job_id, attempt=attempt, gpus=list(gpus), kind=kind, slowdown=slowdown)
        if job.spec.executor == "external":
            return None
        request = RunRequest(
            job_id=str(job.job_id), workload=job.spec.workload, total_steps=job.spec.steps,
            gpus=tuple(self.slot(g) for g in gpus), checkpoint_dir=str(self.checkpoint_root / str(job.job_id)),
            params=dict(job.spec.params), slowdown=slowdown, checkpoint_every=job.spec.checkpoint_every,
            attempt=attempt,
        )
        return StartRun(job.job_id, kind, request)

    # -- external executors (a Ray Tune sweep runs the job on the GPUs it is given) --
    def assignment(self, jid: int) -> dict:
        """What an external executor may use: ``gpus`` of the current ``attempt`` while running;
        while stopping, only ``target`` (the GPUs it keeps), then it acknowledges with :meth:`run_ended`."""
        job = self._job(jid)
        target = self.model.gpus(jid) if job.state == "stopping" and jid in self.model else job.gpus
        return {
            "id": jid, "state": job.state, "attempt": job.attempt, "steps": job.steps,
            "gpus": [self.resource(g) for g in job.gpus], "target": [self.resource(g) for g in target],
        }

    def set_demand(self, jid: int, *, gpus: int | None = None, steps: int | None = None) -> list[Action]:
        """An external job changed size (a sweep's trials stopped early or finished): new most
        GPUs and total steps; its GPUs go back to the policy at once."""
        job = self._job(jid)
        update = {k: v for k, v in (("gpus", gpus), ("steps", steps)) if v is not None}
        if job.done or not update:
            return []
        if "gpus" in update:
            update["gpus"] = max(1, int(update["gpus"]))
            if job.spec.min_gpus is not None:
                update["min_gpus"] = min(job.spec.min_gpus, update["gpus"])
        if "steps" in update:
            update["steps"] = max(1, int(update["steps"]))
        if all(getattr(job.spec, k) == v for k, v in update.items()):
            return []
        self._record("demand", jid, update=update)
        actions = self.decide()
        self.refresh_predictions(force=True)
        return actions

    def resource(self, gid: int) -> str:
        """The Ray custom resource that pins work to GPU ``gid``."""
        s = self.slot(gid)
        return gpu_resource(s.node, s.index)

    def slot(self, gid: int) -> GPUSlot:
        return GPUSlot(self.cluster.node_of(gid).name, self.cluster.gpu(gid).index)

    # -- predictions -------------------------------------------------------------
    def refresh_predictions(self, force: bool = False) -> None:
        """Play the current state forward (same policy and placement, no arrivals)."""
        if not (force or self._predictions_stale) or not self.active:
            return
        self._sync_model(self.now())
        for jid, t in self.model.predict().items():
            job = self.active.get(jid)
            if job is None:
                continue
            job.predicted = t
            if job.first_predicted is None:
                job.first_predicted = t
        self._predictions_stale = False

    def _bound(self, jid: int) -> float | None:
        """The policy's worst-case finish, plus the job's own start-up if it has not started training yet."""
        if jid not in self.model:
            return None
        bound = self.model.bound(jid)
        job = self.jobs[jid]
        if bound is not None and job.reported_at is None:
            bound += self.restart_overhead
        return bound

    def predict(self, jid: int) -> dict:
        """The job's current prediction and bound (absolute seconds); cheap: no forward play."""
        job = self._job(jid)
        if not job.done:
            self._sync_model(self.now())
            bound = self._bound(jid)
            job.bound = bound if bound is not None else job.bound
        return {
            "id": jid, "state": job.state, "predicted_completion": self.wall(job.finish if job.done else job.predicted),
            "bound": self.wall(job.bound), "first_predicted": self.wall(job.first_predicted),
        }

    # -- views -------------------------------------------------------------------
    def _job(self, jid: int) -> LiveJob:
        job = self.jobs.get(jid)
        if job is None:
            raise UnknownJobError(f"no job with id {jid}")
        return job

    def job_view(self, job: LiveJob) -> dict:
        w = self.wall
        return {
            "id": job.job_id, "name": job.spec.name or f"{job.spec.workload}-{job.job_id}",
            "workload": job.spec.workload, "class": job.spec.job_class, "state": job.state,
            "gpus": [f"{s.node}:{s.index}" for s in map(self.slot, job.gpus)],
            "demand": [job.spec.fewest_gpus, job.spec.gpus], "steps": job.steps, "total_steps": job.spec.steps,
            "step_time": job.step_time, "emulated": job.emulated, "submit": w(job.submit),
            "start": w(job.first_start), "finish": w(job.finish), "predicted_completion": w(job.predicted),
            "first_predicted": w(job.first_predicted), "bound": w(job.bound), "preemptions": job.preemptions,
            "attempts": job.attempt, "error": job.error,
            "segments": [
                {**s, "start": w(s["start"]), "end": w(s["end"]),
                 "gpus": [f"{x.node}:{x.index}" for x in map(self.slot, s["gpus"])]}
                for s in job.segments
            ],
        }

    def status(self) -> dict:
        return {
            "now": self.clock(), "epoch": self.epoch, "policy": self.policy.describe(),
            "gpus": self.cluster.num_gpus, "restart_overhead": self.restart_overhead,
            "jobs": [self.job_view(j) for j in self.jobs.values()],
        }

    # -- history -----------------------------------------------------------------
    def _write_history(self, job: LiveJob) -> None:
        if self.history_path is None:
            return
        from workloads.history import HistoryRecord, append_history

        append_history(self.history_path, HistoryRecord(
            job_id=job.job_id, submit_time=self.wall(job.submit), gpus=job.spec.gpus,
            service=job.spec.steps * job.t1, min_gpus=job.spec.fewest_gpus, iteration_time=job.t1,
            model=job.spec.workload, job_class=job.spec.job_class,
            speedup=self._speedup(job), finish_time=self.wall(job.finish),
        ))
