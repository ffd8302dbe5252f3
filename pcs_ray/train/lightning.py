"""Ray Train's ``ray.train.lightning`` under the same names, so a ``lightning.Trainer`` script ports by its imports.

::

    from pcs_ray.train.lightning import (RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback,
                                         prepare_trainer)

    trainer = pl.Trainer(devices="auto", accelerator="auto", strategy=RayDDPStrategy(),
                         plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()],
                         enable_checkpointing=False)
    trainer = prepare_trainer(trainer)
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            trainer.fit(model, train_dataloaders=dl, ckpt_path=os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.fit(model, train_dataloaders=dl)

* The strategies take rank, world and device from the run (``torch.distributed`` is pcs-ray's group, or, on
  one rank, one Lightning makes and this module ends with the fit).
* The training loader's epochs resume exactly (``pcs_ray.train.data_loader``): its dataset is read in each
  epoch's one global order from the job's position, on any world size. Its ``len`` is a whole epoch's batches
  at this world size; on a resume mid-epoch Lightning's batch counter is moved to where that world size
  stands, so the epoch ends after the samples left, each seen once, and Lightning's epoch is the stream's.
  The order is the one Lightning's own ``DistributedSampler`` would give (shuffled under these strategies,
  seeded by ``seed_everything``), read off the loader Lightning hands over; that sampler is never iterated.
  A loader pcs-ray cannot own (an iterable dataset, a sampler of its own) is sharded as Lightning does, and
  its epoch starts over after a resume.
* :class:`RayTrainReportCallback` reports a checkpoint (``checkpoint.ckpt``, Lightning's own) at each
  epoch's end, as Ray's does, and after any batch once pcs-ray wants the GPUs back (``should_checkpoint``);
  that report ends the run (:class:`~pcs_ray.train.RunStopped`, which Lightning lets through). Every other
  batch reports its progress (``step``: the optimizer steps, ``trainer.global_step``).

Lightning is preferred; ``pytorch_lightning`` is used where only it is installed.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pcs_ray.train as train


class MissingExtra(ImportError):
    """Lightning is not installed."""


try:
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.environments import LightningEnvironment
    from lightning.pytorch.trainer.states import RunningStage
except ImportError:
    try:
        import pytorch_lightning as pl
        from pytorch_lightning.plugins.environments import LightningEnvironment
        from pytorch_lightning.trainer.states import RunningStage
    except ImportError:
        raise MissingExtra("pcs_ray.train.lightning needs Lightning: pip install 'pcs-ray[lightning]'") from None

import torch

from pcs_ray.train.data_loader import ResumableLoader, resumable
from pcs_ray.train.data_order import global_batches

__all__ = ["RayDDPStrategy", "RayDeepSpeedStrategy", "RayFSDPStrategy", "RayLightningEnvironment",
           "RayTrainReportCallback", "prepare_trainer"]

STREAM = "lightning-train"  # the training loaders' streams: lightning-train-0, -1, ... (stable across runs)


class TrainLoader(ResumableLoader):
    """A resumable loader as Lightning needs it: ``len`` is this rank's batches in a whole epoch at this world
    size (Lightning counts the batches of an epoch once per fit), the pass reads from the job's position."""

    def __len__(self) -> int:
        stream = self.stream
        return len(global_batches(stream.size, stream.world_size, stream.batch_size, stream.drop_last))

    def left(self) -> int:
        """The batches of the pass to come (the restored epoch's rest, or a whole epoch)."""
        return self.stream.batches_per_pass()

    # Lightning's ``_Stateful``: it then knows the loader resumes mid-epoch. The position itself travels in
    # pcs-ray's own file of the same checkpoint, read when the stream was made, so loading does nothing.
    def state_dict(self) -> dict:
        return self.stream.state()

    def load_state_dict(self, state_dict: dict) -> None:
        pass


class RayStrategyMixin:
    """What every Ray strategy here adds to Lightning's: the run's device, its training order, a group of its own
    ended at teardown."""

    @property
    def root_device(self) -> torch.device:
        return torch.device(train.get_context().device)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return dict(num_replicas=self.world_size, rank=self.global_rank)

    def setup_distributed(self) -> None:
        self._own_group = not (torch.distributed.is_available() and torch.distributed.is_initialized())
        super().setup_distributed()

    def setup(self, trainer) -> None:
        self._trainer_ref, self._datasets, self._progress_moved = trainer, [], False
        super().setup(trainer)

    def process_dataloader(self, dataloader: object) -> object:
        dataloader = super().process_dataloader(dataloader)
        trainer = getattr(self, "_trainer_ref", None)
        if trainer is None or trainer.state.stage != RunningStage.TRAINING:
            return dataloader
        return self._train_loader(trainer, dataloader)

    def _train_loader(self, trainer, dataloader: object) -> object:
        """``dataloader`` read in the job's resumable order; on a resume, Lightning's batch count moved to match."""
        if isinstance(dataloader, ResumableLoader):
            loader = TrainLoader(dataloader.loader, dataloader.stream)
        elif isinstance(dataloader, torch.utils.data.DataLoader):
            dataset = dataloader.dataset
            if not any(d is dataset for d in self._datasets):
                self._datasets.append(dataset)
            index = next(i for i, d in enumerate(self._datasets) if d is dataset)
            made = resumable(dataloader, move_to_device=False, name=f"{STREAM}-{index}")
            if not isinstance(made, ResumableLoader):
                return made  # sharded as Lightning does; its epochs restart (the rank's log says so)
            loader = TrainLoader(made.loader, made.stream)
        else:
            return dataloader
        if (trainer.fit_loop.restarting or trainer.fit_loop.is_resuming) and not self._progress_moved:
            self._progress_moved = True
            self._move_progress(trainer, loader)
        return loader

    @staticmethod
    def _move_progress(trainer, loader: TrainLoader) -> None:
        """Make Lightning's restored place in the epoch the stream's.

        Lightning restores its batch counter and runs its loader from the start until ``len`` batches are
        counted, so a counter from another world size would end the epoch early or late, and one restored at an
        epoch's end makes the next epoch end before its first batch. The counter's four stages are shifted
        alike, so Lightning's own restart rules still apply: mid-epoch, to the whole epoch's batches less the
        batches left; after an epoch's last batch, to the end (Lightning then counts that epoch done); at an
        epoch's end, to the next epoch's start. In the last two the stream moves on to the next epoch too."""
        progress = trainer.fit_loop.epoch_loop.batch_progress
        stream, epochs = loader.stream, trainer.fit_loop.epoch_progress.total
        at_end = epochs.processed > epochs.completed  # saved in on_train_epoch_end
        if (at_end or progress.is_last_batch or loader.left() == 0) and stream.resumed and stream.position > 0:
            stream.ended()
        if at_end:
            progress.reset_on_run()
            return
        target = len(loader) if progress.is_last_batch else len(loader) - loader.left()
        shift = target - progress.current.ready
        for stage in ("ready", "started", "processed", "completed"):
            setattr(progress.current, stage, getattr(progress.current, stage) + shift)

    def teardown(self) -> None:
        super().teardown()
        if getattr(self, "_own_group", False) and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()  # one rank's group, made by Lightning for this fit
            self._own_group = False


class RayDDPStrategy(RayStrategyMixin, pl.strategies.DDPStrategy):
    """Lightning's ``DDPStrategy`` on the run's ranks (see the module's doc); its arguments are Lightning's."""


def needs_a_gpu(name: str) -> None:
    """Refuse ``name`` on a rank whose device is the CPU (a logical GPU): torch's FSDP and DeepSpeed need a real one."""
    if not train.get_context().device.startswith("cuda"):
        from pcs_ray.train.config import refuse

        raise refuse(name, "needs a real GPU (torch's FSDP and DeepSpeed have no CPU device) and this rank's "
                     "device is the CPU; use RayDDPStrategy on logical GPUs")


class RayFSDPStrategy(RayStrategyMixin, pl.strategies.FSDPStrategy):
    """Lightning's ``FSDPStrategy`` on the run's ranks (on real GPUs); each rank's shard of a sharded checkpoint
    is reported."""

    def __init__(self, *args, **kwargs):
        needs_a_gpu("RayFSDPStrategy")
        super().__init__(*args, **kwargs)


class RayDeepSpeedStrategy(RayStrategyMixin, pl.strategies.DeepSpeedStrategy):
    """Lightning's ``DeepSpeedStrategy`` on the run's ranks (on real GPUs, with DeepSpeed installed)."""

    def __init__(self, *args, **kwargs):
        needs_a_gpu("RayDeepSpeedStrategy")
        super().__init__(*args, **kwargs)


class RayLightningEnvironment(LightningEnvironment):
    """Lightning's cluster environment answered by the run: world size and ranks are the run's, and its
    processes are made by pcs-ray (Lightning launches none)."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    def world_size(self) -> int:
        return train.get_context().get_world_size()

    def global_rank(self) -> int:
        return train.get_context().get_world_rank()

    def local_rank(self) -> int:
        return train.get_context().get_local_rank()

    def node_rank(self) -> int:
        return train.get_context().get_node_rank()

    def set_world_size(self, size: int) -> None:
        pass

    def set_global_rank(self, rank: int) -> None:
        pass

    def teardown(self) -> None:
        pass


STRATEGIES = (RayDDPStrategy, RayFSDPStrategy, RayDeepSpeedStrategy)


def prepare_trainer(trainer):
    """``trainer`` checked as Ray checks it: one of this module's strategies, and its environment."""
    if not isinstance(trainer.strategy, STRATEGIES):
        raise RuntimeError(f"Invalid strategy class: {type(trainer.strategy)}. To use PyTorch Lightning with "
                           f"pcs-ray, the strategy object should be one of {[c.__name__ for c in STRATEGIES]} "
                           "class or its subclass.")
    environment = getattr(trainer.strategy, "cluster_environment", None)
    if environment is not None and not isinstance(environment, RayLightningEnvironment):
        raise RuntimeError("Invalid cluster environment plugin. The expected class is "
                           f"`pcs_ray.train.lightning.RayLightningEnvironment` but got {type(environment)}!")
    return trainer


class RayTrainReportCallback(pl.callbacks.Callback):
    """Reports Lightning's checkpoint (``CHECKPOINT_NAME`` in the reported folder) with
    ``trainer.callback_metrics`` at each epoch's end, and after the first batch at which pcs-ray wants the
    GPUs back (that report ends the run); each other batch reports its step. ``checkpoint_upload_mode`` is
    accepted and changes nothing: a checkpoint is kept before ``report`` returns."""

    CHECKPOINT_NAME = "checkpoint.ckpt"

    def __init__(self, checkpoint_upload_mode=None, validation=False) -> None:
        super().__init__()
        if validation:
            from pcs_ray.train.config import refuse

            raise refuse("RayTrainReportCallback(validation=...)", "pcs-ray runs no validation of reported "
                         "checkpoints; validate in the LightningModule (validation_step)")
        self.checkpoint_upload_mode = checkpoint_upload_mode

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            return  # the epoch's end reports, with a checkpoint, right after
        if train.should_checkpoint():  # every rank asks here, at the same batches
            self._report(trainer, {"epoch": trainer.current_epoch, "step": trainer.global_step})
        else:
            train.report({"epoch": trainer.current_epoch}, step=trainer.global_step)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        metrics = {k: (v.item() if hasattr(v, "item") else v) for k, v in trainer.callback_metrics.items()}
        metrics["epoch"], metrics["step"] = trainer.current_epoch, trainer.global_step
        self._report(trainer, metrics)

    def _report(self, trainer, metrics: dict) -> None:
        """Every rank saves (Lightning's save is collective; a rank that wrote nothing reports no folder)."""
        folder = train.checkpoint_dir()
        try:
            trainer.save_checkpoint(os.path.join(folder, self.CHECKPOINT_NAME), weights_only=False)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if not os.listdir(folder):
            shutil.rmtree(folder, ignore_errors=True)
            folder = None
        train.report(metrics, step=trainer.global_step, checkpoint=folder)
