"""The checks of a job's ``torch_config`` and ``checkpoint_config`` (Ray Train's ``TorchConfig`` and
``CheckpointConfig``, as ``pcs_ray.train.config`` builds them or a job file gives them), each problem one line.
Standard library only: the job file's validation and the training contract both read it."""

from __future__ import annotations

from typing import Any

KEPT_CHECKPOINTS = 2  # pcs-ray always keeps a job's newest complete checkpoint and the one before it (pcs_ray.train.store)
MAX_KEPT = 100  # checkpoints a job may keep: each is a model's worth of disk (or bucket)


def checkpoint_spec(raw: Any) -> dict | None:
    """A job's checkpoint policy checked and normalised: ``{"num_to_keep": K}`` (the newest K) or with
    ``score_attribute`` and ``score_order`` (the K best); None where it keeps no more than the newest two.
    Raises ``ValueError`` with one line."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"num_to_keep", "score_attribute", "score_order"}:
        raise ValueError(f"checkpoint_config: got {raw!r}; give a mapping of num_to_keep, score_attribute and "
                         "score_order")
    keep, attribute, order = raw.get("num_to_keep"), raw.get("score_attribute"), raw.get("score_order", "max")
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or not 1 <= keep <= MAX_KEPT):
        raise ValueError(f"num_to_keep: got {keep!r}; give 1 to {MAX_KEPT} or None (each kept checkpoint is a "
                         "model's worth of storage)")
    if order not in ("max", "min"):
        raise ValueError(f"checkpoint_score_order: got {order!r}; give 'max' or 'min'")
    if attribute is None:
        return {"num_to_keep": keep} if keep is not None and keep > KEPT_CHECKPOINTS else None
    if not isinstance(attribute, str) or not attribute:
        raise ValueError(f"checkpoint_score_attribute: got {attribute!r}; give the name of a reported metric")
    if keep is None:
        raise ValueError("checkpoint_score_attribute needs num_to_keep; give how many of the best to keep (pcs-ray "
                         "does not keep every checkpoint)")
    return {"num_to_keep": keep, "score_attribute": attribute, "score_order": order}


def torch_spec(raw: Any) -> dict | None:
    """A job's ``torch_config`` checked: ``backend`` (None, ``"nccl"`` or ``"gloo"``) and ``timeout_s``
    (seconds, > 0). Raises ``ValueError`` with one line."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"backend", "timeout_s"}:
        raise ValueError(f"torch_config: got {raw!r}; give a mapping of backend and timeout_s")
    backend, timeout = raw.get("backend"), raw.get("timeout_s", 1800)
    if backend not in (None, "nccl", "gloo"):
        raise ValueError(f"backend: got {backend!r}; give 'nccl', 'gloo' or None (NCCL on GPUs, gloo on logical ones)")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 7 * 86400:
        raise ValueError(f"timeout_s: got {timeout!r}; give seconds, above 0 and at most a week")
    return {"backend": backend, "timeout_s": timeout}
