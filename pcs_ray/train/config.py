"""Ray Train's config objects under their names, read into a pcs-ray job's fields.

``ScalingConfig(num_workers=4)`` is a rigid job of 4 GPUs and ``ScalingConfig(num_workers=(1, 4))``
an elastic one of 1 to 4 (Ray Train V2's spelling); ``RunConfig`` names the job, its retries
(``FailureConfig(max_failures=...)``) and what it keeps. Every rank of a pcs-ray run holds one GPU
the coordinator chose, so a Ray option that places or sizes workers some other way has no meaning
here: it is refused with :class:`UnsupportedOptionError`, one line saying so and what to do instead,
never dropped silently.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pcs_ray.jobs.jobfile import MAX_GPUS, MAX_RETRIES
from pcs_ray.jobs.train_options import checkpoint_spec, torch_spec


class UnsupportedOptionError(ValueError):
    """A Ray Train option that means nothing under pcs-ray, or a value it cannot use (a ``storage_path`` that does
    not open); the message is one line with what to do instead."""


def refuse(option: str, why: str) -> UnsupportedOptionError:
    return UnsupportedOptionError(f"{option}: {why}")


@dataclass(frozen=True)
class ScalingConfig:
    """How many workers (one GPU each): an ``int`` for a rigid job, ``(min, max)`` for an elastic one."""

    num_workers: int | tuple[int, int] = 1
    use_gpu: bool = False
    resources_per_worker: dict | None = None
    placement_strategy: str = "PACK"
    accelerator_type: str | None = None
    trainer_resources: dict | None = None

    def __post_init__(self) -> None:
        self.gpu_range()
        if self.resources_per_worker is not None:
            extra = {k: v for k, v in self.resources_per_worker.items() if not (k == "GPU" and v == 1)}
            if extra:
                raise refuse("ScalingConfig(resources_per_worker)", f"{extra} asked, but each pcs-ray worker holds "
                             "exactly one GPU and its CPUs are not scheduled; drop it or ask for {'GPU': 1}")
        if self.placement_strategy != "PACK":
            raise refuse("ScalingConfig(placement_strategy)", "pcs-ray places each worker on the GPUs its "
                         "topology-aware placement picks; drop placement_strategy")
        if self.accelerator_type is not None:
            raise refuse("ScalingConfig(accelerator_type)", "pcs-ray picks the GPUs and predicts the run on them; "
                         "drop accelerator_type (the job's class, job_class=..., says how sensitive it is)")
        if self.trainer_resources is not None:
            raise refuse("ScalingConfig(trainer_resources)", "a pcs-ray run has no trainer actor to size; "
                         "drop trainer_resources")

    def gpu_range(self) -> tuple[int, int]:
        """``(min_gpus, gpus)``: the fewest and most GPUs the job runs on."""
        workers = self.num_workers
        low, high = (workers, workers) if isinstance(workers, int) and not isinstance(workers, bool) else (
            tuple(workers) if isinstance(workers, (tuple, list)) and len(workers) == 2 else (None, None))
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (low, high)) or not 1 <= low <= high <= MAX_GPUS:
            raise refuse("ScalingConfig(num_workers)", f"expected a count or (min, max) with 1 <= min <= max <= "
                         f"{MAX_GPUS}, got {workers!r}")
        return low, high


@dataclass(frozen=True)
class FailureConfig:
    """``max_failures``: times a loop that raises or hangs is restarted from its newest checkpoint (Ray's default, 0)."""

    max_failures: int = 0
    fail_fast: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_failures, bool) or not isinstance(self.max_failures, int) \
                or not 0 <= self.max_failures <= MAX_RETRIES:
            raise refuse("FailureConfig(max_failures)", f"got {self.max_failures!r}, but pcs-ray retries a bounded "
                         f"number of times (retrying forever would hold GPUs without end); give 0 to {MAX_RETRIES}")
        if self.fail_fast:
            raise refuse("FailureConfig(fail_fast)", "a pcs-ray job has one run at a time, so there is nothing else "
                         "to stop; use max_failures=0 to fail at the first error")


@dataclass(frozen=True)
class CheckpointConfig:
    """Which checkpoints a job keeps, as in Ray Train: ``num_to_keep`` newest ones, or with
    ``checkpoint_score_attribute`` the ``num_to_keep`` best by that metric (reported with each checkpoint),
    ``checkpoint_score_order`` ``"max"`` or ``"min"``. Beside them pcs-ray always keeps the newest checkpoint (the
    one a run resumes from) and the one before it (the fallback where the newest does not read back)."""

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None

    def __post_init__(self) -> None:
        if self.checkpoint_frequency or self.checkpoint_at_end is not None:
            raise refuse("CheckpointConfig(checkpoint_frequency)", "a training function checkpoints when it reports "
                         "one; drop checkpoint_frequency/checkpoint_at_end (pcs-ray's checkpoint_every=N asks at "
                         "every N steps)")
        try:
            self.to_spec()
        except ValueError as exc:
            raise refuse("CheckpointConfig", str(exc)) from None

    def to_spec(self) -> dict | None:
        """The job spec's ``checkpoint_config`` (None: pcs-ray's default, the newest two)."""
        spec = {"num_to_keep": self.num_to_keep, "score_attribute": self.checkpoint_score_attribute,
                "score_order": self.checkpoint_score_order}
        return checkpoint_spec({k: v for k, v in spec.items() if v is not None})


@dataclass(frozen=True)
class TorchConfig:
    """Ray Train's ``TorchConfig``: the ranks' ``torch.distributed`` backend (None: NCCL on GPUs, gloo on logical
    ones; ``"nccl"`` on a logical GPU falls back to gloo, said in the run's notes) and ``timeout_s``, the
    collectives' timeout. ``init_method`` is ``"env"`` only: pcs-ray gives the ranks their rendezvous itself."""

    backend: str | None = None
    init_method: str = "env"
    timeout_s: int = 1800

    def __post_init__(self) -> None:
        if self.init_method != "env":
            raise refuse("TorchConfig(init_method)", "pcs-ray gives the ranks their rendezvous address itself; "
                         "drop init_method")
        try:
            self.to_spec()
        except ValueError as exc:
            raise refuse("TorchConfig", str(exc)) from None

    def to_spec(self) -> dict:
        """The job spec's ``torch_config``."""
        return torch_spec({"backend": self.backend, "timeout_s": self.timeout_s})


@dataclass(frozen=True)
class RunConfig:
    """The job's name, where its result is kept (``storage_path``), its retries and checkpoints.

    ``storage_path``: a local folder, or a URI that ``pcs_ray.storage.open_storage`` opens (``s3://bucket/prefix``,
    S3's endpoint and credentials from the AWS variables; ``gs://``, ``file://`` ...), or with
    ``storage_filesystem`` (a ``pyarrow.fs.FileSystem``) a path in that file system, as in Ray Train. After
    ``fit()`` the result is kept in ``storage_path/name`` (``Result.path``: ``result.json``, see
    ``pcs_ray.train.result``); ``Result.checkpoint`` is the job's newest checkpoint where the cluster keeps it
    (its storage's URI, ``pcs-ray start --storage``, else its ``STATE_DIR``), copied into a local folder's
    ``checkpoint/`` too. A storage that cannot be opened is refused here, one that cannot be written before
    the job is submitted (:meth:`result_storage`).
    ``worker_runtime_env``: the run's Ray ``runtime_env`` (``env_vars``, ``pip``...), as a job file's ``runtime_env``.
    ``verbose`` is accepted and changes nothing: ``fit()`` prints nothing (``pcs-ray status`` and ``logs`` do).
    """

    name: str | None = None
    storage_path: str | os.PathLike | None = None
    failure_config: FailureConfig | None = None
    checkpoint_config: CheckpointConfig | None = None
    worker_runtime_env: dict | None = None
    callbacks: list | None = None
    stop: Any = None
    sync_config: Any = None
    verbose: int | None = None
    progress_reporter: Any = None
    log_to_file: bool = False
    storage_filesystem: Any = None

    def __post_init__(self) -> None:
        for name, why in (
            ("callbacks", "pcs-ray runs no Ray Train controller to call them; read Result.metrics_dataframe after fit()"),
            ("stop", "a training function stops itself (it returns); pcs-ray stops it only to checkpoint"),
            ("sync_config", "pcs-ray keeps checkpoints in the cluster's storage (pcs-ray start --storage) or its "
                            "STATE_DIR itself, nothing to sync; drop sync_config"),
            ("progress_reporter", "pcs-ray's progress is `pcs-ray status` and Trainer.predict(); drop it"),
            ("log_to_file", "each rank's output is already in its log (`pcs-ray logs ID`); drop log_to_file"),
        ):
            if getattr(self, name):
                raise refuse(f"RunConfig({name})", why)
        if self.storage_filesystem is not None:
            from pyarrow import fs as pafs

            if not isinstance(self.storage_filesystem, pafs.FileSystem):
                raise refuse("RunConfig(storage_filesystem)", f"expected a pyarrow.fs.FileSystem, got "
                             f"{type(self.storage_filesystem).__name__}; or drop it and give a URI as storage_path")
            if self.storage_path is None or "://" in os.fspath(self.storage_path):
                raise refuse("RunConfig(storage_filesystem)", "give storage_path as a path in that file system "
                             "(bucket/prefix, no scheme), as Ray Train does")
        elif self.remote:
            self._open()

    @property
    def remote(self) -> bool:
        """Whether the result goes to a storage other than a local folder (a URI, or a ``storage_filesystem``)."""
        if self.storage_filesystem is not None:
            return type(self.storage_filesystem).__name__ != "LocalFileSystem"
        path = os.fspath(self.storage_path) if self.storage_path is not None else ""
        return "://" in path and not path.startswith("file://")

    def local_folder(self) -> str | None:
        """The local folder the result is kept in (``storage_path``, a ``file://`` URI's path); None for a remote one."""
        if self.storage_path is None or self.remote:
            return None
        path = os.fspath(self.storage_path)
        return os.path.expanduser(path[len("file://"):] if path.startswith("file://") else path)

    def _open(self, retry_s: float | None = None):
        from pcs_ray.storage import StorageError, open_storage
        from pcs_ray.storage.objects import DEFAULT_RETRY_S, RETRY_ENV, Storage

        if self.storage_filesystem is not None:
            path = os.fspath(self.storage_path).rstrip("/")
            if retry_s is None:
                retry_s = float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_S))
            return Storage(path, self.storage_filesystem, path, retry_s)
        try:
            return open_storage(os.fspath(self.storage_path), retry_s)
        except (StorageError, ValueError, ImportError) as exc:
            raise refuse("RunConfig(storage_path)", f"{self.storage_path!r} cannot be opened ({_line(exc)}); give "
                         "a local folder or a URI pyarrow.fs opens (s3://BUCKET/PREFIX, with AWS_ENDPOINT_URL, "
                         "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION set)") from None

    def result_storage(self, retry_s: float | None = 20.0, check: bool = True):
        """The remote storage the result goes to (None for a local folder), its calls retried for ``retry_s``
        seconds (None: ``$PCS_RAY_STORAGE_RETRY_S``); ``check`` writes and deletes a probe object first, so that a
        wrong bucket or credentials are one line before the job is submitted, not after it ran."""
        if not self.remote:
            return None
        from pcs_ray.storage import StorageError

        storage = self._open(retry_s)
        if not check:
            return storage
        try:
            storage.check()
        except (StorageError, OSError) as exc:
            raise refuse("RunConfig(storage_path)", f"{self.storage_path!r} cannot be written ({_line(exc)}); "
                         "nothing was submitted") from None
        return storage

    @property
    def max_failures(self) -> int:
        return (self.failure_config or FailureConfig()).max_failures


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
