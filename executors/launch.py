"""Start, stop and kill jobs on exactly the GPUs placement chose.

``launch(request)`` creates one :class:`pcs_ray.executors.runner.Runner` actor per GPU
(for the user's own code, one :class:`pcs_ray.executors.user_run.UserRank` with the job's runtime_env)
in ``request.gpus`` with ``num_gpus=0`` and the GPU's custom resource
(``<node>_gpu<i>``, see ``pcs_ray.cluster.resources``). That resource exists only on
its own node, so it also pins the actor to the node (no separate node
affinity is needed, and jobs spanning nodes work the same way). Several GPUs
mean data-parallel training (torch DDP, one rank per GPU, rank 0 on the
first GPU).

``RunHandle.done`` is an object ref that resolves to a
:class:`pcs_ray.contract.RunOutcome` in every case: finished, preempted, or
failed (a crash, or a runner killed by :meth:`RunHandle.kill`; then ``step``
is the newest checkpoint's step, where the next launch resumes). A small
zero-CPU watcher task produces it and frees the GPUs when the run ends.
"""

from __future__ import annotations

import time

import ray

from pcs_ray.contract import RunOutcome, RunRequest
from pcs_ray.executors.handle import RunHandle, watch_ranks
from pcs_ray.executors.runner import RemoteRunner
from pcs_ray.cluster.resources import gpu_resource


def launch(request: RunRequest, after: ray.ObjectRef | None = None) -> RunHandle:
    """Start (or resume from its checkpoint) ``request`` on exactly ``request.gpus``.

    ``after``: the ``done`` ref of the job's previous run, when that run is
    still stopping. The new runners start at once (process start and imports
    overlap the stop) and begin restoring only once it has ended, so a
    migration to other GPUs costs less than stop-then-launch. GPUs the old
    run still holds are simply waited for by Ray.
    """
    if not request.gpus:
        raise ValueError(f"job {request.job_id}: no GPUs given")
    if len(set(request.gpus)) != len(request.gpus):
        raise ValueError(f"job {request.job_id}: a GPU is listed twice in {request.gpus}")
    if request.total_steps is not None and request.total_steps < 0:
        raise ValueError(f"job {request.job_id}: total_steps must be >= 0")
    if request.code is not None:
        from pcs_ray.executors.user_run import launch_user

        return launch_user(request, after)
    world_size = len(request.gpus)
    launched = time.time()
    actors = [
        RemoteRunner.options(
            num_cpus=0,
            num_gpus=0,
            resources={gpu_resource(slot.node, slot.index): 1},
            max_concurrency=2,
            max_restarts=0,
            name=None,
        ).remote(slot, rank, world_size, request.workload)
        for rank, slot in enumerate(request.gpus)
    ]
    master = actors[0].rendezvous.remote() if world_size > 1 else None
    runs = [actor.run.remote(request, master, after, launched) for actor in actors]
    return RunHandle(request, actors, watch_ranks.remote(request, actors, runs))


def stop(handle: RunHandle, grace_s: float) -> RunOutcome:
    """Request a stop; kill the runners if they have not stopped within ``grace_s`` seconds.

    Blocks for at most ``grace_s`` (plus the kill). A killed job resumes from
    its last checkpoint at its next launch.
    """
    handle.request_stop()
    ready, _ = ray.wait([handle.done], timeout=grace_s)
    if not ready:
        handle.kill()
    return ray.get(handle.done)
