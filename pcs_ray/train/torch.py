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


def prepare_data_loader(data_loader, add_dist_sampler: bool = True, move_to_device: bool = True,
                        auto_transfer: bool = True):
    """``data_loader`` with each rank reading its share of each epoch's one global order, from where the job's
    checkpoint left it (``pcs_ray.train.data_loader``), and batches moved to this rank's device. Without
    ``add_dist_sampler`` the loader reads as it is (every rank the whole dataset) and only moves batches."""
    import pcs_ray.train.data_loader as data_loader_module

    if add_dist_sampler:
        return data_loader_module.resumable(data_loader, move_to_device=move_to_device)
    import torch

    device = torch.device(train.get_context().device)
    return data_loader_module.OnDevice(data_loader, device) if move_to_device and device.type != "cpu" else data_loader


def __getattr__(name: str):
    if name == "TorchTrainer":
        return importlib.import_module("pcs_ray.train.trainer.torch_trainer").TorchTrainer
    if name in ("TorchConfig", "accelerate"):
        from pcs_ray.train.config import refuse

        raise refuse(f"pcs_ray.train.torch.{name}", "pcs-ray sets up torch.distributed itself (NCCL on GPUs, gloo "
                     "on logical ones) and no mixed precision; drop it")
    raise AttributeError(f"module 'pcs_ray.train.torch' has no attribute {name!r}")
