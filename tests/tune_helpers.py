"""Helpers for the Tune tests (and ``bench/tune_overhead.py``): the uninterrupted reference run of a trial."""

from __future__ import annotations

from executors.tune_trial import held_out_loss, weights_digest


def reference_run(config: dict) -> dict:
    """The same training without Tune and without interruption: the final metrics a sweep must reproduce."""
    from executors.training import TrainingSession

    config = {**config, **config.get("variant", {})}
    session = TrainingSession(config["workload"], config.get("params"))
    per_iter = int(config.get("steps_per_iteration", 1))
    for _ in range(config["iterations"] * per_iter):
        session.train_step()
    return {"loss": held_out_loss(session), "step": session.step, "weights_sha256": weights_digest(session.model)}
