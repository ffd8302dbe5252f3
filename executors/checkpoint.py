"""Atomic, verified training checkpoints with one level of fallback.

A preempted or killed job must never lose more than one checkpoint interval,
so a checkpoint is written to a temporary file, fsynced, and renamed over
``latest.ckpt`` (an atomic replace); the checkpoint it replaces is kept as
``previous.ckpt`` (hard link, so ``latest.ckpt`` exists at every instant).
Each file starts with a one-line JSON header holding the SHA-256 of the
payload and the step; loading verifies the digest and falls back to the
previous checkpoint, with a warning, when the latest is damaged. Payloads are
plain ``torch.save`` dicts of tensors and Python scalars, loaded with
``weights_only=True`` (no pickled code runs on load).

torch and NumPy are imported inside the functions that need them, so the
launcher's light processes (the watcher reads ``peek_step``) stay small.

Checkpoint directories must be on storage every node can read when jobs move
between nodes (a shared file system on a real cluster).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import random
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pcs_ray.train.store import fsync_path

LATEST = "latest.ckpt"
PREVIOUS = "previous.ckpt"
MAGIC = "pcs-ray-checkpoint"
FORMAT_VERSION = 1

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """No usable checkpoint although some exist (every candidate is damaged)."""


class CheckpointFallbackWarning(UserWarning):
    """The newest checkpoint was unusable; an older one was loaded instead."""


@dataclass(frozen=True)
class LoadedCheckpoint:
    state: dict
    path: Path
    fell_back: bool


def save_checkpoint(directory: str | Path, state: dict) -> Path:
    """Write ``state`` as the new latest checkpoint of ``directory``; keep the old one as previous."""
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    header = {"magic": MAGIC, "version": FORMAT_VERSION, "sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload), "step": state.get("step")}
    tmp = directory / f".{LATEST}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(json.dumps(header).encode() + b"\n")
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    latest = directory / LATEST
    if latest.exists():
        keep = directory / f".{PREVIOUS}.{os.getpid()}.tmp"
        keep.unlink(missing_ok=True)
        try:
            os.link(latest, keep)
        except OSError:
            shutil.copy2(latest, keep)
        os.replace(keep, directory / PREVIOUS)
    os.replace(tmp, latest)
    fsync_path(directory)
    return latest


def remove_stale_temporaries(directory: str | Path) -> list[Path]:
    """Delete half-written files a killed writer left behind (call when no writer of this job runs)."""
    stale = [p for p in Path(directory).glob(".*.tmp")] if Path(directory).is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def _read_verified(path: Path) -> dict:
    import torch

    with open(path, "rb") as f:
        header_line = f.readline(4096)
        payload = f.read()
    try:
        header = json.loads(header_line)
    except ValueError:
        raise CheckpointError(f"{path}: not a pcs-ray checkpoint (bad header)") from None
    if not isinstance(header, dict) or header.get("magic") != MAGIC:
        raise CheckpointError(f"{path}: not a pcs-ray checkpoint")
    if len(payload) != header.get("bytes") or hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise CheckpointError(f"{path}: digest mismatch (truncated or corrupted)")
    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)


def load_checkpoint(directory: str | Path) -> LoadedCheckpoint | None:
    """The newest valid checkpoint in ``directory``, or None when there is none at all.

    A damaged latest checkpoint falls back to the previous one and warns
    (``CheckpointFallbackWarning`` and the log); when every present
    checkpoint is damaged a ``CheckpointError`` is raised rather than
    silently restarting from scratch.
    """
    import pcs_ray.train.store as store

    directory = Path(directory)
    problems = []
    # The run's committed checkpoint folders (newest first), each holding this module's file; then the
    # files a coordinator of an earlier layout wrote straight into the job's folder.
    committed = [folder / LATEST for folder, _ in store.checkpoints(directory)]
    for path in committed + [directory / LATEST, directory / PREVIOUS]:
        name = path.name if path.parent == directory else f"{path.parent.name}/{path.name}"
        if not path.exists():
            if path == directory / LATEST and (directory / PREVIOUS).exists():
                problems.append(f"{name}: missing")  # never happens by our writes: latest always exists
            continue
        try:
            state = _read_verified(path)
        except Exception as exc:  # any unreadable file: try the next one
            problems.append(f"{name}: {exc}")
            continue
        if problems:
            message = f"checkpoint of {directory} unusable ({'; '.join(problems)}); resuming from {name} (step {state.get('step')})"
            warnings.warn(message, CheckpointFallbackWarning, stacklevel=2)
            log.warning(message)
        return LoadedCheckpoint(state, path, fell_back=bool(problems))
    if problems:
        raise CheckpointError(f"no usable checkpoint in {directory}: {'; '.join(problems)}")
    return None


def peek_step(directory: str | Path) -> int | None:
    """The step recorded in the newest checkpoint's header (unverified; cheap); for a user run's
    checkpoint folders, their completion marker's (``pcs_ray.train.store``)."""
    import pcs_ray.train.store as store

    found = store.newest(directory)
    if found is not None:
        return found[1]
    for name in (LATEST, PREVIOUS):
        try:
            with open(Path(directory) / name, "rb") as f:
                return int(json.loads(f.readline(4096))["step"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


# ------------------------------------------------------------------ RNG states


def capture_rng_state() -> dict[str, Any]:
    """The torch, CUDA, NumPy and Python RNG states, as ``weights_only``-loadable values."""
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state` (CUDA states only when the device count matches)."""
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
