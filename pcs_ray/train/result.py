"""What ``fit()`` returns: Ray Train's ``Result`` under its names, for a finished pcs-ray job.

``metrics`` is what the loop last reported, ``checkpoint`` its newest checkpoint (a
:class:`~pcs_ray.train.session.CheckpointPath`: ``as_directory()``, ``to_directory()``, ``path``),
``path`` the folder the result is kept in, ``metrics_dataframe`` every report of every run (a step
redone after a resume keeps its newest row), ``error`` None for a finished job, ``filesystem`` the
``pyarrow.fs.FileSystem`` of ``path`` where it is not a local folder. pcs-ray adds
``job_id``, ``state`` and ``view`` (the job as ``pcs-ray status --json`` shows it).

With ``RunConfig(storage_path=..., name=...)`` the result is kept in ``storage_path/name``
(:meth:`Result.keep_in`) as Ray Train leaves one there: ``result.json``, one JSON object a line,
each the metrics of one report with ``step``, ``attempt`` (the run that made it) and ``job_id``,
oldest first (every report of every run; the final metrics alone where the reports cannot be read). A
local folder also gets a copy of the checkpoint (``checkpoint/``); a remote storage (``s3://...``, or a
``storage_filesystem``) gets ``result.json`` only, the checkpoint staying where the cluster keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pcs_ray.train.session import CheckpointPath


@dataclass(frozen=True)
class Result:
    """A job's outcome; ``metrics_dataframe`` reads the report history on first use (pandas)."""

    metrics: dict
    checkpoint: CheckpointPath | None
    error: BaseException | None = None
    path: str | None = None
    job_id: int | None = None
    state: str = "finished"
    view: dict = field(default_factory=dict, repr=False)
    history: Callable[[], list[dict]] | None = field(default=None, repr=False, compare=False)
    filesystem: Any = field(default=None, repr=False, compare=False)

    @property
    def metrics_dataframe(self):
        """One row per report (``step``, ``attempt`` and the loop's metrics), oldest first."""
        import pandas as pd

        rows = self.history() if self.history is not None else []
        frame = pd.DataFrame(rows)
        if "step" in frame:
            frame = frame.drop_duplicates("step", keep="last").reset_index(drop=True)
        return frame

    @property
    def best_checkpoints(self) -> list[tuple[CheckpointPath, dict]]:
        """Ray's list of the checkpoints the job keeps with the metrics reported with each, oldest first: the
        ``CheckpointConfig``'s best (or newest) ``num_to_keep`` and beside them the newest two. Where the job's
        checkpoints cannot be read from here, the newest one with the final metrics."""
        if self.checkpoint is None:
            return []
        where = self.view.get("checkpoint") or str(self.checkpoint)  # where the cluster keeps the newest
        try:
            if "://" in where:  # in the cluster's storage (file:// included): its manifests name them
                from pcs_ray.storage import open_storage
                from pcs_ray.train.remote_store import job_url, kept_checkpoints

                storage = open_storage(job_url(where))
                found = [(CheckpointPath(url), entry) for url, entry in kept_checkpoints(storage)]
            else:
                import pcs_ray.train.store as store

                found = [(CheckpointPath(folder), marker) for folder, marker in store.kept(Path(where).parent)]
        except Exception:  # the cluster's storage or STATE_DIR cannot be read from here
            found = []
        if not found:
            return [(self.checkpoint, self.metrics)]
        newest = max(found, key=lambda entry: float(entry[1].get("committed_at") or 0))[0]
        return [(self.checkpoint if path == newest else path, dict(marker.get("metrics") or {}))
                for path, marker in found]

    def result_lines(self) -> bytes:
        """``result.json``: a JSON line per report (metrics, ``step``, ``attempt``, ``job_id``), oldest first."""
        try:
            rows = self.history() if self.history is not None else []
        except Exception:  # the reports cannot be read back (the coordinator forgot the job): the final metrics
            rows = []
        rows = rows or [dict(self.metrics)]
        return "".join(json.dumps({**row, "job_id": self.job_id}, default=str) + "\n" for row in rows).encode()

    def keep_in(self, folder: str | Path, storage: Any = None) -> Result:
        """This result kept in ``folder`` (``RunConfig(storage_path=..., name=...)``); ``path`` is then ``folder``.

        A local folder gets the checkpoint copied into ``folder/checkpoint`` and ``result.json``; with
        ``storage`` (a ``pcs_ray.storage.Storage`` of a remote storage, ``folder`` its key) ``result.json`` is
        written there and ``path`` is its URI, the checkpoint staying where it is."""
        if storage is not None:
            key = str(folder).strip("/")
            storage.write(f"{key}/result.json", self.result_lines())
            return replace(self, path=storage.url(key), filesystem=storage.fs)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        checkpoint = self.checkpoint
        if checkpoint is not None:
            checkpoint = CheckpointPath(checkpoint.to_directory(folder / "checkpoint"))
        (folder / "result.json").write_bytes(self.result_lines())
        return replace(self, checkpoint=checkpoint, path=str(folder), filesystem=None)
