"""Inside a Tune trial that pcs-ray schedules: pinning to the assigned GPUs, and a deterministic trainable.

The scheduler (``executors.tune_scheduler``) gives a trial its GPUs as
per-GPU custom resources (``node0_gpu3``) with ``num_gpus=0``, so Ray leaves
``CUDA_VISIBLE_DEVICES`` alone. :func:`pinned` wraps a trainable so that the
trial sets it (:func:`pin_trial_gpus`) before any of the user's code runs;
``executors.tune.PCSTuner`` applies it to every trainable it is given.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import time

_GPU_RESOURCE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*_gpu(?P<index>\d+))(?:_group_.*)?$")


def assigned_gpu_resources() -> list[str]:
    """The pcs-ray per-GPU resources (``node0_gpu3``) this actor holds, placement-group suffixes removed."""
    import ray

    names = set()
    for key in ray.get_runtime_context().get_assigned_resources():
        m = _GPU_RESOURCE.match(key)
        if m:
            names.add(m.group("name"))
    return sorted(names, key=lambda n: (n.rsplit("_gpu", 1)[0], int(n.rsplit("_gpu", 1)[1])))


def pin_trial_gpus() -> list[str]:
    """Make CUDA see exactly the GPUs the coordinator chose for this trial; returns their resource names.

    A trial started by ``PCSTuner`` (or with :func:`pinned`) is pinned already, so a trainable no longer
    needs to call this; calling it again sets the same values. Outside a pcs-ray trial (no per-GPU
    resource held) it changes nothing, so the same trainable still runs under plain Tune.
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA number GPUs as NVML (and the resource names) do.
    """
    names = assigned_gpu_resources()
    if names:
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(_GPU_RESOURCE.match(n).group("index") for n in names)
    return names


def pinned(trainable):
    """``trainable`` pinned to its trial's GPUs before it runs, otherwise the same trainable.

    A function (also one from ``tune.with_parameters`` / ``tune.with_resources``, or a generator)
    becomes a function of the same signature, name and attributes that pins, then calls it; a
    ``tune.Trainable`` class becomes a subclass that pins before its ``setup``. Pinning happens when
    the trial starts, so code that touches CUDA while its module is imported still sees every GPU.
    Anything else (a registered name, a Ray Train trainer) is returned as it is.
    """
    if getattr(trainable, "_pcs_pinned", False) or isinstance(trainable, str):
        return trainable
    from ray.tune import Trainable

    if inspect.isclass(trainable):
        if not issubclass(trainable, Trainable):
            return trainable

        class Pinned(trainable):
            _pcs_pinned = True

            def __init__(self, *args, **kwargs):
                pin_trial_gpus()
                super().__init__(*args, **kwargs)

        Pinned.__name__, Pinned.__qualname__ = trainable.__name__, trainable.__qualname__
        Pinned.__module__ = trainable.__module__
        return Pinned
    if not callable(trainable) or hasattr(trainable, "as_trainable"):
        return trainable
    if inspect.isgeneratorfunction(trainable):
        @functools.wraps(trainable)
        def run(*args, **kwargs):
            pin_trial_gpus()
            yield from trainable(*args, **kwargs)
    else:
        @functools.wraps(trainable)
        def run(*args, **kwargs):
            pin_trial_gpus()
            return trainable(*args, **kwargs)
    run._pcs_pinned = True
    return run


def session_trainable(config: dict) -> None:
    """Train a registered workload (``executors.training.TrainingSession``) as a Tune function trainable.

    ``config``: ``workload``, ``params`` (lr, momentum, seed, ...), ``iterations``,
    ``steps_per_iteration``, optionally ``sleep_s`` (stretch each iteration: a slower trial) and
    ``variant`` (a grid point given as a dict, merged into the config). Every iteration reports ``iter_s``
    (its own compute time), ``loss`` (:func:`held_out_loss`: what an inner scheduler such as ASHA
    compares), ``step``, ``weights_sha256`` (:func:`weights_digest`: shows a resumed trial is bitwise
    the run that never stopped) and the GPUs it ran on, with a checkpoint of the whole session
    (model, optimizer, RNG, data position), so a pause at any result loses nothing.
    """
    import tempfile

    from ray import tune

    from executors.checkpoint import load_checkpoint, save_checkpoint
    from executors.training import TrainingSession

    config = {**config, **config.get("variant", {})}
    gpus = assigned_gpu_resources()
    session = TrainingSession(config["workload"], config.get("params"))
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            session.restore(load_checkpoint(d).state)
    per_iter = int(config.get("steps_per_iteration", 1))
    while session.step < config["iterations"] * per_iter:
        began = time.perf_counter()
        for _ in range(per_iter):
            session.train_step()
        time.sleep(float(config.get("sleep_s", 0.0)))
        metrics = {"iter_s": time.perf_counter() - began, "loss": held_out_loss(session), "step": session.step,
                   "weights_sha256": weights_digest(session.model), "gpu_resources": ",".join(gpus), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                   "pid": os.getpid()}
        with tempfile.TemporaryDirectory() as d:
            save_checkpoint(d, session.snapshot(session.rng_states()))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))


def held_out_loss(session, n: int = 32) -> float:
    """Cross-entropy on the dataset's first ``n`` samples (eval mode: no RNG draws, no BatchNorm updates)."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import default_collate

    inputs, targets = default_collate([session.dataset[i] for i in range(min(n, len(session.dataset)))])
    session.model.eval()
    with torch.no_grad():
        loss = float(F.cross_entropy(session.model(inputs.to(session.device)), targets.to(session.device)))
    session.model.train()
    return loss


def weights_digest(model) -> str:
    """SHA-256 over every parameter and buffer, bit for bit."""
    import hashlib

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
