"""Checkpoint folder of a search, so a killed ``solve`` resumes where it stopped.

``state.json`` holds the SPEA2 state after the last completed generation
(written to a temporary file and renamed, so it is always whole);
``evaluations.jsonl`` is the evaluation cache, appended per simulation.
Both record the problem's fingerprint; a folder from a different problem is
refused rather than silently mixed in.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pcs_ray.solver.cache import EvaluationCache, stored_fingerprint
from pcs_ray.solver.spea2 import SearchState

STATE_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint folder that does not belong to this search or cannot be read."""


class Checkpoint:
    def __init__(self, folder: str | Path, fingerprint: dict, fresh: bool = False) -> None:
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        if self.folder.exists() and not self.folder.is_dir():
            raise CheckpointError(f"checkpoint path {self.folder} exists and is not a folder")
        self.folder.mkdir(parents=True, exist_ok=True)
        if fresh:
            for name in ("state.json", "evaluations.jsonl"):
                (self.folder / name).unlink(missing_ok=True)

    @property
    def state_path(self) -> Path:
        return self.folder / "state.json"

    def cache(self) -> EvaluationCache:
        return EvaluationCache(self.folder / "evaluations.jsonl", self.fingerprint)

    def load(self) -> SearchState | None:
        if not self.state_path.exists():
            return None
        try:
            raw = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise CheckpointError(f"{self.state_path}: not a search checkpoint") from None
        if not isinstance(raw, dict) or raw.get("v") != STATE_VERSION:
            raise CheckpointError(f"{self.state_path}: not a search checkpoint of version {STATE_VERSION}")
        if stored_fingerprint(raw.get("fingerprint"), str(self.state_path)) != self.fingerprint:
            raise CheckpointError(
                f"{self.state_path}: checkpoint of a different problem (workload, GPUs, objectives, samples, "
                "population or seed differ); use another checkpoint folder or --fresh"
            )
        try:
            return SearchState.from_json(raw["state"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{self.state_path}: damaged search checkpoint") from None

    def save(self, state: SearchState) -> None:
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"v": STATE_VERSION, "fingerprint": self.fingerprint, "state": state.to_json()}),
                       encoding="utf-8")
        os.replace(tmp, self.state_path)
