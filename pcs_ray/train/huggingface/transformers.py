"""Ray Train's ``ray.train.huggingface.transformers`` under the same names, so a ``transformers.Trainer``
script ports by its imports::

    import pcs_ray.train as train
    from pcs_ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    trainer = Trainer(model=model, args=TrainingArguments(...), train_dataset=ds)
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    if (ckpt := train.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            trainer.train(resume_from_checkpoint=os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.train()

* :class:`RayTrainReportCallback` reports each save of the Trainer as Ray's does: the folder it wrote
  (``checkpoint-<step>``), as ``checkpoint/`` of the reported checkpoint, with the metrics logged so far. At
  every optimizer step it also asks :func:`pcs_ray.train.should_checkpoint` (every rank, at the same steps):
  once the coordinator wants the GPUs back it makes the Trainer save, and reporting that save ends the run.
  The steps between saves are reported without a checkpoint (progress, and proof the run is alive).
* :func:`prepare_trainer` makes the Trainer's train data loader a resumable one
  (``pcs_ray.train.data_loader``): each epoch is one seeded global order of the dataset, the job's position
  in it is kept in each checkpoint, and a run on any world size reads its share from there. Hugging Face's
  own resume arithmetic (epochs done = steps done // steps per epoch, then skip the batches of the epoch
  already seen) holds only on the world size that wrote the checkpoint, so the prepared Trainer takes its
  epochs from the stream instead: it starts at the stream's epoch, each epoch is as many steps as the
  rank's share of that pass, it skips no batch (the stream already starts where the job was), and
  ``max_steps`` is the steps done plus the steps the epochs left take on this world size. Each epoch thus
  trains every sample once across preemptions and resizes, and training ends after ``num_train_epochs``.
  (``args.ignore_data_skip`` is set, as nothing is to be skipped.) With ``max_steps`` given, training ends
  at that step, the job's own count. The learning-rate schedule is built for the steps the run has left, so
  after a resize it ends where the training does.

Not exact: a train dataset pcs-ray cannot order (an ``IterableDataset``, ``group_by_length``) is sharded
with a ``DistributedSampler`` and its epoch starts over after a stop (the rank's log says so); a run that
starts with fewer samples left in its epoch than ranks has some ranks re-read one of them (as the data order
does for every loop), so that DDP has a batch on every rank.

When the run has several ranks, the variables Hugging Face and accelerate read to find the process group
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` ...) are set from the run's context on import
(pcs-ray has joined ``torch.distributed`` already), so the Trainer wraps its model in DDP over that group;
on an emulated GPU (the CPU) accelerate is told to use the CPU.
"""

from __future__ import annotations

import math
import os
import shutil
import sys

try:
    import accelerate  # noqa: F401  (the Trainer needs it)
    import transformers
    import transformers.trainer
    from transformers.trainer_callback import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError:
    raise ImportError("pcs_ray.train.huggingface.transformers needs transformers and accelerate: "
                      "pip install 'pcs-ray[transformers]'") from None

import pcs_ray.train as train
from pcs_ray.train.data_loader import ResumableLoader, order_of
from pcs_ray.train.data_order import global_batches
from pcs_ray.train.session import current

__all__ = ["RayTrainReportCallback", "prepare_trainer"]

STREAM = "transformers-train"  # the train loader's data stream, by name in every checkpoint


def set_distributed_environment() -> dict:
    """Tell accelerate that a run of several ranks on logical GPUs (the CPU) is distributed: pcs-ray sets
    torchrun's variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` ...) for every run, but accelerate sees no
    distributed run on a CPU unless told to use it. Returns what was set."""
    context = current().context
    if context.world_size <= 1 or context.device != "cpu":
        return {}
    os.environ["ACCELERATE_USE_CPU"] = "true"
    return {"ACCELERATE_USE_CPU": "true"}


class RayTrainReportCallback(TrainerCallback):
    """Reports the Trainer's saves and progress to pcs-ray, and makes it save when pcs-ray asks.

    A reported checkpoint holds the Trainer's own folder (``checkpoint-<step>``) as ``CHECKPOINT_NAME``;
    resume with ``trainer.train(resume_from_checkpoint=os.path.join(d, CHECKPOINT_NAME))``. The metrics
    reported are every value logged so far, the latest of each (as Ray's callback reports them).
    """

    CHECKPOINT_NAME = "checkpoint"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.metrics: dict = {}

    def on_train_begin(self, args, state, control, **kwargs):
        self.metrics = {}
        for log in state.log_history:
            self.metrics.update(log)

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.metrics.update(logs or {})

    def on_step_end(self, args, state, control, **kwargs):
        """Every rank at every optimizer step: save now if the coordinator wants the GPUs, else report progress
        (a save already due reports it instead)."""
        stream = current().streams.get(STREAM)
        if stream is not None and stream.size:
            state.epoch = stream.epoch + stream.position / stream.size  # the stream's count, exact across resizes
        if train.should_checkpoint():
            control.should_save = True
        elif not control.should_save:
            train.report(dict(self.metrics), step=state.global_step)

    def on_save(self, args, state, control, **kwargs):
        """Report the folder the Trainer just wrote. Rank 0 reports all of it; another rank only its own
        files (its RNG state), which pcs-ray merges into the same checkpoint."""
        source = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if not os.path.isdir(source):
            source = transformers.trainer.get_last_checkpoint(args.output_dir)
        context = train.get_context()
        if context.world_size > 1:
            import torch.distributed as dist

            dist.barrier()  # the main process has written the model and the optimizer
        folder = train.checkpoint_dir()
        if source is not None:
            target = os.path.join(folder, self.CHECKPOINT_NAME)
            if context.world_rank == 0:
                shutil.copytree(source, target)
            else:
                own = f"rng_state_{context.world_rank}.pth"
                os.makedirs(target, exist_ok=True)
                if os.path.isfile(os.path.join(source, own)):
                    shutil.copy2(os.path.join(source, own), os.path.join(target, own))
        train.report(dict(self.metrics), step=state.global_step, checkpoint=folder)

    def on_train_end(self, args, state, control, **kwargs):
        train.report(dict(self.metrics), step=state.global_step)


def prepare_trainer(trainer):
    """``trainer`` with a train data loader whose epochs resume exactly on any world size, and its epoch
    and step accounting taken from that loader (see the module's doc). Returns the same object."""
    set_distributed_environment()
    base = trainer.__class__
    if getattr(base, "prepared_by_pcs_ray", False):
        return trainer
    trainer.__class__ = type(base.__name__, (ResumingTrainer, base), {"prepared_by_pcs_ray": True})
    trainer.args.ignore_data_skip = True  # the stream starts where the job was: Hugging Face must skip nothing
    return trainer


class ResumingTrainer:
    """Mixed in before the user's Trainer class by :func:`prepare_trainer`."""

    resumed_global_step = 0

    def get_train_dataloader(self):
        """The Trainer's own loader (its collator, columns, workers, sampler), made resumable instead of
        being sharded by accelerate: the stream gives each rank its share."""
        accelerator = self.accelerator
        accelerator.prepare = lambda loader: loader  # this one call only: the stream shards it
        try:
            loader = super().get_train_dataloader()
        finally:
            del accelerator.prepare
        order = order_of(loader)
        if order is None:
            return train.torch.prepare_data_loader(loader, move_to_device=False)  # sharded; says it is not exact
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        order = {**order, "seed": seed if order["shuffle"] else 0}
        stream = current().stream(STREAM, len(loader.dataset), batch_size=loader.batch_size, **order)
        if stream.resumed and stream.batches_per_pass() == 0:
            stream.begin()  # the checkpoint was taken after the epoch's last batch: that epoch is done
            stream.ended()
        return ResumableLoader(loader, stream)

    def _inner_training_loop(self, *args, **kwargs):
        resume_from = kwargs.get("resume_from_checkpoint")
        self.resumed_global_step = 0
        if resume_from is not None:
            path = os.path.join(resume_from, transformers.trainer.TRAINER_STATE_NAME)
            if os.path.isfile(path):
                self.resumed_global_step = transformers.TrainerState.load_from_json(path).global_step
        return super()._inner_training_loop(*args, **kwargs)

    def set_initial_training_values(self, args, dataloader):
        """Steps per epoch on this world size, and ``max_steps`` as the steps done plus those of the epochs left."""
        values = super().set_initial_training_values(args, dataloader)
        if not isinstance(dataloader, ResumableLoader):
            return values
        epochs, _, examples, samples, total_batch, _, max_steps = values
        stream, accumulation = dataloader.stream, args.gradient_accumulation_steps
        full = len(global_batches(stream.size, stream.world_size, stream.batch_size, stream.drop_last))
        per_epoch = max(math.ceil(full / accumulation), 1)
        if args.max_steps > 0:
            epochs = sys.maxsize  # ends at max_steps, the job's own count
        else:
            epochs = math.ceil(args.num_train_epochs)
            left = max(epochs - stream.epoch, 0)
            this_pass = math.ceil(len(dataloader) / accumulation)
            max_steps = self.resumed_global_step + (this_pass + (left - 1) * per_epoch if left else 0)
        return epochs, per_epoch, examples, samples, total_batch, full, max_steps

    def _init_training_state(self, *args, **kwargs):
        """The epoch to start at is the stream's, and no batch is skipped."""
        epochs_trained, skipped = super()._init_training_state(*args, **kwargs)
        stream = current().streams.get(STREAM)
        return (stream.epoch, 0) if stream is not None else (epochs_trained, skipped)

    def _run_epoch(self, *args, **kwargs):
        """One pass of the stream: as many steps as this rank's batches in it (the rest of a resumed epoch, or
        a whole one on this world size); a pass whose last batch was trained is the stream's epoch done."""
        loader = kwargs.get("train_dataloader")
        if not isinstance(loader, ResumableLoader):
            return super()._run_epoch(*args, **kwargs)
        batches = len(loader)
        kwargs["steps_in_epoch"] = batches
        kwargs["num_update_steps_per_epoch"] = max(math.ceil(batches / self.args.gradient_accumulation_steps), 1)
        result = super()._run_epoch(*args, **kwargs)
        stream = loader.stream
        if stream.current is not None and (not stream.current or stream.position == stream.current[-1].position_after):
            stream.ended()
        return result


set_distributed_environment()  # before the script builds its TrainingArguments, which read it
