"""What a user's training loop talks to inside a pcs-ray run: its context, checkpoints, reports, stops.

A run is one process per rank; the runner installs one :class:`Session` in each before it calls
the user's function, and the module-level functions of :mod:`pcs_ray.train` act on it. Outside a
run (a user trying the loop on a laptop) a local session stands in: one rank, no checkpoint,
its last ``LOCAL_HISTORY`` reports kept in memory (a loop of millions of steps must not grow without end),
never asked to stop.

The stop protocol (``should_checkpoint``): the coordinator asks a rank to give its GPUs back; the
ranks agree on it at their next call (an all-reduce: every rank must call it at the same steps,
as with Ray Train's ``get_preemption_info``) or their next report (every rank reports at the same
steps, as in Ray Train); the loop then reports a checkpoint, and the run ends inside that
``report`` on every rank (:class:`RunStopped`, a ``BaseException`` so that a
loop's ``except Exception`` does not swallow it).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pcs_ray.train.store as store


LOCAL_HISTORY = 10_000
LOGGED_REPORTS = 100_000  # rows of a run's metrics log (``Result.metrics_dataframe``); later reports are not logged


class RunStopped(BaseException):
    """Raised inside ``report`` once the run's checkpoint is safe and the coordinator wants its GPUs."""

    def __init__(self, step: int):
        super().__init__(f"stopped at step {step} for the coordinator")
        self.step = step


class CheckpointPath(str):
    """A checkpoint as a ``str`` that also answers Ray Train's ``Checkpoint`` calls, so a ported loop's
    ``with ckpt.as_directory() as d`` and ``ckpt.path`` keep working.

    ``Checkpoint(path, filesystem=None)`` as in Ray Train: ``path`` is a local folder, or a URI
    (``s3://bucket/...``: a checkpoint where a cluster with a storage keeps it, see
    ``pcs_ray.train.remote_store``), or with ``filesystem`` (a ``pyarrow.fs.FileSystem``) a path in it.
    The ``str`` and ``path`` are what was given (the URI for a remote one); ``filesystem`` is the pyarrow
    file system it is read through. A remote checkpoint's files are downloaded by :meth:`to_directory`
    (into a folder you name, else a fresh temporary one) and :meth:`as_directory` (into a temporary
    folder, deleted when the ``with`` block ends); a local one is used where it is.
    """

    def __new__(cls, path: str | os.PathLike, filesystem: Any = None) -> "CheckpointPath":
        made = super().__new__(cls, os.fspath(path))
        made._filesystem = filesystem
        return made

    @property
    def path(self) -> str:
        return str(self)

    @property
    def remote(self) -> bool:
        """Whether the files are somewhere other than a local folder (a URI, or a path in a given file system)."""
        given = getattr(self, "_filesystem", None)
        if given is not None:
            return type(given).__name__ != "LocalFileSystem"
        return "://" in self and not self.startswith("file://")

    @property
    def filesystem(self):
        """The ``pyarrow.fs.FileSystem`` the checkpoint is read through (opened on first use, as ``open_storage``
        opens its URI: S3's endpoint and credentials from the AWS variables)."""
        given = getattr(self, "_filesystem", None)
        return given if given is not None else self._storage().fs

    def _storage(self):
        from pcs_ray.storage import open_storage
        from pcs_ray.storage.objects import Storage

        given = getattr(self, "_filesystem", None)
        if given is not None:
            return Storage(str(self), given, str(self).rstrip("/"))
        return open_storage(str(self))

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> "CheckpointPath":
        return cls(os.fspath(path))

    def as_directory(self):
        """A context manager giving a local folder of the checkpoint's files (a remote one's, downloaded
        into a temporary folder that is deleted afterwards)."""
        from contextlib import contextmanager, nullcontext

        if not self.remote:
            return nullcontext(self._local_folder())

        @contextmanager
        def downloaded():
            import tempfile

            folder = tempfile.mkdtemp(prefix="pcs-ray-checkpoint-")
            try:
                yield self.to_directory(folder)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        return downloaded()

    def to_directory(self, path: str | os.PathLike | None = None) -> str:
        """The checkpoint's files in the local folder ``path`` (created if need be); without ``path``, a local
        checkpoint's own folder, or a fresh temporary folder a remote one is downloaded into."""
        if not self.remote:
            if path is None:
                return self._local_folder()
            shutil.copytree(self._local_folder(), path, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(store.MARKER))  # the user's files, not pcs-ray's marker
            return os.fspath(path)
        if path is None:
            import tempfile

            path = tempfile.mkdtemp(prefix="pcs-ray-checkpoint-")
        storage = self._storage()
        keys = storage.list("")
        if not keys:
            raise FileNotFoundError(f"checkpoint {self}: no files there")
        for key in keys:
            storage.download(key, Path(path) / key)
        return os.fspath(path)

    def _local_folder(self) -> str:
        return str(self)[len("file://"):] if self.startswith("file://") else str(self)


@dataclass(frozen=True)
class TrainContext:
    """Where this rank stands: Ray Train's names as attributes and as ``get_*`` methods."""

    world_size: int = 1
    world_rank: int = 0
    local_rank: int = 0
    device: str = "cpu"
    job_id: str | None = None
    attempt: int = 0
    total_steps: int | None = None
    start_step: int = 0  # the step of the checkpoint this run resumed from (0: a first start)

    def get_world_size(self) -> int:
        return self.world_size

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_world_size(self) -> int:
        return 1

    def get_node_rank(self) -> int:
        return self.world_rank


@dataclass
class Session:
    """One rank's link to its run. ``stop_requested`` says whether the coordinator wants the GPUs
    back; ``on_report(step, metrics)`` is called on every report (progress, pacing)."""

    context: TrainContext
    checkpoint_dir: str | None = None  # STATE_DIR/checkpoints/<job> (with a cluster storage: this node's cache of it)
    stop_requested: Callable[[], bool] = lambda: False
    on_report: Callable[[int, Mapping], None] | None = None
    step: int = 0
    metrics: dict = field(default_factory=dict)
    reports: int = 0
    stopping: bool = False
    asked: bool = False  # the loop called should_checkpoint() since its last report
    stop_reason: str | None = None
    last_checkpoint_step: int | None = None
    history: deque = field(default_factory=lambda: deque(maxlen=LOCAL_HISTORY))  # the local session's last reports
    # What the runner reads back after the loop (not part of the user's contract): notes for the run's
    # outcome, phase stamps, and a hook a loop may call as a step begins (the emulated device's clock).
    notes: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    on_step_begin: Callable[[], None] | None = None
    metrics_log: str | None = None  # a JSON line per report goes here (rank 0 of a pcs-ray run)
    logged: int = 0
    log_file: Any = None  # ``metrics_log`` open for appending, line by line, until :meth:`close`
    storage: Any = None  # the cluster's storage (``pcs_ray.storage.Storage``): checkpoints are uploaded there first
    # The run's data streams by name (``pcs_ray.train.data_order``): each checkpoint records where each stands.
    streams: dict = field(default_factory=dict)
    restored_streams: dict | None = None  # what the checkpoint resumed from recorded (read on first use)
    said: set = field(default_factory=set)
    keep: dict | None = None  # the job's checkpoint policy (``pcs_ray.train.config.checkpoint_spec``)
    accelerator: Any = None  # ``train.torch.accelerate``'s choice, made at the latest by ``prepare_model``

    def step_begins(self) -> None:
        if self.on_step_begin is not None:
            self.on_step_begin()

    # -- agreement across ranks ---------------------------------------------------------
    def _any_rank(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag OR-ed over the ranks (one all-reduce; every rank must call it at the same point)."""
        if self.context.world_size == 1:
            return tuple(bool(f) for f in flags)
        import torch
        import torch.distributed as dist

        device = self.context.device if self.context.device.startswith("cuda") else "cpu"
        tensor = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tuple(bool(v > 0) for v in tensor.tolist())

    def should_checkpoint(self) -> bool:
        self.asked = True
        if not self.stopping:
            (self.stopping,) = self._any_rank(bool(self.stop_requested()))
        return self.stopping

    # -- checkpoints ---------------------------------------------------------------------
    def get_checkpoint(self) -> CheckpointPath | None:
        if self.checkpoint_dir is None:
            return None
        found = store.newest(self.checkpoint_dir)
        return CheckpointPath(found[0]) if found else None

    def stream(self, name: str, size: int, **options):
        """The run's data stream ``name`` over ``size`` samples (``DataStream``'s options), continuing where the
        checkpoint this run resumed from left it; one stream per name (a second call returns the first)."""
        from pcs_ray.train.data_order import DataStream, read_states

        if name not in self.streams:
            if self.restored_streams is None:
                self.restored_streams = read_states(self.get_checkpoint())
            self.streams[name] = DataStream(name, size, world_size=self.context.world_size,
                                            rank=self.context.world_rank, state=self.restored_streams.get(name),
                                            **options)
        return self.streams[name]

    def say_once(self, message: str) -> None:
        """A line in this rank's log, once per run."""
        if message not in self.said:
            import sys

            self.said.add(message)
            print(f"pcs-ray: {message}", file=sys.stderr, flush=True)

    def report(self, metrics: Mapping | None, step: int | None, checkpoint: Any = None) -> None:
        step = self.step + 1 if step is None else int(step)
        if step < 0:
            raise ValueError(f"report: step must be >= 0, got {step}")
        saved = False
        if checkpoint is not None:
            folder = Path(os.fspath(getattr(checkpoint, "path", checkpoint)))
            if self.streams:
                from pcs_ray.train.data_order import write_states

                write_states(folder, self.streams)
            if self.checkpoint_dir is None:
                self.last_checkpoint_step = step
                saved = True
            else:
                staged = folder.parent == Path(self.checkpoint_dir) and folder.name.startswith(".staging-")
                reported = store.plain_metrics(metrics)
                origin = self._store_remotely(folder, step, reported)
                if origin is not False:  # with a storage, this is the node's cache: the storage's copy keeps the policy
                    store.commit(self.checkpoint_dir, folder, step, move=staged, run=self.context.attempt, origin=origin,
                                 metrics=reported, keep=self.keep if self.storage is None else None)
                    self.last_checkpoint_step = step
                    saved = True
                elif staged:
                    shutil.rmtree(folder, ignore_errors=True)
        self.step, self.reports = step, self.reports + 1
        self.metrics = dict(metrics or {})
        if self.checkpoint_dir is None:
            self.history.append({"step": step, "metrics": self.metrics, "checkpoint": saved})
        if self.metrics_log is not None and self.logged < LOGGED_REPORTS:
            self.log_report(step)
        if self.on_report is not None:
            self.on_report(step, self.metrics)
        # Every report is a point where the ranks agree (as in Ray Train): a stop asked for ends the run at
        # the first report that carries a checkpoint, also in a loop that never asks should_checkpoint().
        # A loop that asked since its last report has its answer already (the same on every rank).
        asked, self.asked = self.asked, False
        if asked and not self.stopping:
            return
        if asked:
            stopping, (checkpointed,) = True, self._any_rank(saved)
        else:
            stopping, checkpointed = self._any_rank(self.stopping or bool(self.stop_requested()), saved)
        self.stopping = self.stopping or stopping
        # Nothing done since the newest checkpoint: ending now loses nothing, so no new one is needed.
        if stopping and (checkpointed or step == self.last_checkpoint_step):
            raise RunStopped(step)

    def _store_remotely(self, folder: Path, step: int, metrics: dict | None = None):
        """Upload the checkpoint to the cluster's storage first (its copy is the one a run on any node resumes
        from): the folder it was committed as there, None without a storage, False where the storage stayed
        away (the job keeps its previous checkpoint, and the run's notes say why)."""
        if self.storage is None:
            return None
        from pcs_ray.storage import StorageError
        import pcs_ray.train.remote_store as remote_store

        try:
            return remote_store.push(self.storage, self.context.job_id, folder, step, self.context.attempt,
                                     self.context.world_rank, metrics, self.keep)
        except StorageError as exc:
            self.notes.append(f"checkpoint at step {step} not kept: {exc}; the job keeps its checkpoint at step "
                              f"{self.last_checkpoint_step}")
            return False

    def log_report(self, step: int) -> None:
        """Append this report to the run's metrics log: ``step``, ``attempt`` and the metrics as JSON."""
        import json

        row = {"step": step, "attempt": self.context.attempt}
        for key, value in self.metrics.items():
            if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
                value = value.item()
            row[str(key)] = value if isinstance(value, (int, float, str, bool)) or value is None else str(value)[:200]
        if self.log_file is None:  # kept open: opening it at every report took 120-140 us on a busy machine
            self.log_file = open(self.metrics_log, "a", buffering=1)  # noqa: SIM115 - closed by close()
        self.log_file.write(json.dumps(row) + "\n")  # line-buffered: each report is on disk as it is made
        self.logged += 1

    def close(self) -> None:
        """The run ended: close its metrics log."""
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None

    def staging_dir(self) -> str:
        """A folder to write a checkpoint into; reporting it moves it into place instead of copying."""
        if self.checkpoint_dir is None:
            import tempfile

            return tempfile.mkdtemp(prefix="pcs-ray-checkpoint-")
        return str(store.staging(self.checkpoint_dir))


_lock = threading.Lock()
_session: Session | None = None


def install(session: Session | None) -> None:
    """Make ``session`` this process's run (None: back to the local stand-in)."""
    global _session
    with _lock:
        _session = session


def current() -> Session:
    global _session
    with _lock:
        if _session is None:
            _session = Session(TrainContext(device=_local_device()))
        return _session


def _local_device() -> str:
    try:
        import torch

        return "cuda:0" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def wait_until(deadline: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``deadline`` (an emulated device's pace)."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)
