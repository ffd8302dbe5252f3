"""Pinning a Tune trial to the GPUs pcs-ray assigned it, before the user's trainable runs.

The scheduler (``pcs_ray.executors.tune_scheduler``) gives a trial its GPUs as
per-GPU custom resources (``node0_gpu3``) with ``num_gpus=0``, so Ray leaves
``CUDA_VISIBLE_DEVICES`` alone. :func:`pinned` wraps a trainable so that its
trial sets it (:func:`pin_trial_gpus`) first; ``pcs_ray.executors.tune.PCSTuner``
applies it to every trainable it is given, so the trainable calls nothing of
pcs-ray. The wrapped trainable's class derives from :class:`PinnedTrainable`,
which is how the scheduler tells a pinned trainable from one that is not.
"""

from __future__ import annotations

import functools
import inspect
import os
import re

_GPU_RESOURCE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*_gpu(?P<index>\d+))(?:_group_.*)?$")


def is_gpu_resource(name: str) -> bool:
    """Whether a Ray resource is one of pcs-ray's per-GPU ones (``node0_gpu3``, or a placement group's share of one)."""
    return _GPU_RESOURCE.match(name) is not None


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

    A trial whose trainable went through :func:`pinned` (every ``PCSTuner`` trial) is pinned already,
    so a trainable no longer needs to call this; calling it again sets the same values. Outside a
    pcs-ray trial (no per-GPU resource held) it changes nothing, so the same trainable still runs
    under plain Tune. ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA number GPUs as NVML (and the
    resource names) do.
    """
    names = assigned_gpu_resources()
    if names:
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(_GPU_RESOURCE.match(n).group("index") for n in names)
    return names


class PinnedTrainable:
    """Mixin of a pinned trainable's class: pins when Tune creates the trial's actor, before ``setup``."""

    def __init__(self, *args, **kwargs) -> None:
        pin_trial_gpus()
        super().__init__(*args, **kwargs)


def pinned(trainable):
    """``trainable`` pinned to its trial's GPUs before it runs, otherwise the same trainable.

    A ``tune.Trainable`` class becomes a subclass (same name) that pins before its ``setup``. A
    function (also one from ``tune.with_parameters`` / ``tune.with_resources``, or a generator)
    becomes a function of the same signature, name and attributes that pins, then calls it; Tune
    makes its class from ``__mixins__``, which gain :class:`PinnedTrainable`. Pinning happens when
    the trial starts, so code that touches CUDA while its module is imported still sees every GPU.
    Anything else (a registered name, a Ray Train trainer) is returned as it is.
    """
    from ray.tune import Trainable

    if inspect.isclass(trainable):
        if not issubclass(trainable, Trainable) or issubclass(trainable, PinnedTrainable):
            return trainable
        cls = type(trainable.__name__, (PinnedTrainable, trainable), {"__module__": trainable.__module__})
        cls.__qualname__ = trainable.__qualname__
        return cls
    mixins = getattr(trainable, "__mixins__", ())
    if isinstance(trainable, str) or not callable(trainable) or hasattr(trainable, "as_trainable") or (
            PinnedTrainable in mixins):
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
    run.__mixins__ = (PinnedTrainable, *mixins)
    return run
