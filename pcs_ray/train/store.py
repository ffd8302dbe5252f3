"""A job's checkpoints on disk: the newest complete one and the one before it, swapped atomically.

``STATE_DIR/checkpoints/<job>/latest/`` is the newest complete checkpoint and ``previous/`` the one
before it. A new checkpoint is copied into a hidden folder beside them, marked complete, and only
then renamed into place: at every instant at least one complete checkpoint exists, so a run killed
while committing loses nothing but the checkpoint it was writing. The marker file records the step
(the job's progress in its own units) so the coordinator reads it without opening the user's files,
and the metrics reported with it.

A job's checkpoint policy (``keep``, ``pcs_ray.train.config.checkpoint_spec``: Ray Train's
``CheckpointConfig``) keeps more beside those two: the newest ``num_to_keep``, or the ``num_to_keep``
best by the metric ``score_attribute``. A checkpoint pushed out of ``previous/`` that the policy keeps is
renamed to ``kept-<step>-<id>/``; those it no longer keeps are deleted at each commit.

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
KEPT_PREFIX = "kept-"


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
           origin: str | None = None, metrics: dict | None = None, keep: dict | None = None) -> Path:
    """Make ``source`` (a folder) the job's newest checkpoint at ``step``; returns its new path.

    ``move``: ``source`` belongs to us (a staging folder on the same file system): rename it
    instead of copying. Otherwise the caller may delete ``source`` as soon as this returns.
    ``run``: the run (attempt) committing. Several ranks of one run may each report a checkpoint at
    the same step (as Ray Train's examples do): commits are taken one at a time, and a later rank's
    files are merged into the checkpoint its run already made at that step, each file replaced atomically.
    ``origin``: where the checkpoint came from (the storage's folder it was downloaded from), kept in its marker.
    ``metrics``: what was reported with it, kept in its marker (a later rank's fill in names the first's lacked).
    ``keep``: the job's checkpoint policy (None: the newest two only; folders kept by a policy are left alone).
    """
    source, job_dir = Path(source), Path(job_dir)
    if not source.is_dir():
        raise ValueError(f"checkpoint {source}: not a directory")
    job_dir.mkdir(parents=True, exist_ok=True)
    with _locked(job_dir):
        marker = _complete(job_dir / LATEST)
        if run is not None and marker is not None and (marker["step"], marker.get("run")) == (int(step), run):
            _merge(source, job_dir / LATEST, move)
            if metrics and set(metrics) - set(marker.get("metrics") or {}):
                _write_marker(job_dir / LATEST, {**marker, "metrics": {**metrics, **(marker.get("metrics") or {})}})
            return job_dir / LATEST
        return _swap_in(job_dir, source, step, move, run, origin, metrics, keep)


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


def _write_marker(folder: Path, marker: dict) -> None:
    partial = folder / f".{MARKER}.{uuid.uuid4().hex[:8]}"
    partial.write_text(json.dumps(marker))
    fsync_path(partial)
    os.replace(partial, folder / MARKER)


def _swap_in(job_dir: Path, source: Path, step: int, move: bool, run: int | None, origin: str | None = None,
             metrics: dict | None = None, keep: dict | None = None) -> Path:
    incoming = job_dir / f".incoming-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if move:
        os.replace(source, incoming)
    else:
        shutil.copytree(source, incoming, symlinks=True)
    marker = {"step": int(step), "committed_at": time.time(), "run": run, **({"origin": origin} if origin else {}),
              **({"metrics": metrics} if metrics else {})}
    (incoming / MARKER).write_text(json.dumps(marker))
    for root, _, files in os.walk(incoming):
        for name in files:
            fsync_path(Path(root) / name)
    fsync_path(incoming)
    latest, previous = job_dir / LATEST, job_dir / PREVIOUS
    if _complete(latest) is not None:
        if previous.exists():
            dropped = _complete(previous)
            if keep is not None and dropped is not None and previous in chosen(_all(job_dir) + [(incoming, marker)], keep):
                os.replace(previous, job_dir / f"{KEPT_PREFIX}{dropped['step']}-{uuid.uuid4().hex[:8]}")
            else:
                shutil.rmtree(previous)
        os.replace(latest, previous)  # from here until the next line, ``previous`` is the newest
    elif latest.exists():
        shutil.rmtree(latest)  # an incomplete leftover: never a checkpoint
    os.replace(incoming, latest)
    fsync_path(job_dir)
    if keep is not None:
        found = _all(job_dir)
        wanted = chosen(found, keep)
        for folder, _ in found:
            if folder.name.startswith(KEPT_PREFIX) and folder not in wanted:
                shutil.rmtree(folder, ignore_errors=True)
    return latest


def chosen(found: list[tuple], keep: dict) -> set:
    """Which of ``found`` (``(name, marker)`` pairs, in any order) the policy ``keep`` keeps: the newest two
    always, and the newest ``num_to_keep`` or, with ``score_attribute``, the ``num_to_keep`` best by that
    metric (a checkpoint reported without it is never among the best; ties go to the newer)."""
    newest_first = sorted(found, key=lambda entry: -float(entry[1].get("committed_at") or 0))
    wanted = {name for name, _ in newest_first[:2]}
    count, attribute = keep.get("num_to_keep") or 0, keep.get("score_attribute")
    if attribute is None:
        return wanted | {name for name, _ in newest_first[:count]}
    sign = -1.0 if keep.get("score_order", "max") == "max" else 1.0
    scored = [(name, score) for name, marker in newest_first
              if (score := _score(marker, attribute)) is not None]
    scored.sort(key=lambda entry: sign * entry[1])  # stable: the newer of equal scores first
    return wanted | {name for name, _ in scored[:count]}


def _score(marker: dict, attribute: str) -> float | None:
    value = (marker.get("metrics") or {}).get(attribute)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


def _all(job_dir: Path) -> list[tuple[Path, dict]]:
    """Every complete checkpoint of the job, ``latest/``, ``previous/`` and those a policy kept, with its marker."""
    folders = [job_dir / LATEST, job_dir / PREVIOUS] + sorted(job_dir.glob(f"{KEPT_PREFIX}*"))
    return [(folder, marker) for folder in folders if (marker := _complete(folder)) is not None]


def kept(job_dir: str | Path) -> list[tuple[Path, dict]]:
    """The job's complete checkpoints (``latest/``, ``previous/`` and those its policy kept) with their markers
    (``step``, ``metrics`` ...), oldest first."""
    job_dir = Path(job_dir)
    return sorted(_all(job_dir), key=lambda entry: float(entry[1].get("committed_at") or 0)) if job_dir.is_dir() else []


def plain_metrics(metrics) -> dict:
    """``metrics`` as JSON values for a marker: numbers, strings, booleans and None as they are, a one-element
    tensor or array as its number, anything else as (at most 200 characters of) its text."""
    out = {}
    for key, value in dict(metrics or {}).items():
        if hasattr(value, "item") and getattr(value, "numel", lambda: getattr(value, "size", 1))() == 1:
            value = value.item()
        out[str(key)] = value if isinstance(value, (int, float, str, bool)) or value is None else str(value)[:200]
    return out


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
