"""Pre-started processes for the user's own code: a few per runtime env and node, each used once.

A user run cannot enter the warm runners (one user's imports and globals must never reach another
user's job), so each rank is a fresh process. Starting one costs a Ray worker, the runtime env's
setup and a torch import: seconds. Once a node has run a runtime env, this keeps up to
``PER_KEY`` processes of that env waiting there (torch imported, no GPU held, CUDA untouched);
the next run of that env on that node takes one, pins it to its GPU and discards it when the run
ends. At most ``PER_NODE`` wait on a node; the least recently used env's are ended first.

Lives in the process that launches runs (the coordinator); a spare outlives nothing else.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict

import ray

from pcs_ray.contract import GPUSlot
from pcs_ray.cluster.resources import gpu_resource

log = logging.getLogger(__name__)

PER_KEY = 2  # spares of one runtime env per node: a run's ranks there, up to this many
PER_NODE = 4  # spares per node, all runtime envs together (each holds a Python with torch: ~0.3-0.8 GB)


def env_key(env: dict) -> str:
    return json.dumps(env, sort_keys=True, default=str)


class Spares:
    """The waiting processes, per (Ray node, runtime env key)."""

    def __init__(self, per_key: int = PER_KEY, per_node: int = PER_NODE) -> None:
        self.per_key, self.per_node = per_key, per_node
        self._idle: OrderedDict[tuple[str, str], list] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    @staticmethod
    def nodes_of(slots) -> dict[GPUSlot, str | None]:
        """The alive Ray node offering each GPU's per-GPU resource, from one look at the cluster."""
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        found: dict[GPUSlot, str | None] = {}
        for slot in slots:
            name = gpu_resource(slot.node, slot.index)
            found[slot] = next((n["NodeID"] for n in nodes if name in n.get("Resources", {})), None)
        return found

    def take(self, node: str | None, key: str):
        """A waiting process of this env on that Ray node, or None."""
        if self.per_key <= 0 or node is None:
            return None
        with self._lock:
            waiting = self._idle.get((node, key))
            if not waiting:
                return None
            self._idle.move_to_end((node, key))
            return waiting.pop(0)

    def refill(self, nodes, key: str, start) -> None:
        """Start processes (``start(node_id)`` returns one) on ``nodes`` (a Ray node per rank) until each has
        its ranks' worth of this env (``PER_KEY`` at most)."""
        if self.per_key <= 0:
            return
        wanted: dict[str, int] = {}
        for node in nodes:
            if node is not None:
                wanted[node] = min(self.per_key, wanted.get(node, 0) + 1)
        with self._lock:
            for node, count in wanted.items():
                waiting = self._idle.setdefault((node, key), [])
                self._idle.move_to_end((node, key))
                while len(waiting) < count:
                    self._evict(node, keep=key)
                    try:
                        waiting.append(start(node))
                    except Exception:  # a spare is an optimisation: the next run starts its own process
                        log.exception("starting a spare user process")
                        break

    def _evict(self, node: str, keep: str) -> None:
        """Make room for one more spare on ``node``: end the least recently used other env's."""
        while sum(len(v) for (n, _), v in self._idle.items() if n == node) >= self.per_node:
            victim = next(((n, k) for (n, k), v in self._idle.items() if n == node and k != keep and v), None)
            if victim is None:
                return
            ray.kill(self._idle[victim].pop(0), no_restart=True)

    def count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())

    def clear(self) -> None:
        with self._lock:
            for waiting in self._idle.values():
                for actor in waiting:
                    ray.kill(actor, no_restart=True)
            self._idle.clear()


SPARES = Spares()
