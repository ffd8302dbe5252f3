"""A ``DataLoader`` whose epochs resume where the job's checkpoint left them, on any world size.

:func:`resumable` rebuilds a map-style ``DataLoader`` (its own dataset, batch size, ``collate_fn``, workers,
``drop_last``; shuffled when its sampler was a ``RandomSampler`` or a shuffling ``DistributedSampler``) so
that each pass reads this rank's share of the epoch's global order from the job's position in it
(``pcs_ray.train.data_order``). The position advances as each batch is handed to the loop, so a checkpoint
reported after a step counts that step's batch. A loader that cannot be resumed exactly (an iterable
dataset, a sampler of its own) is sharded as Ray Train does, with a ``DistributedSampler``, and the rank's
log says once that its epochs restart after a preemption.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

from pcs_ray.train.session import current

PASSED_ON = ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn", "multiprocessing_context",
             "generator", "persistent_workers", "pin_memory_device")


def order_of(loader: DataLoader) -> dict | None:
    """``shuffle``, ``seed`` and ``drop_last`` of a loader whose order pcs-ray can own, else None."""
    if isinstance(loader.dataset, IterableDataset) or loader.batch_size is None:
        return None
    if not isinstance(loader.batch_sampler, BatchSampler) or type(loader.batch_sampler) is not BatchSampler:
        return None
    sampler = loader.sampler
    if type(sampler) is RandomSampler and not sampler.replacement and sampler.num_samples == len(loader.dataset):
        return {"shuffle": True, "seed": 0, "drop_last": loader.drop_last}
    if type(sampler) is SequentialSampler:
        return {"shuffle": False, "seed": 0, "drop_last": loader.drop_last}
    if type(sampler) is DistributedSampler:
        return {"shuffle": sampler.shuffle, "seed": sampler.seed, "drop_last": loader.drop_last or sampler.drop_last}
    return None


class EpochSampler:
    """What a ported loop reaches as ``loader.sampler``: ``set_epoch`` is accepted, since the stream counts
    its epochs itself (restored from the checkpoint), and ``len`` is this rank's share of a pass."""

    def __init__(self, stream):
        self.stream = stream

    def set_epoch(self, epoch: int) -> None:
        pass

    def __len__(self) -> int:
        return self.stream.batches_per_pass() * self.stream.batch_size


class ResumableLoader:
    """Each pass: this rank's batches of the epoch from the job's position, moved to ``device`` when given."""

    def __init__(self, loader: DataLoader, stream, device: torch.device | None = None):
        self.loader, self.stream, self.device = loader, stream, device
        self.sampler = EpochSampler(stream)
        self.dataset, self.batch_size, self.drop_last = loader.dataset, loader.batch_size, loader.drop_last

    def __len__(self) -> int:
        return self.stream.batches_per_pass()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def __iter__(self):
        batches = [b for b in self.stream.begin() if len(b.indices)]
        options = {name: getattr(self.loader, name) for name in PASSED_ON if hasattr(self.loader, name)}
        if options.get("num_workers"):
            options["prefetch_factor"] = self.loader.prefetch_factor
        inner = DataLoader(self.loader.dataset, batch_sampler=[b.indices.tolist() for b in batches], **options)
        for batch, planned in zip(inner, batches):
            self.stream.consumed(planned)  # handed out counts: a checkpoint after this step includes it
            yield batch if self.device is None else to_device(batch, self.device)
        self.stream.ended()


def to_device(batch, device: torch.device):
    """``batch`` (a tensor, or a list, tuple or dict of them) on ``device``."""
    if hasattr(batch, "to"):
        return batch.to(device)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch) if type(batch) in (list, tuple) else batch
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


def next_name(prefix: str = "data_loader") -> str:
    """``data_loader-<n>``: loaders are named in the order a run prepares them, the same in every run."""
    taken = sum(1 for name in current().streams if name.startswith(prefix + "-"))
    return f"{prefix}-{taken}"


def resumable(loader: DataLoader, *, move_to_device: bool = True, name: str | None = None):
    """``loader`` as a :class:`ResumableLoader` (see the module's doc), or sharded with a ``DistributedSampler``
    where its order cannot be owned."""
    session = current()
    context = session.context
    device = torch.device(context.device) if move_to_device else None
    if device is not None and device.type == "cpu":
        device = None
    order = order_of(loader)
    if order is None:
        session.say_once("this data loader's epochs cannot be resumed exactly (an iterable dataset or a sampler "
                         "of its own): after a preemption or a resize its epoch starts over")
        if context.world_size > 1 and not isinstance(loader.sampler, DistributedSampler) \
                and not isinstance(loader.dataset, IterableDataset):
            sampler = DistributedSampler(loader.dataset, num_replicas=context.world_size, rank=context.world_rank,
                                         shuffle=not isinstance(loader.sampler, SequentialSampler))
            loader = DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=sampler,
                                num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                                drop_last=loader.drop_last)
        return OnDevice(loader, device) if device is not None else loader
    stream = session.stream(name or next_name(), len(loader.dataset), batch_size=loader.batch_size, **order)
    return ResumableLoader(loader, stream, device)


class OnDevice:
    """A loader whose batches are moved to ``device``."""

    def __init__(self, loader, device):
        self.loader, self.device = loader, device

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):  # sampler (``set_epoch``), dataset, batch_size: the wrapped loader's
        return getattr(self.loader, name)

    def __iter__(self):
        for batch in self.loader:
            yield to_device(batch, self.device)
