"""Warm runners: one long-lived runner process per GPU, so a (re)start costs a message, not a process and a torch import.

A cold start (``pcs_ray.executors.launch``) creates a fresh Ray actor per rank and
imports torch and the workload in it: seconds on an idle machine, tens of
seconds on a busy one, paid at every start, resume and migration. The pool
keeps one :class:`WarmRunner` per GPU instead:

- **pinned** to the Ray node that offers the GPU's per-GPU resource
  (``<node>_gpu<i>``, see ``pcs_ray.cluster.resources``) and bound to that GPU for
  life (``CUDA_VISIBLE_DEVICES``). It holds none of the resource itself: Ray
  Tune trials (``pcs_ray.executors.tune_scheduler``) request the whole unit, so a
  runner that kept even a share of it would block them forever. Which run
  uses a GPU is the coordinator's decision; the runner takes one run at a
  time and queues the next behind it (``after``, as a cold start does).
- **detached and named** (``pcs-ray-runner:<node>:gpu<i>`` in namespace
  ``pcs-ray``), so a restarted coordinator finds the same runners. A run
  outlives the coordinator that started it: it keeps training (its progress
  reports go nowhere meanwhile), and its outcome is kept in the runner
  (``runs_state``). A pool built with ``keep_runs`` lets its coordinator
  adopt the runs its journal says are running (``survivors``, ``reattach``:
  progress flows to the new coordinator, the outcome is collected) and stop
  the rest at a checkpoint (``release``); without it every run left over is
  stopped at a checkpoint before anything new starts.
- **warm**: torch, every workload's modules (in the background) and the
  training loop are imported once. DDP sets up its process group per run (a rendezvous per
  run), the one thing not kept.
- **started one at a time** (a launch starts its own GPUs' runners at once):
  eight processes importing torch together would starve a small machine.
- **replaced in the background** when it dies (killed by ``RunHandle.kill``
  after a missed grace period, or crashed).
- **bounded by memory**: a Ray node keeps at most as many warm runners as a
  share of its memory holds at the measured runner size (``max_per_node``
  overrides); runs on the other GPUs start cold, as before. A run's outcome
  says which kind it used (``RunOutcome.runner``) and its timings carry
  ``launched`` (the launch call) so start-up can be charged per kind.

``WarmPool.launch`` returns the same :class:`pcs_ray.executors.launch.RunHandle`
(``done`` -> ``RunOutcome``, ``request_stop()``, ``kill()``) as a cold launch.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import ray

from pcs_ray.executors import rank_death
from pcs_ray.executors.handle import death_of
from pcs_ray.executors.launch import RunHandle, launch as cold_launch
from pcs_ray.executors.runner import failed_outcome, rendezvous_address, train_rank
from pcs_ray.contract import GPUSlot, RunOutcome, RunRequest
from pcs_ray.cluster.resources import gpu_resource

log = logging.getLogger(__name__)

NAMESPACE = "pcs-ray"
#: A runner's resident memory before one has been measured: torch, torchvision and the workloads imported
#: (measured here: 756 MB per runner, ``WarmPool.describe()`` ``rss_mb`` after ``ready()``, torch 2.14).
RSS_ESTIMATE_B = 760 * 2**20
#: The share of a Ray node's schedulable memory the warm runners may take together (the rest is for training).
MEMORY_SHARE = 0.5
REPLACE_BACKOFF_MAX_S = 60.0
FAILED_RANK_WAIT_S = 5.0  # after one rank fails, how long the others get before they are killed (stuck in collectives)
KEPT_OUTCOMES = 32  # outcomes a runner keeps for a coordinator that died before it collected them


def warm_capacity(node_memory_b: float, runner_b: float, share: float = MEMORY_SHARE, max_per_node: int | None = None) -> int:
    """Warm runners a node keeps: ``max_per_node`` when set, else as many as ``share`` of its memory holds."""
    if max_per_node is not None:
        return max(0, int(max_per_node))
    if runner_b <= 0:
        raise ValueError("a runner's memory must be positive")
    return max(0, int(math.floor(share * node_memory_b / runner_b)))


def runner_name(slot: GPUSlot) -> str:
    return f"pcs-ray-runner:{slot.node}:gpu{slot.index}"


def _rss_bytes() -> int:
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except Exception:  # psutil ships with Ray; /proc as a fallback
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class WarmRunner:
    """One GPU's long-lived runner: takes one run at a time, any job, any rank."""

    def __init__(self, gpu: GPUSlot):
        self.created = time.time()
        self.gpu = gpu
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu.index)
        self._run_lock = threading.Lock()  # one run at a time; the next waits here
        self._state = threading.Lock()
        self._changed = threading.Condition(self._state)  # a run began or ended
        self._stop = threading.Event()
        self._current: tuple[str, int] | None = None
        self._step = 0  # of the current run
        self._pending: set[tuple[str, int]] = set()  # runs handed over, waiting for their turn
        self._stop_early: set[tuple[str, int]] = set()  # runs asked to stop before they began
        self._reporters: dict[tuple[str, int], object] = {}  # where each run's progress goes (a new coordinator's)
        self._ended: OrderedDict[tuple[str, int], RunOutcome] = OrderedDict()
        self._never = threading.Event()
        self.runs = 0
        import pcs_ray.executors.training  # noqa: F401  (torch, the loop, checkpoints)

        self.warmed = time.time()
        # The workloads' own heavy modules (torchvision) load, and CUDA warms, in the background while the
        # runner is idle; a run waits until that is done. A run importing torch's modules while this thread
        # does (``torch.use_deterministic_algorithms`` imports ``torch._inductor``) can be handed a partially
        # initialized module by Python's import-deadlock breaker: every built-in run failed so on an H200.
        self._warm = threading.Event()
        threading.Thread(target=self._import_workloads, name="warm-imports", daemon=True).start()

    def _import_workloads(self) -> None:
        import importlib

        try:
            from pcs_ray.workloads.models import WORKLOADS

            for workload in WORKLOADS.values():
                for module in workload.imports:
                    try:
                        importlib.import_module(module)
                    except Exception:  # a run that needs it reports the error itself
                        log.exception("warm runner: importing %s failed", module)
            try:
                from pcs_ray.executors.training import warm_cuda

                warm_cuda()
            except Exception:  # the first run then pays for it, and reports any real CUDA fault itself
                log.exception("warm runner: CUDA warm-up failed")
            # Everything imported lives as long as the runner: keep it out of the cyclic collector, whose full
            # passes over torch and torchvision's ~340,000 objects take ~200 ms here (a whole emulated step).
            gc.collect()
            gc.freeze()
        except Exception:  # the runner still serves runs, as a cold process would
            log.exception("warm runner: warm-up failed")
        finally:
            self._warm.set()

    def info(self) -> dict:
        with self._state:
            current = self._current
        return {"gpu": (self.gpu.node, self.gpu.index), "pid": os.getpid(), "rss_bytes": _rss_bytes(),
                "created": self.created, "warmed": self.warmed, "runs": self.runs,
                "running": list(current) if current else None}

    def environment(self) -> dict:
        """What this runner was given: its GPU visibility, Ray resources, node and process."""
        context = ray.get_runtime_context()
        return {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "resources": context.get_assigned_resources(),
                "node_id": context.get_node_id(), "pid": os.getpid(), "gpu": (self.gpu.node, self.gpu.index)}

    def sentinel(self) -> None:
        """Never returns: its ref fails when this runner dies, which is how the pool notices."""
        self._never.wait()

    def rendezvous(self) -> tuple[str, int]:
        return rendezvous_address()

    def request_stop(self, job_id: str, attempt: int) -> None:
        """Stop that run at its next step boundary (or before its first step, if it has not begun)."""
        token = (job_id, attempt)
        with self._state:
            if self._current == token:
                self._stop.set()
            else:
                self._stop_early.add(token)

    def abandon(self) -> bool:
        """Stop whatever runs (for a coordinator that no longer knows it) and wait until it has checkpointed."""
        with self._state:
            busy = self._current is not None
            self._stop_early |= self._pending
            self._stop.set()
        with self._run_lock:
            return busy

    def runs_state(self) -> dict:
        """What a restarted coordinator needs to adopt this runner's work: the run training now (job id,
        attempt) and its step, the runs waiting for their turn, and the outcomes of the runs that ended."""
        with self._state:
            return {"current": self._current, "step": self._step if self._current else None,
                    "pending": sorted(self._pending), "ended": {t: (o.status, o.step) for t, o in self._ended.items()}}

    def collect(self, request: RunRequest) -> RunOutcome:
        """The outcome of ``request``'s run, once it ends (a restarted coordinator adopting it); its
        progress reports go to ``request.reporter`` from now on."""
        token = (request.job_id, request.attempt)
        with self._state:
            if token == self._current or token in self._pending:
                self._reporters[token] = request.reporter
            while token not in self._ended and (token == self._current or token in self._pending):
                self._changed.wait()
            if token in self._ended:
                return self._ended[token]
        return failed_outcome(request, "runner died or lost the run (not found on its warm runner)", runner="warm")

    def release(self, keep: list) -> int:
        """Stop every run but those in ``keep`` (job id, attempt) at a checkpoint, and wait until the one
        training now has stopped; returns how many were stopped. Runs a previous coordinator started
        that the new one does not adopt must not train beside what it starts."""
        keep = {tuple(k) for k in keep}
        with self._state:
            stale = {t for t in self._pending if t not in keep}
            self._stop_early |= stale
            if self._current is not None and self._current not in keep:
                stale.add(self._current)
                self._stop.set()
            while self._current is not None and self._current in stale:
                self._changed.wait()
        return len(stale)

    def _stepped(self, step: int) -> None:
        self._step = step

    def run(self, request: RunRequest, rank: int, world_size: int, master: tuple[str, int] | None,
            after: list, launched: float) -> RunOutcome:
        """Train one rank of ``request`` once the runs in ``after`` (refs, any outcome) have ended.

        The outcome is also kept here: if the coordinator that asked dies meanwhile, the run goes on
        and its successor collects it (:meth:`collect`).
        """
        token = (request.job_id, request.attempt)
        with self._state:
            self._pending.add(token)
            self._reporters[token] = request.reporter
        try:
            if after:
                ray.wait(after, num_returns=len(after))
            with self._run_lock:
                self._warm.wait()
                with self._state:
                    self._pending.discard(token)
                    self._current, self._step = token, 0
                    self._stop.clear()
                    if token in self._stop_early:
                        self._stop_early.discard(token)
                        self._stop.set()
                timings = {"launched": launched, "actor_created": self.created, "warmed": self.warmed,
                           "run_called": time.time()}
                try:
                    outcome = train_rank(request, self._stop.is_set, rank, world_size, master, timings,
                                         on_step=self._stepped, reporter=lambda: self._reporters.get(token))
                finally:
                    self.runs += 1
                    gc.collect()
                outcome = replace(outcome, runner="warm")
                with self._state:
                    self._ended[token] = outcome
                    while len(self._ended) > KEPT_OUTCOMES:
                        self._ended.popitem(last=False)
                return outcome
        finally:
            with self._state:
                self._pending.discard(token)
                self._reporters.pop(token, None)
                if self._current == token:
                    self._current = None
                self._changed.notify_all()


RemoteWarmRunner = ray.remote(WarmRunner)


@ray.remote(num_cpus=0, max_retries=0)
def _watch_warm(request: RunRequest, actors: list, runs: list) -> RunOutcome:
    """Every rank's outcome as one; a rank that failed leaves the others a moment, then kills them (collectives)."""
    outcomes: dict[int, RunOutcome] = {}
    pending = list(runs)
    failed_at = None
    while pending:
        timeout = None if failed_at is None else max(0.0, failed_at + FAILED_RANK_WAIT_S - time.monotonic())
        ready, pending = ray.wait(pending, num_returns=1, timeout=timeout)
        if not ready:
            for ref in pending:
                ray.kill(actors[runs.index(ref)], no_restart=True)
            ready, pending = ray.wait(pending, num_returns=len(pending))
        for ref in ready:
            rank = runs.index(ref)
            try:
                outcomes[rank] = ray.get(ref)
            except Exception as exc:
                outcomes[rank] = failed_outcome(request, rank_death.describe(rank, death_of(actors[rank], exc)))
            if outcomes[rank].status == "failed" and failed_at is None:
                failed_at = time.monotonic()
    failed = [o for o in outcomes.values() if o.status == "failed"]
    if failed:
        return failed_outcome(request, failed[0].error, timings=failed[0].timings, runner="warm")
    return outcomes[0]


@dataclass
class _Slot:
    slot: GPUSlot
    actor: object = None
    sentinel: object = None
    info: dict | None = None
    info_ref: object = None
    started: float = 0.0
    replaced: int = 0
    node_id: str | None = None
    retry_at: float = 0.0  # a dead runner is replaced from then on (its GPU's runs start cold meanwhile)
    backoff: float = 0.0  # doubles with each death in a row (e.g. the node's OOM killer), so replacing cannot churn
    adopted: bool = False  # found alive from a previous coordinator


@dataclass
class WarmPool:
    """The warm runners of a cluster's GPUs, kept alive and replaced; ``launch`` hands runs to them.

    ``max_per_node``: warm runners per Ray node at most (None: what ``MEMORY_SHARE`` of its memory holds).
    ``keep_runs``: runs left by a previous coordinator keep training until the caller says which it
    adopts (:meth:`survivors`, :meth:`reattach`, :meth:`release`); otherwise they stop at a checkpoint.
    """

    slots: list[GPUSlot]
    max_per_node: int | None = None
    memory_share: float = MEMORY_SHARE
    namespace: str = NAMESPACE
    maintain_every_s: float = 1.0
    keep_runs: bool = False
    _warm: dict[GPUSlot, _Slot] = field(default_factory=dict, init=False, repr=False)
    _settling: list = field(default_factory=list, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _closed: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    cold_only: list[GPUSlot] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.slots = [GPUSlot(s.node, s.index) for s in self.slots]
        by_node: dict[str, list[GPUSlot]] = {}
        self._nodes = self._ray_nodes()
        for slot in self.slots:
            node_id = self._nodes.get(gpu_resource(slot.node, slot.index), (None, 0))[0]
            by_node.setdefault(node_id, []).append(slot)
        for node_id, slots in by_node.items():
            room = 0 if node_id is None else self.capacity(node_id)
            for k, slot in enumerate(slots):
                if k < room:
                    self._warm[slot] = _Slot(slot, node_id=node_id)
                    self._adopt(self._warm[slot])
                else:
                    self.cold_only.append(slot)
        self._thread = threading.Thread(target=self._maintain_loop, name="pcs-ray-warm-pool", daemon=True)
        self._thread.start()

    # -- sizing --------------------------------------------------------------------------
    def warm_share(self) -> float:
        """The share of the GPUs that keep a warm runner (the rest start cold): what a forecast's future starts cost."""
        return len(self._warm) / len(self.slots) if self.slots else 0.0

    @staticmethod
    def _ray_nodes() -> dict[str, tuple[str, float]]:
        """Per-GPU resource name -> (the alive Ray node offering it, that node's schedulable memory in bytes)."""
        out = {}
        for node in ray.nodes():
            if node.get("Alive"):
                resources = node.get("Resources", {})
                for name in resources:
                    out[name] = (node["NodeID"], float(resources.get("memory", 0.0)))
        return out

    def runner_bytes(self) -> int:
        measured = [s.info["rss_bytes"] for s in self._warm.values() if s.info]
        return max(measured) if measured else RSS_ESTIMATE_B

    def capacity(self, node_id: str) -> int:
        """How many warm runners this Ray node keeps: the setting, else what its memory share holds."""
        memory = next((m for n, m in self._nodes.values() if n == node_id), 0.0)
        return warm_capacity(memory, self.runner_bytes(), self.memory_share, self.max_per_node)

    # -- runners ---------------------------------------------------------------------------
    def _adopt(self, entry: _Slot) -> None:
        """Take over the runner a previous coordinator left (detached, found by name), if there is one."""
        try:
            existing = ray.get_actor(runner_name(entry.slot), namespace=self.namespace)
        except ValueError:
            return
        entry.actor, entry.adopted = existing, True
        entry.started = time.time()
        entry.sentinel = existing.sentinel.remote()
        entry.info, entry.info_ref = None, existing.info.remote()
        if not self.keep_runs:
            self._settling.append(existing.abandon.remote())  # its run belongs to a coordinator that is gone

    def survivors(self, timeout: float = 30.0) -> dict[GPUSlot, dict]:
        """What each runner found from a previous coordinator is doing (``WarmRunner.runs_state``);
        a runner that does not answer within ``timeout`` is left out (its runs count as lost)."""
        with self._lock:
            entries = [e for e in self._warm.values() if e.adopted and e.actor is not None]
            refs = [e.actor.runs_state.remote() for e in entries]
        if not refs:
            return {}
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
        out = {}
        for entry, ref in zip(entries, refs):
            try:
                out[entry.slot] = ray.get(ref, timeout=0)
            except Exception as exc:
                log.warning("warm runner for %s did not say what it runs: %s", entry.slot, exc)
        return out

    def reattach(self, request: RunRequest) -> RunHandle:
        """A handle on a run that warm runners still hold (started by a previous coordinator):
        ``done`` resolves to its outcome, and its progress reports go to ``request.reporter``."""
        with self._lock:
            actors = [self._warm[GPUSlot(s.node, s.index)].actor for s in request.gpus]
        if any(a is None for a in actors):
            raise ValueError(f"job {request.job_id}: a GPU of {request.gpus} has no warm runner")
        runs = [actor.collect.remote(request) for actor in actors]
        return RunHandle(request, actors, _watch_warm.remote(request, actors, runs),
                         stop_args=(request.job_id, request.attempt), runner="warm")

    def release(self, keep) -> None:
        """Stop the found runners' runs other than ``keep`` ((job id, attempt) pairs) at a checkpoint;
        launches wait until they have stopped."""
        keep = sorted({(str(j), int(a)) for j, a in keep})
        with self._lock:
            for entry in self._warm.values():
                if entry.adopted and entry.actor is not None:
                    self._settling.append(entry.actor.release.remote(keep))

    def _starting(self) -> bool:
        return any(e.actor is not None and e.info is None for e in self._warm.values())

    def _start(self, entry: _Slot, node_id: str | None = None) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node_id = node_id or entry.node_id
        entry.actor = RemoteWarmRunner.options(
            name=runner_name(entry.slot), namespace=self.namespace, lifetime="detached", get_if_exists=True,
            num_cpus=0, num_gpus=0, max_concurrency=32, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(entry.slot)
        entry.started = time.time()
        entry.sentinel = entry.actor.sentinel.remote()
        entry.info, entry.info_ref = None, entry.actor.info.remote()

    def maintain(self) -> list[GPUSlot]:
        """Replace dead runners, refresh memory figures; returns the GPUs whose runner was replaced."""
        with self._lock:
            if self._closed.is_set():
                return []
            now = time.time()
            alive = [e for e in self._warm.values() if e.actor is not None]
            dead, _ = ray.wait([e.sentinel for e in alive], num_returns=len(alive), timeout=0) if alive else ([], [])
            dead = set(dead)
            replaced = []
            for entry in self._warm.values():
                if entry.actor is not None and entry.sentinel in dead:
                    log.warning("warm runner for %s died; replacing it in %.0f s", entry.slot, entry.backoff)
                    entry.actor, entry.info, entry.info_ref = None, None, None
                    entry.retry_at = now + entry.backoff
                    entry.backoff = min(REPLACE_BACKOFF_MAX_S, max(1.0, 2 * entry.backoff))
                if entry.actor is None:
                    if entry.started == 0.0:  # never started: one at a time, below, unless a launch wants it first
                        continue
                    node_id = self._ray_nodes().get(gpu_resource(entry.slot.node, entry.slot.index), (None, 0))[0]
                    if now >= entry.retry_at and node_id is not None:
                        entry.replaced += 1
                        self._start(entry, node_id)
                        replaced.append(entry.slot)
                    continue
                if entry.info is not None and now - entry.started > REPLACE_BACKOFF_MAX_S:
                    entry.backoff = 0.0  # alive for a while: the next death is replaced at once again
                if entry.info_ref is not None:
                    ready, _ = ray.wait([entry.info_ref], timeout=0)
                    if ready:
                        try:
                            entry.info = ray.get(entry.info_ref)
                        except Exception:
                            entry.info = None
                        entry.info_ref = None
                elif time.time() - (entry.info or {}).get("at", 0) > 5.0:
                    entry.info_ref = entry.actor.info.remote()
                if entry.info is not None:
                    entry.info.setdefault("at", time.time())
            self._settling = [r for r in self._settling if not ray.wait([r], timeout=0)[0]]
            # Runners never started yet start one at a time: eight processes importing torch at once would
            # starve the runs of a small machine (a launch starts its GPUs' runners at once, see launch).
            if not self._starting():
                fresh = next((e for e in self._warm.values() if e.actor is None and e.started == 0.0), None)
                if fresh is not None:
                    self._start(fresh)
            return replaced

    def _maintain_loop(self) -> None:
        while not self._closed.wait(self.maintain_every_s):
            try:
                self.maintain()
            except Exception:  # the pool must outlive a bad poll
                log.exception("warm pool maintenance")

    def describe(self) -> list[dict]:
        """Each GPU's runner: kind (warm/cold), state, process, memory, runs, replacements."""
        out = []
        with self._lock:
            for slot in self.slots:
                entry = self._warm.get(slot)
                if entry is None:
                    out.append({"node": slot.node, "gpu": slot.index, "kind": "cold"})
                    continue
                info = entry.info or {}
                state = "replacing" if entry.actor is None else "ready" if info else "starting"
                out.append({"node": slot.node, "gpu": slot.index, "kind": "warm", "name": runner_name(slot),
                            "state": state, "pid": info.get("pid"),
                            "rss_mb": round(info["rss_bytes"] / 2**20, 1) if info else None,
                            "runs": info.get("runs"), "replaced": entry.replaced})
        return out

    def ready(self, timeout: float = 120.0) -> list[dict]:
        """Wait until every warm runner has started (imports done); returns :meth:`describe`."""
        with self._lock:
            for entry in self._warm.values():
                if entry.actor is None and entry.started == 0.0:
                    self._start(entry)
            entries = [e for e in self._warm.values() if e.actor is not None]
            refs = [e.actor.info.remote() for e in entries]
        infos = ray.get(refs, timeout=timeout)
        with self._lock:
            for entry, info in zip(entries, infos):
                entry.info = {**info, "at": time.time()}
        return self.describe()

    # -- runs ----------------------------------------------------------------------------------
    def launch(self, request: RunRequest, after: ray.ObjectRef | None = None) -> RunHandle:
        """Hand ``request`` to the warm runners of its GPUs; a cold launch when one of them has none."""
        self.maintain()  # a runner killed since the last poll (a failed DDP peer) must not be handed work
        with self._lock:
            entries = [self._warm.get(GPUSlot(s.node, s.index)) for s in request.gpus]
            for entry in entries:
                if entry is not None and entry.actor is None and entry.started == 0.0 and not self._closed.is_set():
                    self._start(entry)  # its first run waits for its start-up, once; later ones find it warm
            settling = list(self._settling)
        if request.code is not None or not request.gpus or any(e is None or e.actor is None for e in entries):
            return cold_launch(request, after)  # user code never enters a shared process
        # A runner still starting makes this run pay a process start and imports, as a cold one does: the
        # speed model must not charge that to every later warm start.
        kind = "warm" if all(e.info for e in entries) else "warming"
        if len(set(request.gpus)) != len(request.gpus):
            raise ValueError(f"job {request.job_id}: a GPU is listed twice in {request.gpus}")
        if request.total_steps is not None and request.total_steps < 0:
            raise ValueError(f"job {request.job_id}: total_steps must be >= 0")
        launched = time.time()
        actors = [e.actor for e in entries]
        world_size = len(actors)
        master = actors[0].rendezvous.remote() if world_size > 1 else None
        deps = settling + ([after] if after is not None else [])
        runs = [actor.run.remote(request, rank, world_size, master, deps, launched) for rank, actor in enumerate(actors)]
        done = _watch_warm.remote(request, actors, runs)
        return RunHandle(request, actors, done, stop_args=(request.job_id, request.attempt), runner=kind)

    def shutdown(self, kill_runners: bool = False) -> None:
        """Stop maintaining; with ``kill_runners`` also end the runners (detached: they outlive us otherwise)."""
        with self._lock:
            self._closed.set()
        if kill_runners:
            with self._lock:
                for entry in self._warm.values():
                    if entry.actor is not None:
                        ray.kill(entry.actor, no_restart=True)
                        entry.actor = None


def kill_warm_runners(slots, namespace: str = NAMESPACE) -> int:
    """End the named warm runners of ``slots`` that exist (e.g. when the whole cluster is taken down); returns how many."""
    killed = 0
    for slot in slots:
        try:
            ray.kill(ray.get_actor(runner_name(slot), namespace=namespace), no_restart=True)
            killed += 1
        except ValueError:
            pass
    return killed
