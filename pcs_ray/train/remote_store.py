"""A job's checkpoints in the storage, committed atomically, and each node's cache of them.

Under ``checkpoints/<job>/`` a checkpoint is a folder of objects ``data/<run>-<step>/r<rank>/...`` (each
rank that reported one uploads its own files), a part per rank naming its files with their SHA-256
(``data/<run>-<step>/parts/rank-<r>.json``), and last the small manifest ``latest.json`` naming the
folder; the manifest it replaces becomes ``previous.json``. Objects are written before the manifest
that names them, so a torn or partial upload is never named; a reader checks every digest and falls
back to ``previous.json`` where one does not match. A job's checkpoint policy (``pcs_ray.train.store``) keeps
more: their manifests are listed in ``kept.json``, written before the manifests that stop naming them. Folders
named by no manifest are deleted after a commit. Each manifest carries the metrics reported with its checkpoint.

A rank restores by :func:`pull`: the newest manifest's files, downloaded into the node's cache (the
local checkpoint folder the rank then trains from, ``pcs_ray.train.store``'s layout) unless the cache
already holds that checkpoint.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from pcs_ray.storage.objects import Storage, StorageError
import pcs_ray.train.store as store

LATEST = "latest.json"
PREVIOUS = "previous.json"
KEPT = "kept.json"
CACHE_ENV = "PCS_RAY_CACHE"


def cache_root(storage_uri: str) -> Path:
    """This node's cache of what the storage ``storage_uri`` holds (``$PCS_RAY_CACHE``, else the temp folder)."""
    base = os.environ.get(CACHE_ENV) or os.path.join(tempfile.gettempdir(), "pcs-ray-cache")
    return Path(base) / hashlib.sha1(storage_uri.encode()).hexdigest()[:12]


def local_paths(storage_uri: str, job_id: str, attempt: int) -> tuple[Path, Path]:
    """Where a rank on this node keeps the job's checkpoints and writes this attempt's logs."""
    root = cache_root(storage_uri)
    return root / "checkpoints" / str(job_id), root / "logs" / str(job_id) / f"attempt-{attempt}"


def job_prefix(job_id: str) -> str:
    return f"checkpoints/{job_id}"


def manifest(storage: Storage, job_id: str, name: str = LATEST) -> dict | None:
    return _manifest_at(storage, f"{job_prefix(job_id)}/{name}")


def _manifest_at(storage: Storage, key: str) -> dict | None:
    raw = storage.read(key)
    try:
        found = json.loads(raw) if raw else None
    except ValueError:
        return None
    return found if _is_manifest(found) else None


def _is_manifest(found) -> bool:
    return isinstance(found, dict) and isinstance(found.get("step"), int) and isinstance(found.get("folder"), str)


def _kept_list(storage: Storage, prefix: str) -> list[dict]:
    raw = storage.read(f"{prefix}/{KEPT}")
    try:
        found = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [entry for entry in found if _is_manifest(entry)] if isinstance(found, list) else []


def kept_checkpoints(storage: Storage, prefix: str = "") -> list[tuple[str, dict]]:
    """The job's committed checkpoints (``prefix``: its folder in ``storage``, ``checkpoints/<job>``; empty where
    ``storage`` is opened at it): each one's URI (rank 0's files, as :func:`remote_url`) with its manifest
    (``step``, ``metrics`` ...), oldest first."""
    base = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    found = {}
    for entry in [_manifest_at(storage, f"{base}{LATEST}"), _manifest_at(storage, f"{base}{PREVIOUS}"),
                  *_kept_list(storage, base.rstrip("/"))]:
        if entry is not None:
            found.setdefault(entry["folder"], entry)
    ordered = sorted(found.values(), key=lambda entry: float(entry.get("committed_at") or 0))
    return [(storage.url(f"{base}{entry['folder']}/r0"), entry) for entry in ordered]


def remote_step(storage: Storage, job_id: str) -> int | None:
    """The step of the job's newest committed checkpoint in the storage (None: none yet)."""
    found = manifest(storage, job_id)
    return found["step"] if found else None


def remote_url(storage: Storage, job_id: str) -> str | None:
    """Where the newest committed checkpoint's files are (``Result.checkpoint``'s path)."""
    found = manifest(storage, job_id)
    return storage.url(f"{job_prefix(job_id)}/{found['folder']}/r0") if found else None


def job_url(checkpoint_url: str) -> str:
    """The job's folder in the storage (``.../checkpoints/<job>``) of a URI :func:`remote_url` gave."""
    head, sep, _ = checkpoint_url.rstrip("/").rpartition("/data/")
    return head if sep else checkpoint_url.rstrip("/").rsplit("/", 1)[0]


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def push(storage: Storage, job_id: str, folder: str | Path, step: int, run: int, rank: int = 0,
         metrics: dict | None = None, keep: dict | None = None) -> str:
    """Upload ``folder`` as rank ``rank``'s part of the job's checkpoint at ``step`` of run ``run``, then commit
    its manifest; returns the checkpoint's folder name (``data/<run>-<step>``, the local copy's ``origin``). Raises :class:`StorageError` when the storage stays away.
    ``metrics``: what was reported with it, kept in its manifest; ``keep``: the job's checkpoint policy
    (``pcs_ray.train.store``; None: the newest two, and those an earlier policy kept stay)."""
    folder = Path(folder)
    name = f"data/{run}-{step}"
    base = f"{job_prefix(job_id)}/{name}"
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_dir() or path.name == store.MARKER:
            continue
        rel = path.relative_to(folder).as_posix()
        data = path.read_bytes()
        storage.write(f"{base}/r{rank}/{rel}", data)
        files[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    storage.write(f"{base}/parts/rank-{rank}.json", json.dumps({"rank": rank, "files": files}).encode())
    prefix = job_prefix(job_id)
    current = manifest(storage, job_id)
    if current is None or (current["step"], current.get("run")) != (int(step), run):
        made = {"step": int(step), "run": run, "folder": name, "committed_at": time.time(),
                **({"metrics": metrics} if metrics else {})}
        kept = _kept_list(storage, prefix)
        if keep is not None:
            dropped = manifest(storage, job_id, PREVIOUS)
            entries = {entry["folder"]: entry for entry in [*kept, dropped, current, made] if entry is not None}
            wanted = store.chosen(list(entries.items()), keep)
            kept = [entries[f] for f in sorted(wanted) if f not in (name, current and current["folder"])]
            storage.write(f"{prefix}/{KEPT}", json.dumps(kept).encode())  # before the manifests stop naming them
        if current is not None:
            storage.write(f"{prefix}/{PREVIOUS}", json.dumps(current).encode())
        storage.write(f"{prefix}/{LATEST}", json.dumps(made).encode())
        _collect(storage, job_id, {name, current["folder"] if current else name} | {e["folder"] for e in kept})
    elif metrics and set(metrics) - set(current.get("metrics") or {}):
        filled = {**current, "metrics": {**metrics, **(current.get("metrics") or {})}}
        storage.write(f"{prefix}/{LATEST}", json.dumps(filled).encode())
    return name


def _collect(storage: Storage, job_id: str, keep: set[str]) -> None:
    """Delete the checkpoint folders neither manifest names."""
    prefix = f"{job_prefix(job_id)}/"
    folders = {"/".join(key[len(prefix):].split("/")[:2]) for key in storage.list(f"{prefix}data")}
    for folder in sorted(folders - keep):
        storage.delete_prefix(f"{prefix}{folder}")


@contextmanager
def _node_lock(job_dir: Path):
    """One rank of a node downloads a job's checkpoint at a time (its others then find it cached)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    with open(job_dir / ".pcs-ray-pull.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pull(storage: Storage, job_id: str, job_dir: str | Path) -> tuple[int | None, list[str]]:
    """Make the node's cache ``job_dir`` hold the job's newest readable checkpoint in the storage; returns its
    step (None: the storage has none, and the cache is emptied) and notes for the run (a fallback, say)."""
    job_dir = Path(job_dir)
    notes: list[str] = []
    with _node_lock(job_dir):
        for name in (LATEST, PREVIOUS):
            found = manifest(storage, job_id, name)
            if found is None:
                continue
            cached = store.newest(job_dir)
            if cached is not None and _same(cached[0], found):
                return found["step"], notes
            try:
                _download(storage, job_id, found, job_dir)
            except (ValueError, FileNotFoundError) as exc:
                notes.append(f"checkpoint at step {found['step']} in the storage is unreadable ({exc}); trying the one before")
                continue
            return found["step"], notes
        for folder, _ in store.checkpoints(job_dir):  # the storage is what counts: nothing committed there
            shutil.rmtree(folder, ignore_errors=True)
        if notes:
            raise StorageError(f"job {job_id}: no readable checkpoint in {storage.uri}: {'; '.join(notes)}")
        return None, notes


def _same(folder: Path, found: dict) -> bool:
    try:
        marker = json.loads((folder / store.MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("step") == found["step"] and marker.get("run") == found.get("run") and \
        marker.get("origin") == found["folder"]


def _download(storage: Storage, job_id: str, found: dict, job_dir: Path) -> None:
    base = f"{job_prefix(job_id)}/{found['folder']}"
    keys = storage.list(f"{base}/parts")
    parts = sorted((json.loads(storage.read(key) or b"{}") for key in keys), key=lambda p: -int(p.get("rank", 0)))
    if not any(p.get("files") is not None for p in parts):
        raise ValueError("no part of it was committed")
    incoming = store.staging(job_dir)
    try:
        for part in parts:  # rank 0's files last: where ranks wrote the same name, rank 0's is kept
            for rel, meta in part["files"].items():
                data = storage.read(f"{base}/r{part['rank']}/{rel}")
                if data is None or len(data) != meta["bytes"] or hashlib.sha256(data).hexdigest() != meta["sha256"]:
                    raise ValueError(f"{rel} of rank {part['rank']} is missing or does not match its digest")
                target = incoming / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        store.commit(job_dir, incoming, found["step"], move=True, run=found.get("run"), origin=found["folder"],
                     metrics=found.get("metrics"))
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
