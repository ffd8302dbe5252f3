"""The Ray actor that runs one rank of one job on one chosen GPU.

It is created with ``num_gpus=0`` and the per-GPU custom resource of its GPU
(see ``pcs_ray.executors.launch``), so Ray puts it on the right node but leaves GPU
visibility to us: the runner sets ``CUDA_VISIBLE_DEVICES`` to its GPU's
index before anything touches CUDA. It is a threaded actor (two threads):
``run`` trains while ``request_stop`` can still be delivered, and the loop
stops at the next step boundary.
"""

from __future__ import annotations

import os
import threading
import time
import traceback

import ray

from pcs_ray.contract import GPUSlot, RunOutcome, RunRequest
from pcs_ray.executors.handle import failed_outcome, rendezvous_address  # noqa: F401  (re-exported)


class Runner:
    """One rank of a job, pinned to ``gpu``."""

    def __init__(self, gpu: GPUSlot, rank: int, world_size: int, workload: str | None = None):
        self.created = time.time()
        self.gpu, self.rank, self.world_size = gpu, rank, world_size
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu.index)
        self._stop = threading.Event()
        self._boundaries = 0
        # Import the heavy modules now: with ``launch(after=...)`` this overlaps the previous run's stop.
        import importlib

        import pcs_ray.executors.training  # noqa: F401
        from pcs_ray.workloads.models import WORKLOADS

        for module in WORKLOADS[workload].imports if workload in WORKLOADS else ():
            importlib.import_module(module)
        self.warmed = time.time()

    def environment(self) -> dict:
        """What this runner was given: its GPU visibility, Ray resources, node and process."""
        context = ray.get_runtime_context()
        return {
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "resources": context.get_assigned_resources(),
            "node_id": context.get_node_id(),
            "pid": os.getpid(),
            "rank": self.rank,
            "gpu": (self.gpu.node, self.gpu.index),
        }

    def rendezvous(self) -> tuple[str, int]:
        return rendezvous_address()

    def request_stop(self) -> None:
        self._stop.set()

    def boundaries_passed(self) -> int:
        """How many step boundaries the training loop has reached (0: still starting up)."""
        return self._boundaries

    def _should_stop(self) -> bool:
        self._boundaries += 1
        return self._stop.is_set()

    def run(self, request: RunRequest, master: tuple[str, int] | None = None, after: object = None,
            launched: float | None = None) -> RunOutcome:
        """Train; ``after`` (an object ref Ray resolves before this starts) orders us behind a previous run."""
        timings = {"actor_created": self.created, "warmed": self.warmed, "run_called": time.time()}
        if launched is not None:
            timings["launched"] = launched
        return train_rank(request, self._should_stop, self.rank, self.world_size, master, timings)


def train_rank(request: RunRequest, should_stop, rank: int, world_size: int, master: tuple[str, int] | None,
               timings: dict, **hooks) -> RunOutcome:
    """One rank's run in this process: join the run's process group (DDP), train, leave it; failures become outcomes.

    Shared by the runners started for one run and the pool's warm runners, so both train the same way.
    ``hooks``: ``on_step`` and ``reporter`` of :func:`pcs_ray.executors.training.run_training`.
    """
    try:
        import torch.distributed as dist

        from pcs_ray.executors.rendezvous import join_group
        from pcs_ray.executors.training import run_training, uses_real_gpu

        if world_size > 1:
            join_group("nccl" if uses_real_gpu() else "gloo", master, rank, world_size)
        try:
            return run_training(request, should_stop, rank=rank, world_size=world_size, timings=timings, **hooks)
        finally:
            if world_size > 1 and dist.is_initialized():
                dist.destroy_process_group()
    except Exception as exc:
        return failed_outcome(request, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}", timings=timings)


RemoteRunner = ray.remote(Runner)
