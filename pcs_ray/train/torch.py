"""Ray Train's ``ray.train.torch`` under the same names: ``prepare_model``, ``prepare_data_loader``,
``accelerate``, ``prepare_optimizer``, ``backward`` (in the training function), ``TorchConfig`` and
``TorchTrainer`` (in the driver; read on first use, since it needs the coordinator's client, which a loop
inside a run never imports). Importing this module imports no torch.

``accelerate(amp=True)``, before ``prepare_model`` as in Ray: the model's forward runs under autocast and
``prepare_optimizer``/``backward`` scale the loss. On a GPU that is float16 with a ``GradScaler``, as in Ray; on a
logical GPU (the CPU) bfloat16, which needs no scaling (said once in the rank's log).
"""

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


class Accelerator:
    """A run's mixed precision choice: autocast for the model's forward and, on a GPU, a ``GradScaler``."""

    def __init__(self, amp: bool, device: str):
        import torch

        self.amp = amp
        self.device_type = "cuda" if device.startswith("cuda") else "cpu"
        self.dtype = torch.float16 if self.device_type == "cuda" else torch.bfloat16
        self.scaler = torch.amp.GradScaler("cuda") if amp and self.device_type == "cuda" else None

    def wrap_forward(self, model):
        """``model`` whose ``forward`` runs under autocast (before DDP wraps it, as Ray does)."""
        if not self.amp:
            return model
        import functools

        import torch

        forward = model.forward

        @functools.wraps(forward)
        def autocast_forward(*args, **kwargs):
            with torch.autocast(self.device_type, dtype=self.dtype):
                return forward(*args, **kwargs)

        model.forward = autocast_forward
        return model


def accelerator(create: bool = True) -> Accelerator | None:
    """This run's accelerator; without one yet, the default (full precision) is set when ``create``."""
    session = train.current()
    if session.accelerator is None and create:
        session.accelerator = Accelerator(False, session.context.device)
    return session.accelerator


def accelerate(amp: bool = False) -> None:
    """Train with automatic mixed precision (``amp``); call it once, before ``prepare_model`` and the others."""
    session = train.current()
    if session.accelerator is not None:
        raise RuntimeError("An accelerator has already been set: call train.torch.accelerate() once, before "
                           "prepare_model and the other train.torch helpers")
    session.accelerator = Accelerator(bool(amp), session.context.device)
    if amp and session.accelerator.scaler is None:
        session.say_once("accelerate(amp=True) on a logical GPU (the CPU): autocast to bfloat16, no gradient scaling")


_scaled = None


def scaled_optimizer_class():
    """An ``Optimizer`` (so that LR schedulers take it) whose ``step`` goes through a ``GradScaler``, all else the
    wrapped optimizer's (Ray's ``_WrappedOptimizer``); made on first use, so that importing this module needs no torch."""
    global _scaled
    if _scaled is not None:
        return _scaled
    import torch

    class ScaledOptimizer(torch.optim.Optimizer):
        def __init__(self, optimizer, scaler):  # no Optimizer.__init__: the state is the wrapped one's
            self.optimizer, self.scaler = optimizer, scaler

        state = property(lambda self: self.optimizer.state, lambda self, v: setattr(self.optimizer, "state", v))
        param_groups = property(lambda self: self.optimizer.param_groups,
                                lambda self, v: setattr(self.optimizer, "param_groups", v))
        defaults = property(lambda self: self.optimizer.defaults,
                            lambda self, v: setattr(self.optimizer, "defaults", v))

        def add_param_group(self, param_group):
            self.optimizer.add_param_group(param_group)

        def load_state_dict(self, state_dict):
            self.optimizer.load_state_dict(state_dict)

        def state_dict(self):
            return self.optimizer.state_dict()

        def zero_grad(self, set_to_none: bool = True):
            self.optimizer.zero_grad(set_to_none=set_to_none)

        def step(self, closure=None):
            if closure is not None:
                raise NotImplementedError("a closure cannot be used with mixed precision's gradient scaling")
            self.scaler.step(self.optimizer)
            self.scaler.update()

        def __repr__(self):
            return f"ScaledOptimizer({self.optimizer!r})"

    _scaled = ScaledOptimizer
    return _scaled


def prepare_optimizer(optimizer):
    """``optimizer``, stepping through the gradient scaler where mixed precision needs one (a GPU's float16)."""
    scaler = accelerator().scaler
    return optimizer if scaler is None else scaled_optimizer_class()(optimizer, scaler)


def backward(tensor) -> None:
    """``tensor.backward()``, the loss scaled first where mixed precision needs it (a GPU's float16)."""
    scaler = accelerator().scaler
    (tensor if scaler is None else scaler.scale(tensor)).backward()


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
    if name == "TorchConfig":
        return importlib.import_module("pcs_ray.train.config").TorchConfig
    raise AttributeError(f"module 'pcs_ray.train.torch' has no attribute {name!r}")
