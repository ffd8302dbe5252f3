"""A job's checkpoints on disk: the newest complete one and the one before it, swapped atomically.

``STATE_DIR/checkpoints/<job>/latest/`` is the newest complete checkpoint and ``previous/`` the one
before it. A new checkpoint is copied into a hidden folder beside them, marked complete, and only
then renamed into place: at every instant at least one complete checkpoint exists, so a run killed
while committing loses nothing but the checkpoint it was writing. The marker file records the step
(the job's progress in its own units) so the coordinator reads it without opening the user's files.

Standard library only: the runners import it inside user runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

LATEST = "latest"
PREVIOUS = "previous"
MARKER = ".pcs-ray-checkpoint.json"
LOCK = ".pcs-ray-commit.lock"


def fsync_path(path: str | Path) -> None:
    """Flush a file or folder to disk (a rename is durable once its folder is); errors are ignored."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _complete(folder: Path) -> dict | None:
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and isinstance(marker.get("step"), int) else None


def commit(job_dir: str | Path, source: str | Path, step: int, *, move: bool = False, run: int | None = None,
           origin: str | None = None) -> Path:
    """Make ``source`` (a folder) the job's newest checkpoint at ``step``; returns its new path.

    ``move``: ``source`` belongs to us (a staging folder on the same file system): rename it
    instead of copying. Otherwise the caller may delete ``source`` as soon as this returns.
    ``run``: the run (attempt) committing. Several ranks of one run may each report a checkpoint at
    the same step (as Ray Train's examples do): commits are taken one at a time, and a later rank's
    files are merged into the checkpoint its run already made at that step, each file replaced atomically.
    ``origin``: where the checkpoint came from (the storage's folder it was downloaded from), kept in its marker.
    """
    source, job_dir = Path(source), Path(job_dir)
    if not source.is_dir():
        raise ValueError(f"checkpoint {source}: not a directory")
    job_dir.mkdir(parents=True, exist_ok=True)
    with _locked(job_dir):
        marker = _complete(job_dir / LATEST)
        if run is not None and marker is not None and (marker["step"], marker.get("run")) == (int(step), run):
            _merge(source, job_dir / LATEST, move)
            return job_dir / LATEST
        return _swap_in(job_dir, source, step, move, run, origin)


@contextmanager
def _locked(job_dir: Path):
    """The job's commit lock (a ``flock`` on a file beside its checkpoints)."""
    with open(job_dir / LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _merge(source: Path, into: Path, move: bool) -> None:
    for path in sorted(source.rglob("*")):
        if path.is_dir() or path.name == MARKER:
            continue
        target = into / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
        shutil.copy2(path, partial)
        fsync_path(partial)
        os.replace(partial, target)
    if move:
        shutil.rmtree(source, ignore_errors=True)


def _swap_in(job_dir: Path, source: Path, step: int, move: bool, run: int | None, origin: str | None = None) -> Path:
    incoming = job_dir / f".incoming-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if move:
        os.replace(source, incoming)
    else:
        shutil.copytree(source, incoming, symlinks=True)
    marker = {"step": int(step), "committed_at": time.time(), "run": run, **({"origin": origin} if origin else {})}
    (incoming / MARKER).write_text(json.dumps(marker))
    for root, _, files in os.walk(incoming):
        for name in files:
            fsync_path(Path(root) / name)
    fsync_path(incoming)
    latest, previous = job_dir / LATEST, job_dir / PREVIOUS
    if _complete(latest) is not None:
        if previous.exists():
            shutil.rmtree(previous)
        os.replace(latest, previous)  # from here until the next line, ``previous`` is the newest
    elif latest.exists():
        shutil.rmtree(latest)  # an incomplete leftover: never a checkpoint
    os.replace(incoming, latest)
    fsync_path(job_dir)
    return latest


def staging(job_dir: str | Path) -> Path:
    """A fresh folder beside the checkpoints to write one into (then :func:`commit` with ``move``)."""
    path = Path(job_dir) / f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


def checkpoints(job_dir: str | Path) -> list[tuple[Path, int]]:
    """The complete checkpoints, newest first: (folder, step)."""
    out = []
    for name in (LATEST, PREVIOUS):
        folder = Path(job_dir) / name
        marker = _complete(folder)
        if marker is not None:
            out.append((folder, marker["step"]))
    return out


def newest(job_dir: str | Path) -> tuple[Path, int] | None:
    """The newest complete checkpoint (folder, step), or None before the first."""
    found = checkpoints(job_dir)
    return found[0] if found else None


def remove_leftovers(job_dir: str | Path) -> list[Path]:
    """Delete the half-copied folders a killed run left (call while no run of the job writes)."""
    job_dir = Path(job_dir)
    stale = [p for p in job_dir.glob(".incoming-*")] + [p for p in job_dir.glob(".staging-*")] if job_dir.is_dir() else []
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale
