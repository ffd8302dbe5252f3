"""Evaluation cache: one simulation per (policy, sample), ever.

Keys are ``(spec, split, index)``: the canonical policy string (a decoded
WFQ configuration or a baseline name), the sample set (``train``/``test``)
and the sample's index in it. With a file, every result is appended as a
JSON line the moment it arrives, so a killed search loses no evaluation;
the first line records the problem the results belong to.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

Key = tuple[str, str, int]
CACHE_VERSION = 1


class CacheError(ValueError):
    """A cache file from another problem or in a format this version cannot read."""


def stored_fingerprint(stored, where: str):
    """A fingerprint as a file records it, a workload's deprecated ``num_apps`` read as ``num_jobs``
    (with a warning on stderr naming ``where``)."""
    workload = stored.get("workload") if isinstance(stored, dict) else None
    if not isinstance(workload, dict) or "num_apps" not in workload:
        return stored
    print(f"warning: {where}: key 'num_apps' is deprecated; use 'num_jobs'", file=sys.stderr, flush=True)
    workload = {("num_jobs" if k == "num_apps" else k): v for k, v in workload.items()}
    if isinstance(workload.get("label"), str):
        workload["label"] = re.sub(r" \((\d+) apps, load ", r" (\1 jobs, load ", workload["label"])
    return {**stored, "workload": workload}


class EvaluationCache:
    def __init__(self, path: str | Path | None = None, fingerprint: dict | None = None) -> None:
        self._values: dict[Key, tuple[float, ...]] = {}
        self.path = Path(path) if path is not None else None
        self.fingerprint = fingerprint or {}
        self._file = None
        if self.path is not None:
            self._open()

    def _open(self) -> None:
        assert self.path is not None
        if self.path.exists() and self.path.stat().st_size > 0:
            self._load()
            self._file = self.path.open("a", encoding="utf-8")
        else:
            self._file = self.path.open("w", encoding="utf-8")
            self._write({"v": CACHE_VERSION, "fingerprint": self.fingerprint})

    def _load(self) -> None:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        try:
            head = json.loads(lines[0])
        except (json.JSONDecodeError, IndexError):
            raise CacheError(f"{self.path}: not an evaluation cache") from None
        if not isinstance(head, dict) or head.get("v") != CACHE_VERSION:
            raise CacheError(f"{self.path}: not an evaluation cache of version {CACHE_VERSION}")
        if stored_fingerprint(head.get("fingerprint"), str(self.path)) != self.fingerprint:
            raise CacheError(
                f"{self.path}: cached evaluations belong to a different problem (workload, GPUs, objectives, "
                "samples or seed differ); use another checkpoint folder or --fresh"
            )
        torn = False
        for n, line in enumerate(lines[1:], start=2):
            try:
                raw = json.loads(line)
                key = (str(raw["spec"]), str(raw["split"]), int(raw["i"]))
                values = tuple(math.inf if v is None else float(v) for v in raw["values"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                if n == len(lines):  # the write a kill interrupted
                    torn = True
                    break
                raise CacheError(f"{self.path}:{n}: unreadable cache line") from None
            self._values[key] = values
        if torn:  # drop it so appends start on a fresh line
            self.path.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")

    def _write(self, obj: dict) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._file.flush()  # in the OS's hands: survives a killed process

    def get(self, key: Key) -> tuple[float, ...] | None:
        return self._values.get(key)

    def __contains__(self, key: Key) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def put(self, key: Key, values: tuple[float, ...]) -> None:
        if key in self._values:
            return
        self._values[key] = tuple(values)
        if self._file is not None:
            spec, split, i = key
            self._write({"spec": spec, "split": split, "i": i,
                         "values": [v if math.isfinite(v) else None for v in values]})

    def specs(self, split: str) -> set[str]:
        return {k[0] for k in self._values if k[1] == split}

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
