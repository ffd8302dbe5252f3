"""The contract a user's training loop is written against; Ray Train's names, so a loop ports by its import.

::

    import pcs_ray.train as train

    def train_loop(config):
        ctx = train.get_context()                 # world_size, world_rank, local_rank, device, total_steps ...
        model = train.prepare_model(build(config))  # on ctx.device, wrapped in DDP when world_size > 1
        step = 0
        if (ckpt := train.get_checkpoint()) is not None:   # None on a first start
            step = load(ckpt, model)
        while step < ctx.total_steps:
            step += 1
            loss = one_step(model)
            if train.should_checkpoint():         # the coordinator wants the GPUs: every rank agrees
                d = train.checkpoint_dir()        # or any folder of yours
                save(d, model, step)
                train.report({"loss": loss}, step=step, checkpoint=d)  # does not return: the run ends here
            train.report({"loss": loss}, step=step)

* ``report(metrics, *, step, checkpoint=None)``: every rank calls it at the same steps. ``step`` is
  the job's progress in its own units (the job file's ``steps`` counts the same units); without it
  each report counts one step. Any rank, or several, passes ``checkpoint`` (a folder; several ranks'
  files at one step are merged into one checkpoint): pcs-ray copies it
  under ``checkpoints/<job>/`` of the cluster's storage (``pcs-ray start --storage s3://...``) or,
  without one, of its ``STATE_DIR``, atomically, so the caller may delete it when the call
  returns (a folder from :func:`checkpoint_dir` is moved, not copied).
* ``should_checkpoint()``: true once the coordinator wants the job's GPUs back (preemption,
  resize, migration, ``pcs-ray stop``). Every rank must call it at the same steps; all get the same
  answer. The next report with a checkpoint ends the run (also in a loop that never asks: a Ray
  Train loop that checkpoints at every epoch is stopped at its next epoch's report), which resumes from it on whatever GPUs
  and world size the policy gives next. A loop that does not checkpoint within the operator's
  grace period is stopped anyway, resumes from its newest checkpoint and the steps it lost are
  counted. ``get_preemption_info()`` asks the same question the Ray Train way.
* A loop that raises is restarted from its newest checkpoint while the job's ``max_failures`` allow
  (0 by default), then fails its job (its traceback's last lines are in ``pcs-ray status``, and each
  failed run's in the job's runs); a loop that returns before ``total_steps`` finishes its job at the
  step it last reported. ``total_steps`` is None for a job that gave none: it ends when the loop returns.

The driver side is Ray Train's too: ``pcs_ray.train.torch.TorchTrainer`` with ``ScalingConfig``,
``RunConfig``, ``FailureConfig``, ``CheckpointConfig`` and ``Result`` (``pcs_ray.train.config``,
``pcs_ray.train.result``), or ``pcs_ray.train.Trainer`` with pcs-ray's own argument names.
``Checkpoint(path, filesystem=None)`` is Ray Train's too: a local folder, or a URI (``s3://...``)
whose files ``to_directory()`` / ``as_directory()`` download.

Outside a pcs-ray run a local stand-in answers (one rank, no checkpoint, never asked to stop), so
a loop can be tried as a plain script. Importing this module needs neither Ray nor the
coordinator; torch is imported only by the calls that need it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from pcs_ray.train.session import CheckpointPath, RunStopped, TrainContext, current

Checkpoint = CheckpointPath  # ``Checkpoint.from_directory(d)`` as in Ray Train; it is just the path

__all__ = [
    "Checkpoint", "CheckpointConfig", "DataConfig", "FailureConfig", "Result", "RunConfig", "RunStopped", "ScalingConfig",
    "TrainContext", "Trainer", "TrainingFailedError", "UnsupportedOptionError", "checkpoint_dir", "get_checkpoint",
    "get_context", "get_dataset_shard", "get_preemption_info", "prepare_model", "report", "should_checkpoint", "torch",
]

# Names read on first use, so that a loop importing this module pays for none of them: Ray Train's driver
# objects (``from pcs_ray.train import RunConfig, ScalingConfig``), ``train.torch`` (torch itself is imported
# only by the calls that need it), and the driver side, which needs the coordinator's client.
LAZY = {
    "ScalingConfig": "pcs_ray.train.config", "RunConfig": "pcs_ray.train.config",
    "FailureConfig": "pcs_ray.train.config", "CheckpointConfig": "pcs_ray.train.config",
    "UnsupportedOptionError": "pcs_ray.train.config", "Result": "pcs_ray.train.result",
    "Trainer": "pcs_ray.train.trainer", "TrainingFailedError": "pcs_ray.train.trainer",
    "DataConfig": "pcs_ray.train.datasets",
}


def get_context() -> TrainContext:
    """This rank's context: ``world_size``, ``world_rank``, ``local_rank``, ``device``, ``job_id``,
    ``attempt`` and ``total_steps``."""
    return current().context


def get_checkpoint() -> CheckpointPath | None:
    """The folder of the job's newest checkpoint (a ``str``), or None on a first start."""
    return current().get_checkpoint()


def report(metrics: Mapping | None = None, *, step: int | None = None, checkpoint: Any = None) -> None:
    """Progress (``step``, in the job's own units) and metrics; optionally a checkpoint folder."""
    current().report(metrics, step, checkpoint)


def get_dataset_shard(name: str | None = None):
    """This rank's shard of the dataset ``name`` given to ``TorchTrainer(datasets=...)``: Ray Data's iterator
    calls (``iter_torch_batches``, ``iter_batches``), each one pass of an epoch that resumes exactly after a
    preemption or a resize (``pcs_ray.train.datasets``)."""
    from pcs_ray.train.datasets import get_dataset_shard as shard

    return shard(name)


def should_checkpoint() -> bool:
    """True once the coordinator wants this job's GPUs back: report a checkpoint now."""
    return current().should_checkpoint()


def get_preemption_info() -> dict | None:
    """Ray Train's spelling of :func:`should_checkpoint`: None, or what is asked of the run."""
    session = current()
    return {"reason": session.stop_reason or "preemption"} if session.should_checkpoint() else None


def checkpoint_dir() -> str:
    """A fresh folder to write a checkpoint into, on the checkpoints' own file system (reporting it
    moves it into place instead of copying it)."""
    return current().staging_dir()


def prepare_model(model):
    """Move ``model`` to this rank's device and wrap it in DistributedDataParallel when the run has
    several ranks (``torch.distributed`` is already initialised then, NCCL on GPUs, gloo otherwise); its forward
    runs under autocast after ``train.torch.accelerate(amp=True)``."""
    import torch

    context = current().context
    model = model.to(torch.device(context.device))
    model = importlib.import_module("pcs_ray.train.torch").accelerator().wrap_forward(model)
    if context.world_size > 1:
        ids = [0] if context.device.startswith("cuda") else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    return model


# Ray Train names that mean nothing under pcs-ray: reaching one says why and what to do, in one line.
WITHOUT_MEANING = {
    "SyncConfig": "pcs-ray keeps checkpoints in the cluster's storage (pcs-ray start --storage) or its STATE_DIR "
                  "itself, nothing to sync; drop SyncConfig",
    "Callback": "no Ray Train controller runs to call it; read Result.metrics_dataframe after fit()",
}


def __getattr__(name: str):
    if name == "torch":
        return importlib.import_module("pcs_ray.train.torch")
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    if name in WITHOUT_MEANING:
        from pcs_ray.train.config import refuse

        raise refuse(f"pcs_ray.train.{name}", WITHOUT_MEANING[name])
    raise AttributeError(f"module 'pcs_ray.train' has no attribute {name!r}")
