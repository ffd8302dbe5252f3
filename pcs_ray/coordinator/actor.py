"""The coordinator as a detached, named, restartable Ray actor: the thin edge around the core.

Calls (the :class:`~pcs_ray.contract.CoordinatorAPI`, see :mod:`.host`) and a
background loop share one lock around the Ray-free core. The loop waits on
the runners' ``done`` refs with a short timeout and never on a runner
itself, so a slow or dead runner cannot stall decisions. Runners are owned
by this actor; if it dies they die with it, and the restarted actor replays
its journal and resumes their jobs from their checkpoints. A refusal raised
by a call reaches the caller as a ``RayTaskError`` whose ``cause`` is the
typed error (``pcs_ray.client.Client`` re-raises it).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from dataclasses import dataclass, replace

import ray

from pcs_ray.contract import Action, CoordinatorError, StartRun, StopRun
from pcs_ray.coordinator.config import CoordinatorConfig, build_core
from pcs_ray.coordinator.host import CoordinatorHost

NAMESPACE = "pcs-ray"
ACTOR_NAME = "coordinator"
LOOP_WAIT_S = 0.2
REFRESH_EVERY_S = 1.0  # progress reports alone re-run the forward play at most this often

log = logging.getLogger("pcs_ray.coordinator")


@dataclass
class _Run:
    attempt: int
    handle: object  # executors.launch.RunHandle
    kill_at: float | None = None


def _load_launcher(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class CoordinatorService(CoordinatorHost):
    """The actor body: the host's calls, plus runners launched and collected by a background loop."""

    def __init__(self, config: dict) -> None:
        self.config = CoordinatorConfig.from_dict(config)
        super().__init__(build_core(self.config))
        self.launch = _load_launcher(self.config.launcher)
        self.runs: dict[int, _Run] = {}
        self.draining = False
        self.me = ray.get_runtime_context().current_actor
        self._resume()
        self._loop_thread = threading.Thread(target=self._loop, name="pcs-ray-coordinator", daemon=True)
        self._loop_thread.start()

    # -- carrying out actions ------------------------------------------------------
    def _execute(self, actions: list[Action]) -> None:
        while actions:
            action = actions.pop(0)
            if isinstance(action, StopRun):
                run = self.runs.get(action.job_id)
                if run is not None and run.attempt == action.attempt and run.kill_at is None:
                    run.handle.request_stop()
                    run.kill_at = time.monotonic() + self.config.grace_s
            elif isinstance(action, StartRun) and not self.draining:
                request = replace(action.request, reporter=self.me)
                try:
                    self.runs[action.job_id] = _Run(request.attempt, self.launch(request))
                except Exception as e:  # a launch that cannot even start counts as a failed run
                    log.exception("launching job %s failed", action.job_id)
                    job = self.core.jobs[action.job_id]
                    actions += self.core.run_ended(action.job_id, request.attempt, "failed", job.steps, error=str(e))

    def _collect(self, ready: list) -> list[Action]:
        actions: list[Action] = []
        by_ref = {run.handle.done: jid for jid, run in self.runs.items()}
        for ref in ready:
            jid = by_ref.get(ref)
            if jid is None:
                continue
            run = self.runs.pop(jid)
            try:
                outcome = ray.get(ref, timeout=0)
                status, step, step_time, error = outcome.status, outcome.step, outcome.step_time_s, outcome.error
                if outcome.emulated:
                    self.core.jobs[jid].emulated = True
            except Exception as e:  # the runner died or was killed: resume from its last checkpoint
                status, step, step_time, error = "failed", self.core.jobs[jid].steps, None, type(e).__name__
            actions += self.core.run_ended(jid, run.attempt, status, step, step_time, error)
        return actions

    def _loop(self) -> None:
        last_refresh = 0.0
        while True:
            with self.lock:
                refs = [run.handle.done for run in self.runs.values()]
            ready: list = []
            if refs:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=LOOP_WAIT_S)
            else:
                time.sleep(LOOP_WAIT_S)
            with self.lock:
                try:
                    actions = self._collect(ready)
                    now = time.monotonic()
                    for run in self.runs.values():
                        if run.kill_at is not None and now >= run.kill_at:
                            run.handle.kill()
                            run.kill_at = float("inf")
                    actions += self.core.tick()
                    self._execute(actions)
                    if ready or actions or now - last_refresh >= REFRESH_EVERY_S:
                        self.core.refresh_predictions()
                        last_refresh = now
                except Exception:  # keep deciding: one bad event must not stop the cluster
                    log.exception("coordinator loop")

    # -- the actor's own calls (predictions they read are at most REFRESH_EVERY_S old) ------
    def drain(self, timeout_s: float = 60.0) -> int:
        """Stop every runner at a checkpoint (for ``pcs-ray stop``); returns how many were still running."""
        with self.lock:
            self.draining = True
            for run in self.runs.values():
                run.handle.request_stop()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if not self.runs:
                    return 0
            time.sleep(LOOP_WAIT_S)
        with self.lock:
            for run in self.runs.values():
                run.handle.kill()
            return len(self.runs)

    def ping(self) -> dict:
        return {"jobs": len(self.core.jobs), "recovered": self.core.recovered, "epoch": self.core.epoch,
                "pid": os.getpid()}


def start_coordinator(config: CoordinatorConfig, *, pin_here: bool = True, strategy=None):
    """Start the coordinator (or return the running one): detached, named, restarted on failure.

    ``pin_here`` keeps it on this node, where its state folder (journal) lives; ``strategy`` (a Ray
    scheduling strategy) puts it elsewhere (``pcs-ray up``: on the head node). With no policy in
    ``config``, the operator's choice is read here (see ``config.choose_policy``) and travels inline.
    """
    config = config.resolved()
    options = dict(
        name=ACTOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=-1, max_concurrency=64, num_cpus=0,
    )
    if strategy is not None:
        options["scheduling_strategy"] = strategy
    elif pin_here:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    actor = ray.remote(CoordinatorService).options(**options).remote(config.to_dict())
    ray.get(actor.ping.remote())
    return actor


def get_coordinator():
    """The running coordinator; a :class:`CoordinatorError` (one line for the CLI) when there is none."""
    try:
        return ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    except ValueError:
        raise CoordinatorError("no pcs-ray coordinator is running on this Ray cluster (start one with `pcs-ray start`)") from None
