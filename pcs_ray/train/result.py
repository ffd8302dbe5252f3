"""What ``fit()`` returns: Ray Train's ``Result`` under its names, for a finished pcs-ray job.

``metrics`` is what the loop last reported, ``checkpoint`` its newest checkpoint (a
:class:`~pcs_ray.train.session.CheckpointPath`: ``as_directory()``, ``to_directory()``, ``path``),
``path`` the folder the result is kept in, ``metrics_dataframe`` every report of every run (a step
redone after a resume keeps its newest row), ``error`` None for a finished job. pcs-ray adds
``job_id``, ``state`` and ``view`` (the job as ``pcs-ray status --json`` shows it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
        """Ray's list of kept checkpoints with their metrics: here the newest one, with the final metrics."""
        return [] if self.checkpoint is None else [(self.checkpoint, self.metrics)]

    def keep_in(self, folder: str | Path) -> Result:
        """This result with its checkpoint copied into ``folder/checkpoint`` and its metrics written to
        ``folder/result.json`` (``RunConfig(storage_path=..., name=...)``); ``path`` is then ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        checkpoint = self.checkpoint
        if checkpoint is not None:
            checkpoint = CheckpointPath(checkpoint.to_directory(folder / "checkpoint"))
        (folder / "result.json").write_text(json.dumps({"job_id": self.job_id, "metrics": self.metrics}))
        return Result(self.metrics, checkpoint, self.error, str(folder), self.job_id, self.state, self.view, self.history)
