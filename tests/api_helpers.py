"""A coordinator in this process served over HTTP on loopback, for the API's tests (no Ray)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from builders import coordinator
from pcs_ray.coordinator.config import coordinator_policy
from pcs_ray.coordinator.http_server import ApiServer
from pcs_ray.coordinator.local import LocalCoordinator
from pcs_ray.workloads.catalog import registered_workloads

TOKEN = "test-token-" + "0" * 40


class ServedCoordinator(LocalCoordinator):
    """The in-process host with the actor's ``ping``, so the server serves every call it serves live
    (``ray_address``: the Ray cluster it says it serves, as the actor does)."""

    ray_address: str | None = None

    def ping(self) -> dict:
        return {"jobs": len(self.core.jobs), "pid": os.getpid(), "ray_address": self.ray_address}


def local_host(state: Path, gpus: int = 8, per_node: int = 4, **options) -> ServedCoordinator:
    """A pcs-bal core for every registered workload, its journal and checkpoints under ``state``, hosted here
    (``options``: the core's own, a clock say)."""
    return ServedCoordinator(coordinator(gpus=gpus, per_node=per_node, policy="pcs-bal", journal=state / "journal.sqlite",
                                         checkpoint_root=state / "ckpt", workloads=registered_workloads(),
                                         policies=coordinator_policy, **options))


@contextlib.contextmanager
def served(host, token: str = TOKEN, port: int = 0):
    server = ApiServer(host, token, "127.0.0.1", port)
    server.start()
    try:
        yield server
    finally:
        server.stop()
