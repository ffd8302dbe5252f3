"""Inside a Tune trial that pcs-ray schedules: a deterministic trainable, and pinning for old code.

:func:`session_trainable` trains a registered workload. Pinning lives in
``pcs_ray.executors.tune_pin``; :func:`pin_trial_gpus` is importable from here too, as
trainables written before pcs-ray pinned trials itself call it.
"""

from __future__ import annotations

import os
import time

from pcs_ray.executors.tune_pin import assigned_gpu_resources, pin_trial_gpus, pinned

__all__ = ["assigned_gpu_resources", "held_out_loss", "pin_trial_gpus", "pinned", "reference_run", "session_trainable",
           "weights_digest"]


def session_trainable(config: dict) -> None:
    """Train a registered workload (``pcs_ray.executors.training.TrainingSession``) as a Tune function trainable.

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

    from pcs_ray.executors.checkpoint import load_checkpoint, save_checkpoint
    from pcs_ray.executors.training import TrainingSession

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


def reference_run(config: dict) -> dict:
    """A trial's training without Tune and without interruption: the final metrics a sweep must reproduce."""
    from pcs_ray.executors.training import TrainingSession

    config = {**config, **config.get("variant", {})}
    session = TrainingSession(config["workload"], config.get("params"))
    per_iter = int(config.get("steps_per_iteration", 1))
    for _ in range(config["iterations"] * per_iter):
        session.train_step()
    return {"loss": held_out_loss(session), "step": session.step, "weights_sha256": weights_digest(session.model)}
