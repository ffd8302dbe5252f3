"""Ray Train's ``ray.train.torch`` under the same names: ``prepare_model``, ``prepare_data_loader``
(in the training function) and ``TorchTrainer`` (in the driver; read on first use, since it needs the
coordinator's client, which a loop inside a run never imports). Importing this module imports no torch."""

from __future__ import annotations

import importlib

import pcs_ray.train as train


def prepare_model(model):
    """The model on this rank's device, in DDP when the run has several ranks (see ``pcs_ray.train``)."""
    return train.prepare_model(model)


def get_device():
    """This rank's ``torch.device`` (its GPU, or the CPU on a logical GPU)."""
    import torch

    return torch.device(train.get_context().device)


def get_devices() -> list:
    """This rank's devices: one, its own."""
    return [get_device()]


def prepare_optimizer(optimizer):
    """``optimizer`` as it is (Ray wraps it only for its automatic mixed precision, which pcs-ray does not set up)."""
    return optimizer


def backward(tensor) -> None:
    """``tensor.backward()``, as Ray's helper does without mixed precision."""
    tensor.backward()


def enable_reproducibility(seed: int = 0) -> None:
    """Seed torch, numpy and ``random`` and ask torch for deterministic kernels, as Ray's helper does."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def prepare_data_loader(loader):
    """``loader`` with each rank reading its own share of the data (a ``DistributedSampler``) when the
    run has several ranks, and batches moved to this rank's device."""
    import torch
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    context = train.get_context()
    if context.world_size > 1 and not isinstance(getattr(loader, "sampler", None), DistributedSampler):
        sampler = DistributedSampler(loader.dataset, num_replicas=context.world_size, rank=context.world_rank,
                                     shuffle=not isinstance(loader.sampler, torch.utils.data.SequentialSampler))
        loader = DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=sampler,
                            num_workers=loader.num_workers, collate_fn=loader.collate_fn, drop_last=loader.drop_last)
    device = torch.device(context.device)
    return _OnDevice(loader, device) if device.type != "cpu" else loader


class _OnDevice:
    def __init__(self, loader, device):
        self.loader, self.device = loader, device

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):  # sampler (``set_epoch``), dataset, batch_size: the wrapped loader's
        return getattr(self.loader, name)

    def __iter__(self):
        for batch in self.loader:
            yield [b.to(self.device) if hasattr(b, "to") else b for b in batch] if isinstance(batch, (list, tuple)) else batch.to(self.device)


def __getattr__(name: str):
    if name == "TorchTrainer":
        return importlib.import_module("pcs_ray.train.trainer.torch_trainer").TorchTrainer
    if name in ("TorchConfig", "accelerate"):
        from pcs_ray.train.config import refuse

        raise refuse(f"pcs_ray.train.torch.{name}", "pcs-ray sets up torch.distributed itself (NCCL on GPUs, gloo "
                     "on logical ones) and no mixed precision; drop it")
    raise AttributeError(f"module 'pcs_ray.train.torch' has no attribute {name!r}")
