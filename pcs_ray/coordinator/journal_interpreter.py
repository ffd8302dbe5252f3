"""The journal's interpreter: what each journaled event does to the jobs.

The live state (:mod:`.state`) applies every event through it as it journals it, and replays a
journal through it after a restart; ``pcs-ray report`` replays a journal through it alone. What a
job's event does beyond the job (to the cluster model, the speed measurements) the live state adds in
the hooks, which do nothing here; the events of no job that change no job (a policy set, a tenants
file, an older coordinator's measurement) are the live state's alone.
"""

from __future__ import annotations

from pcs_ray.contract import TERMINAL, JobStatus
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.jobs.jobfile import JobFile


class JournalInterpreter:
    """The jobs as the journal's events leave them, and the journal's epoch (``time.time()`` at its start)."""

    def __init__(self) -> None:
        self.jobs: dict[int, LiveJob] = {}
        self.active: dict[int, LiveJob] = {}  # not terminal, submission order
        self.holders: dict[int, LiveJob] = {}  # the jobs that hold GPUs (running or stopping), as events leave them
        self.by_submission: dict[str, int] = {}
        self.next_id = 1
        self.epoch: float | None = None
        self.started_with: dict | None = None  # the parameters of the policy the latest start journaled
        self.forgotten = 0  # ended jobs whose events retention deleted (``pcs_ray.coordinator.retention``)

    def apply(self, t: float, kind: str, jid: int | None, data: dict) -> None:
        """One event's effect (``t``: seconds since the epoch)."""
        if kind == "init":
            self.epoch, self.started_with = data["epoch"], data.get("policy")
        elif kind == "config":
            if data["source"] == "start":
                self.started_with = data["policy"]
        elif kind == "compacted":  # ended jobs' events were deleted: their ids stay used
            self.next_id = max(self.next_id, data["next_id"])
            self.forgotten = max(self.forgotten, data["jobs"])
            for forgotten in data.get("now", ()):
                self.forget_job(forgotten)
        elif kind == "submit":
            job = LiveJob(jid, JobFile.model_validate(data["spec"]), t, t1=data["t1"],
                          submission_id=data.get("submission_id"))
            self.jobs[jid] = self.active[jid] = job
            if job.submission_id:
                self.by_submission[job.submission_id] = jid
            self.next_id = max(self.next_id, jid + 1)
            self._admitted(job)
        elif jid is not None:  # other events of no job (the live state's own, or of a kind unknown here) change no job
            job = self.jobs[jid]
            self._apply_to_job(t, kind, job, data)
            if job.gpus:
                self.holders[jid] = job
            else:
                self.holders.pop(jid, None)

    def _apply_to_job(self, t: float, kind: str, job: LiveJob, data: dict) -> None:
        if kind == "start":
            job.launched(t, data["attempt"], tuple(data["gpus"]), data["slowdown"], data["kind"])
        elif kind == "runner":
            if job.attempt == data["attempt"]:
                job.runner = data["runner"]
        elif kind == "stop":
            job.stopping(data["reason"], t, data.get("why"))
        elif kind == "skip":  # RUSH held the start back: the count survives a restart
            job.skips, job.skip_reason = data["count"], data["reason"]
            self._skipped(job)
        elif kind == "progress":  # a runner's report: the step it reached and, where measured, its time per step
            first = job.reported_at is None and job.started_at is not None
            step, step_time = data["step"], data["step_time"]
            job.steps, job.reported_at, job.emulated = step, t, data.get("emulated", False) or job.emulated
            if step_time and job.gpus:
                job.step_time = step_time
                job.paced(t, step)
            self._reported(job, t, step_time, first)
        elif kind == "telemetry":
            job.note_reading(data["attempt"], data["gpu"], data["reading"])
        elif kind == "predicted":  # the forecast made at submission
            if job.first_predicted is None:
                job.first_predicted = data["completion"]
        elif kind == "cancel":
            job.cancel_requested = True
            self._withdrawn(job)
            if job.state == JobStatus.QUEUED:
                self._terminate(job, JobStatus.CANCELLED, t)
        elif kind == "ending":  # a guard stops the job's run for good (time limit, hang)
            job.ending = {k: data[k] for k in ("state", "code", "reason")}
            self._withdrawn(job)
        elif kind in ("requeue", "lost"):
            job.emulated = job.emulated or data.get("emulated", False)
            if kind == "requeue":
                job.steps = data["step"]
                job.lost_steps += data.get("lost_steps", 0)
                if data.get("preempted"):
                    job.preemptions += 1
                    if job.stop_at is not None:
                        self._stop_took(job, t - job.stop_at)
                if data.get("failed"):
                    if data.get("fatal"):  # the loop raised or hung, and is retried under its max_failures
                        job.code_failures += 1
                    else:
                        job.failures += 1
                    job.error = data.get("error")
            job.requeued(t, data.get("error") if data.get("failed") else None)
            self._requeued(job)
        elif kind == "demand":
            job.spec = job.spec.model_copy(update=data["update"])
            self._resized(job)
        elif kind in TERMINAL:
            job.emulated = job.emulated or data.get("emulated", False)
            if "step" in data:
                job.steps = data["step"]
            job.error = data.get("error", job.error)
            job.note = data.get("note", job.note)
            job.metrics = data.get("metrics", job.metrics)
            job.checkpoint = data.get("checkpoint", job.checkpoint)
            job.close_segment(t, data.get("error"))
            job.end_code = data.get("code", job.end_code)
            self._terminate(job, JobStatus(kind), t)

    def forget_job(self, jid: int) -> None:
        """An ended job leaves the state (retention deleted its events); a job that has not ended stays."""
        job = self.jobs.get(jid)
        if job is None or not job.done:
            return
        del self.jobs[jid]
        if job.submission_id and self.by_submission.get(job.submission_id) == jid:
            del self.by_submission[job.submission_id]
        self._forgotten(jid)

    def _terminate(self, job: LiveJob, state: JobStatus, t: float) -> None:
        job.ended(state, t)
        self.active.pop(job.job_id, None)
        self._withdrawn(job)

    # -- hooks: what the live state does beyond the jobs -------------------------------------
    def _admitted(self, job: LiveJob) -> None:
        """A job was submitted."""

    def _withdrawn(self, job: LiveJob) -> None:
        """A job no longer competes for GPUs (cancelled, or ended)."""

    def _reported(self, job: LiveJob, t: float, step_time: float | None, first_of_run: bool) -> None:
        """A runner reported ``job.steps`` at ``t`` (``first_of_run``: its run's first report since launch)."""

    def _skipped(self, job: LiveJob) -> None:
        """A job's start was held back once more (its ``skips`` count)."""

    def _stop_took(self, job: LiveJob, seconds: float) -> None:
        """A requested stop took ``seconds`` until the run ended."""

    def _requeued(self, job: LiveJob) -> None:
        """A job's run ended without finishing it: it waits in the queue again."""

    def _resized(self, job: LiveJob) -> None:
        """A job's demand (``spec``) changed."""

    def _forgotten(self, jid: int) -> None:
        """An ended job was forgotten (retention)."""


__all__ = ["JournalInterpreter"]
