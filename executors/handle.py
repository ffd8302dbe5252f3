"""A launched run: its rank actors and the ref of its outcome, the same for every kind of runner."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import ray

from pcs_ray.executors import rank_death
from pcs_ray.executors.checkpoint import peek_step
from pcs_ray.executors.rendezvous import rendezvous_address  # noqa: F401  (re-exported)
from pcs_ray.contract import RunOutcome, RunRequest


def rank_log(request: RunRequest, rank: int) -> Path | None:
    """Where a user run's rank writes its stdout and stderr (None: a built-in run's go to Ray's worker logs)."""
    return Path(request.log_dir) / f"rank-{rank}.log" if request.log_dir else None


def failed_outcome(request: RunRequest, error: str, **extra) -> RunOutcome:
    """A failed run: it resumes from its newest checkpoint, whose step we report."""
    return RunOutcome(job_id=request.job_id, status="failed", step=durable_step(request), error=error,
                      gpus=tuple(request.gpus), **extra)


def durable_step(request: RunRequest) -> int:
    """The step of the job's newest checkpoint where its next run restores from: the cluster's storage, or
    ``checkpoint_dir`` without one (0: none, or a storage that stays unreachable)."""
    if not request.storage:
        return peek_step(request.checkpoint_dir) or 0
    from pcs_ray.storage import StorageError, open_storage
    from pcs_ray.train.remote_store import remote_step

    try:
        return remote_step(open_storage(request.storage, retry_s=STEP_RETRY_S), request.job_id) or 0
    except StorageError:
        return 0


#: Seconds a failed run's watcher waits for an unreachable storage to say the step it resumes from.
STEP_RETRY_S = 30.0


#: how long a rank's watcher waits for Ray to learn why the rank's actor died
DEATH_CAUSE_WAIT_S = 5.0


def death_of(actor, exc: BaseException) -> BaseException:
    """``exc``, or, where Ray raised it before it knew why the rank's actor died (its message is then its bare
    first line), the error a call to the dead actor raises once Ray knows (asked for ``DEATH_CAUSE_WAIT_S``
    at most): that is what tells a SIGKILL from ``ray.kill`` or a node's death (``rank_death``)."""
    died = ray.exceptions.ActorDiedError
    if not (isinstance(exc, died) and str(exc) == died.BASE_ERROR_MSG):
        return exc
    deadline = time.monotonic() + DEATH_CAUSE_WAIT_S
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=max(0.1, deadline - time.monotonic()))
            return exc  # it answers: restarted, so this error is all there is
        except died as again:
            if str(again) != died.BASE_ERROR_MSG:
                return again
        except Exception:
            return exc
        time.sleep(0.2)
    return exc


@ray.remote(num_cpus=0, max_retries=0)
def watch_ranks(request: RunRequest, actors: list, runs: list) -> RunOutcome:
    """Wait for every rank; on the first failure kill the other ranks (they would block in collectives)."""
    pending = list(runs)
    outcomes: dict[int, RunOutcome] = {}
    try:
        while pending:
            [ready], pending = ray.wait(pending, num_returns=1)
            rank = runs.index(ready)
            try:
                outcomes[rank] = ray.get(ready)
            except Exception as exc:
                why = death_of(actors[rank], exc)
                outcomes[rank] = failed_outcome(request, rank_death.describe(rank, why, rank_log(request, rank)))
            if outcomes[rank].status == "failed":
                break
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
    failed = [o for o in outcomes.values() if o.status == "failed"]
    if failed:
        return failed_outcome(request, failed[0].error, timings=failed[0].timings, fatal=failed[0].fatal)
    return outcomes[0]


@dataclass
class RunHandle:
    """A running job: its runner actors and the ref of its outcome."""

    request: RunRequest
    actors: list
    done: ray.ObjectRef
    stop_args: tuple = ()  # what each actor's request_stop takes (a warm runner: which run to stop)
    runner: str = "cold"  # "warm": pooled runners took the run; "warming": pooled ones still starting; "cold": started for it

    @property
    def job_id(self) -> str:
        return self.request.job_id

    def request_stop(self) -> None:
        """Ask every rank to checkpoint at the next step boundary and exit ("preempted"); returns at once."""
        for actor in self.actors:
            actor.request_stop.remote(*self.stop_args)

    def kill(self) -> None:
        """Hard-kill every rank; ``done`` then resolves to "failed" at the last checkpoint's step."""
        for actor in self.actors:
            ray.kill(actor, no_restart=True)

    def outcome(self, timeout: float | None = None) -> RunOutcome:
        return ray.get(self.done, timeout=timeout)

    @property
    def warm(self) -> bool:
        return bool(self.stop_args)
