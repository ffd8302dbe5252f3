"""The coordinator as a detached, named, restartable Ray actor: the thin edge around the core.

Calls (the :class:`~pcs_ray.contract.CoordinatorAPI`, see :mod:`.host`) and a
background loop share one lock around the Ray-free core. The loop waits on
the runners' ``done`` refs with a short timeout and never on a runner
itself, so a slow or dead runner cannot stall decisions.

If this actor dies, the warm runners (detached, :mod:`pcs_ray.executors.pool`) keep
training. The restarted actor replays its journal, asks each named runner
what it runs (job, attempt, step), adopts the runs its journal says are
running or stopping (their progress reports come here again, a preemption
that was in flight is asked again, their outcomes are collected), stops the
runs it does not know at a checkpoint, and sends the jobs whose runs are gone
(cold runners die with the actor that owns them) back to the queue to resume
from their checkpoints. A refusal raised
by a call reaches the caller as a ``RayTaskError`` whose ``cause`` is the
typed error (``pcs_ray.client.Client`` re-raises it). The same calls are
served over HTTP from this process (:mod:`.http_advert`), for clients
outside the cluster.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from dataclasses import dataclass, replace

import ray

from pcs_ray.api.actor_ref import ACTOR_NAME, NAMESPACE
from pcs_ray.contract import Action, EndCode, JobStatus, StartRun, StopRun
from pcs_ray.coordinator.config import CoordinatorConfig, build_core
from pcs_ray.coordinator.gc_pauses import freeze_start_up
from pcs_ray.coordinator.host import CoordinatorHost
from pcs_ray.coordinator.http_advert import serve_api
from pcs_ray.coordinator.metrics_export import RayMetrics, readings
from pcs_ray.dashboard.markup import PREFIX as DASHBOARD

DEFAULT_LAUNCHER = CoordinatorConfig.launcher  # the cold launcher; with it, warm_pool switches to the pool
LOOP_WAIT_S = 0.2
NODE_CHECK_S = 2.0  # how often the loop looks for nodes Ray declared dead
NODE_DEATH_WAIT_S = 45.0  # a runner death is held this long at most while Ray decides whether its node died
REFRESH_EVERY_S = 1.0  # every job's forecast is refreshed at most this often (counted from the end of the last play)
REFRESH_YIELD_S = 30.0  # a refresh play stands aside for calls at most this long in all (CallLock.yielder)
# ... and keeps at least this share of its time for itself: under a steady stream of submissions it ends
# within about twice its own running time, so its forecasts stay younger than Coordinator.branch_max_age_s
REFRESH_SHARE = 0.5
# Readings for Prometheus walk every job (a part at a time under the lock): at most this often, which is how
# often Ray's metrics agent exports them by default (metrics_report_interval_ms)
METRICS_EVERY_S = 10.0

log = logging.getLogger("pcs_ray.coordinator")


@dataclass
class _Run:
    attempt: int
    handle: object  # pcs_ray.executors.launch.RunHandle
    kill_at: float | None = None


@dataclass
class _Suspect:
    """A run whose runner died on its own: a node loss or a single crash, told apart before it is recorded."""

    run: _Run
    outcome: tuple  # status, step, step_time, error
    since: float
    probes: list | None  # one tiny task pinned to each node of the run; None: a node is already gone
    emulated: bool = False  # the run said it emulated a GPU


@ray.remote(num_cpus=0, max_retries=0)
def _alive() -> bool:
    return True


def _load_launcher(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def start_mirror(config: CoordinatorConfig):
    """The journal's mirror in the cluster's storage, running (None: the cluster has no storage)."""
    if not config.storage:
        return None
    from pcs_ray.coordinator.journal_mirror import JournalMirror
    from pcs_ray.storage import open_storage

    mirror = JournalMirror(open_storage(config.storage), config.journal_path)
    mirror.start()
    return mirror


class CoordinatorService(CoordinatorHost):
    """The actor body: the host's calls, plus runners launched and collected by a background loop."""

    def __init__(self, config: dict) -> None:
        self.config = _on_alive_nodes(CoordinatorConfig.from_dict(config))
        super().__init__(build_core(self.config, keep_runs=True))
        self.mirror = start_mirror(self.config)
        self.launch = _load_launcher(self.config.launcher)
        self.pool = None
        if self.config.warm_pool and self.config.launcher == DEFAULT_LAUNCHER:
            from pcs_ray.executors.pool import WarmPool

            cluster = self.core.cluster
            slots = [self.core.slot(g) for g in cluster.gpu_ids()]
            self.pool = WarmPool(slots, max_per_node=self.config.warm_runners_per_node, keep_runs=True)
            self.launch = self.pool.launch
            self.core.speed.set_warm_share(self.pool.warm_share())
        self.runs: dict[int, _Run] = {}
        self.suspects: dict[int, _Suspect] = {}
        self.draining = False
        self.me = ray.get_runtime_context().current_actor
        self.metrics = _metrics()
        self._adopt_runs()
        self._resume()
        self._loop_thread = threading.Thread(target=self._loop, name="pcs-ray-coordinator", daemon=True)
        self._loop_thread.start()
        try:  # the API is a convenience: clients fall back to Ray, so a failure here must not stop the actor
            self.api = serve_api(self, self.config)
        except Exception:
            log.exception("the HTTP API is off")
            self.api = None
        self.gc_pauses = freeze_start_up()  # a full collection walks what the coordinator allocates from now on

    # -- a restart -----------------------------------------------------------------
    def _adopt_runs(self) -> None:
        """Take over the runs a previous incarnation left training on warm runners (see the module docstring)."""
        alive: dict[int, int | None] = {}
        keep = []
        found = self.pool.survivors() if self.pool is not None and self.core.holding() else {}
        for job in self.core.holding():
            if job.spec.executor == "external":
                continue
            token = (str(job.job_id), job.attempt)
            states = [found.get(self.core.slot(g)) for g in job.gpus]
            if not states or any(s is None or not _holds(s, token) for s in states):
                continue
            request = replace(self.core.current_request(job.job_id), reporter=self.me)
            try:
                handle = self.pool.reattach(request)
            except Exception:
                log.exception("adopting the run of job %s", job.job_id)
                continue
            run = self.runs[job.job_id] = _Run(job.attempt, handle)
            if job.state == JobStatus.STOPPING:  # a preemption (or cancel) in flight when the last one died
                handle.request_stop()
                run.kill_at = time.monotonic() + self.config.grace_s
            steps = [s["step"] for s in states if s["current"] is not None and tuple(s["current"]) == token]
            ended = [s["ended"][token][1] for s in states if token in s["ended"]]
            alive[job.job_id] = min(steps + ended) if steps or ended else None
            keep.append(token)
        with self.lock:
            lost = self.core.settle_runs(alive)
        if self.pool is not None:
            self.pool.release(keep)
        if alive or lost:
            log.warning("restart: adopted %d run(s) still training, %d job(s) lost their runner", len(alive), lost)

    # -- carrying out actions ------------------------------------------------------
    def _execute(self, actions: list[Action]) -> None:
        while actions:
            action = actions.pop(0)
            if isinstance(action, StopRun):
                run = self.runs.get(action.job_id)
                if run is not None and run.attempt == action.attempt and action.reason == EndCode.HANG:
                    run.handle.kill()  # a hung run cannot checkpoint; its ranks dumped their stacks already
                    run.kill_at = float("inf")
                elif run is not None and run.attempt == action.attempt and run.kill_at is None:
                    run.handle.request_stop()
                    run.kill_at = time.monotonic() + self.config.grace_s
            elif isinstance(action, StartRun) and not self.draining:
                request = replace(action.request, reporter=self.me)
                try:
                    self.runs[action.job_id] = _Run(request.attempt, self.launch(request))
                    self.core.runner_kind(action.job_id, request.attempt, getattr(self.runs[action.job_id].handle, "runner", "cold"))
                except Exception as e:  # a launch that cannot even start counts as a failed run
                    log.exception("launching job %s failed", action.job_id)
                    job = self.core.jobs[action.job_id]
                    actions += self.core.run_ended(action.job_id, request.attempt, "failed", job.steps, error=str(e))

    def _collect(self, ready: list) -> bool:
        """Record the runs that ended; whether any of it changed the state (then decide once, for all)."""
        changed = False
        by_ref = {run.handle.done: jid for jid, run in self.runs.items()}
        for ref in ready:
            jid = by_ref.get(ref)
            if jid is None:
                continue
            run = self.runs.pop(jid)
            fatal, note, metrics, emulated = False, None, None, False
            try:
                outcome = ray.get(ref, timeout=0)
                status, step, step_time, error = outcome.status, outcome.step, outcome.step_time_s, outcome.error
                fatal = bool(getattr(outcome, "fatal", False))
                note = next((n for n in outcome.notes if n.startswith("returned early")), None)
                metrics = getattr(outcome, "metrics", None)
                emulated = bool(outcome.emulated)
                self.count_overruns(jid, run.attempt, getattr(outcome, "overruns", 0))
                if getattr(outcome, "late_steps", 0):
                    self.late_steps[jid] = self.late_steps.get(jid, 0) + int(outcome.late_steps)
            except Exception as e:  # the runner died or was killed: resume from its last checkpoint
                status, step, step_time, error = "failed", self.core.jobs[jid].steps, None, type(e).__name__
            if status == "failed" and run.kill_at is None and not fatal and _a_death(error):
                # Not a training error: a crash, or its node died and Ray has not said so yet. A node loss
                # must not count as the job's failure (nor send it back to the dead node), so wait to know.
                self.suspects[jid] = _Suspect(run, (status, step, step_time, error), time.monotonic(), _probe(run),
                                              emulated)
                continue
            changed |= self.core.record_run_end(jid, run.attempt, status, step, step_time, error, fatal=fatal, note=note,
                                                metrics=metrics, emulated=emulated)
        return changed

    def _settle_suspects(self) -> bool:
        """Record the deaths whose nodes answered (a lone crash), or that waited too long; whether any did."""
        changed = False
        for jid, sus in list(self.suspects.items()):
            answered = sus.probes is not None and len(ray.wait(sus.probes, num_returns=len(sus.probes), timeout=0)[0]) == len(sus.probes)
            if answered:
                try:
                    ray.get(sus.probes, timeout=0)
                except Exception:
                    answered = False
            if answered or time.monotonic() - sus.since > NODE_DEATH_WAIT_S:
                del self.suspects[jid]
                changed |= self.core.record_run_end(jid, sus.run.attempt, *sus.outcome, emulated=sus.emulated)
        return changed

    def _loop(self) -> None:
        last_refresh = last_node_check = 0.0
        last_metrics = -METRICS_EVERY_S  # the first readings go out after the first refresh
        while True:
            if time.monotonic() - last_node_check >= NODE_CHECK_S:
                last_node_check = time.monotonic()
                lost = _lost_nodes(self.config)
                if lost:
                    try:
                        self._lose_nodes(lost)
                    except Exception:
                        log.exception("recovering from the loss of node(s) %s", sorted(lost))
            with self.lock:
                refs = [run.handle.done for run in self.runs.values()]
            ready: list = []
            if refs:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=LOOP_WAIT_S)
            else:
                time.sleep(LOOP_WAIT_S)
            due, play = False, None
            with self.lock:
                try:
                    ended = self._collect(ready)
                    ended = self._settle_suspects() or ended
                    actions = self.core.decide() if ended else []
                    now = time.monotonic()
                    for run in self.runs.values():
                        if run.kill_at is not None and now >= run.kill_at:
                            run.handle.kill()
                            run.kill_at = float("inf")
                    actions += self.core.tick()
                    self._execute(actions)
                    # A detached play shares the interpreter with the calls it no longer blocks: plays
                    # start at most every REFRESH_EVERY_S after the last one ended, not after every event.
                    due = now - last_refresh >= REFRESH_EVERY_S
                    if due:
                        play = self.core.begin_play_refresh()
                        if play is None:
                            self.core.play_refresh()
                except Exception:  # keep deciding: one bad event must not stop the cluster
                    log.exception("coordinator loop")
            if not due:
                continue
            try:
                # The whole queue's forecast runs outside the lock: submissions and reports are not
                # held up for it (a submission forecasts its own job, Coordinator.forecast).
                # Between events it stands aside while a call wants the lock (CallLock): a submission's
                # own play then has the interpreter to itself instead of half of it, as long as the
                # play keeps its share of the time.
                pause = self.lock.yielder(REFRESH_YIELD_S, REFRESH_SHARE)
                finish = play[1](between=pause) if play is not None else None
                if finish is not None:
                    # Its forecasts go in a part at a time, standing aside between parts as the play did.
                    parts = self.core.end_play_refresh_in_parts(play[0], finish)
                    while True:
                        with self.lock:
                            more = next(parts, False) is None
                        if not more:
                            break
                        pause()
                if self.metrics is not None and time.monotonic() - last_metrics >= METRICS_EVERY_S:
                    last_metrics = time.monotonic()
                    self.metrics.publish(readings(self.core, self.lock, pause))
            except Exception:
                log.exception("coordinator forecasts")
            last_refresh = time.monotonic()

    def submit(self, spec: dict, submission_id: str | None = None, caller: dict | None = None):
        """As the host's, and the prediction made at submission goes into the journal (``pcs-ray report``)."""
        reply = super().submit(spec, submission_id, caller)
        with self.lock:
            self.core.note_prediction(reply.id)
        return reply

    def _lose_nodes(self, lost: set[str]) -> None:
        """Nodes died: checkpoint every surviving run, then rebuild the state on the nodes left.

        Jobs of the dead nodes resume from their last checkpoints; the others lose nothing (they
        stop at a step boundary with a checkpoint). The journal replay is the same as after a crash.
        """
        log.warning("node(s) %s lost: checkpointing every job and rescheduling on the nodes left", sorted(lost))
        with self.lock:
            self.draining = True
            for run in self.runs.values():
                run.handle.request_stop()
                run.kill_at = time.monotonic() + self.config.grace_s
        deadline = time.monotonic() + self.config.grace_s + 30.0
        while time.monotonic() < deadline:
            with self.lock:
                refs = [run.handle.done for run in self.runs.values()]
            if not refs:
                break
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=LOOP_WAIT_S)
            with self.lock:
                self._collect(ready)  # decisions taken meanwhile are dropped: the rebuild below decides afresh
                for run in self.runs.values():
                    if run.kill_at is not None and time.monotonic() >= run.kill_at:
                        run.handle.kill()
                        run.kill_at = float("inf")
        with self.lock:
            for run in self.runs.values():
                run.handle.kill()
            self.runs.clear()
            self.suspects.clear()  # their jobs have no run: the replay below sends them back to the queue
            old = self.core
            self.config = _on_alive_nodes(self.config)
            if self.mirror is not None:
                self.mirror.close()
            self.core = build_core(self.config)  # replays the journal: jobs without a run go back to the queue
            old.journal.close()
            self.mirror = start_mirror(self.config)
            self.draining = False
        self._resume()

    # -- the actor's own calls (predictions they read are at most REFRESH_EVERY_S old) ------
    def drain(self, timeout_s: float = 60.0, caller: dict | None = None) -> int:
        """Stop every runner at a checkpoint (for ``pcs-ray stop``, an operator's once a tenants file names
        operators); returns how many were still running."""
        self.check_stop(caller)
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

    def _runners(self) -> list[dict] | None:
        return self.pool.describe() if self.pool is not None else None

    def shutdown_runners(self) -> int:
        """End this coordinator's warm runners (they are detached: they outlive it otherwise); returns how many."""
        if self.pool is None:
            return 0
        count = sum(1 for r in self.pool.describe() if r["kind"] == "warm")
        self.pool.shutdown(kill_runners=True)
        return count

    def ping(self) -> dict:
        return {"jobs": len(self.core.jobs), "recovered": self.core.recovered, "reattached": self.core.reattached,
                "epoch": self.core.epoch, "pid": os.getpid(), "api": self.api_address(),
                "ray_address": self.api.ray_address if self.api is not None else None}

    def _dashboard_url(self, ticket: str) -> str | None:
        url = self.api_address()
        return None if url is None else f"{url}{DASHBOARD}/login?ticket={ticket}"

    def api_address(self) -> str | None:
        """The URL of this coordinator's HTTP API (``None``: not served, see ``serve_api``)."""
        return self.api.advertised if self.api is not None else None

    def close_api(self) -> None:
        """Stop serving HTTP and withdraw the advert (``pcs-ray stop``: clients then know it is gone)."""
        if self.api is not None:
            self.api.close()
            self.api = None


def _holds(state: dict, token: tuple[str, int]) -> bool:
    """Whether a runner's ``runs_state`` shows the run ``token``: training, waiting, or ended (outcome kept)."""
    current = state.get("current")
    return (current is not None and tuple(current) == token) or token in {tuple(p) for p in state.get("pending", ())} \
        or token in state.get("ended", {})


def _alive_gpu_nodes() -> set[str]:
    """Names of the nodes whose per-GPU resources a live Ray node offers."""
    from pcs_ray.cluster import ClusterSpecError
    from pcs_ray.cluster.discovery import cluster_from_ray_nodes

    try:
        return {node.name for node in cluster_from_ray_nodes(ray.nodes()).nodes}
    except ClusterSpecError:
        return set()


def _metrics():
    """Prometheus metrics on Ray's endpoint; a coordinator without them still schedules."""
    try:
        return RayMetrics()
    except Exception:
        log.exception("metrics are off")
        return None


def _a_death(error: str | None) -> bool:
    """A runner that died (its process or node), as opposed to training that raised."""
    return error is None or any(w in error.lower() for w in ("died", "crash", "unavailable", "nodedied"))


def _probe(run: _Run) -> list | None:
    """A tiny task pinned to each node the run used; ``None`` when one of them is no longer alive."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    names = {slot.node for slot in run.handle.request.gpus}
    ids = {}
    for info in ray.nodes():
        if info.get("Alive"):
            for name in names:
                if any(k.startswith(f"{name}_gpu") for k in info.get("Resources", {})):
                    ids[name] = info["NodeID"]
    if set(ids) != names:
        return None
    return [_alive.options(scheduling_strategy=NodeAffinitySchedulingStrategy(i, soft=False)).remote() for i in ids.values()]


def _lost_nodes(config: CoordinatorConfig) -> set[str]:
    nodes = {n["name"] for n in config.cluster["nodes"] if n.get("gpus")}
    alive = _alive_gpu_nodes()
    return nodes - alive if alive else set()  # no GPU node at all: a Ray hiccup, not a loss to act on


def _on_alive_nodes(config: CoordinatorConfig) -> CoordinatorConfig:
    """``config`` with only the nodes Ray has alive (all of them when Ray shows none)."""
    alive = _alive_gpu_nodes()
    nodes = [n for n in config.cluster["nodes"] if n["name"] in alive]
    if not alive or not nodes or len(nodes) == len(config.cluster["nodes"]):
        return config
    return replace(config, cluster={**config.cluster, "nodes": nodes})


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
