"""Bring-up for ``pcs-ray demo``: an embedded Ray with the demo cluster's logical GPUs and a coordinator on it.

Everything it starts (Ray, the detached coordinator, temporary state and Ray
folders) is torn down when the ``with`` block ends, also on errors and Ctrl-C,
so a demo leaves nothing running behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import ray

from pcs_ray.executors.emulation import RAY_WORKER_ENV
from pcs_ray.client import Client
from pcs_ray.cluster import ClusterSpec
from pcs_ray.api.actor_ref import NAMESPACE
from pcs_ray.coordinator.actor import start_coordinator
from pcs_ray.coordinator.config import CoordinatorConfig, cluster_dict
from pcs_ray.cluster.resources import node_gpu_resources


def _start_ray(cluster: ClusterSpec, temp_dir: str) -> None:
    """A local Ray with one custom resource per GPU (as ``pcs-ray node-resources`` registers them)."""
    resources: dict[str, float] = {}
    for node in cluster.nodes:
        resources.update(node_gpu_resources(node.name, len(node.gpus)))
    saved = {key: os.environ.get(key) for key in RAY_WORKER_ENV}
    os.environ.update(RAY_WORKER_ENV)  # read by the raylet ray.init starts, inherited by its workers
    try:
        ray.init(
            num_cpus=2, num_gpus=cluster.num_gpus, resources=resources, include_dashboard=False, namespace=NAMESPACE,
            log_to_driver=False, logging_level="ERROR", object_store_memory=200 * 1024 * 1024, _temp_dir=temp_dir,
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def demo_coordinator(cluster: ClusterSpec, wfq: dict) -> Iterator[Client]:
    """A client of a PCS coordinator (WFQ configuration ``wfq``) on a fresh local Ray for ``cluster``.

    Ray prints its raylet's warnings through the driver's stdout; inside the block they go to stderr,
    so a command's ``--json`` output stays exactly one JSON object."""
    state_dir = tempfile.mkdtemp(prefix="pcs-ray-demo-state-")
    ray_tmp = tempfile.mkdtemp(prefix="pcs-ray-demo-ray-", dir="/tmp")
    actor = None
    with contextlib.redirect_stdout(sys.stderr):
        try:
            _start_ray(cluster, ray_tmp)
            config = CoordinatorConfig(
                cluster=cluster_dict(cluster), state_dir=state_dir, policy="pcs", wfq=wfq, grace_s=20.0,
                restart_overhead=8.0, progress_journal_every=2.0,
            )
            actor = start_coordinator(config)
            yield Client(coordinator=actor)
        finally:
            if actor is not None:
                ray.kill(actor, no_restart=True)
            ray.shutdown()
            shutil.rmtree(state_dir, ignore_errors=True)
            shutil.rmtree(ray_tmp, ignore_errors=True)
