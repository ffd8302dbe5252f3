"""The coordinator's durable journal: an append-only event log in SQLite (stdlib).

Every submission and state change is appended and committed *before* the
coordinator acts on it, so a coordinator that dies at any point is rebuilt
from the journal by replaying the events in order. WAL mode keeps a commit
to one small write.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    job_id INTEGER,
    data TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class Event:
    seq: int
    t: float  # seconds since the coordinator's epoch
    kind: str
    job_id: int | None
    data: dict


class Journal:
    """Append and replay events. ``path=":memory:"`` gives a throwaway journal for tests and benchmarks."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def append(self, t: float, kind: str, job_id: int | None = None, data: dict | None = None) -> None:
        """Record one event durably (committed when this returns)."""
        self._db.execute(
            "INSERT INTO events (t, kind, job_id, data) VALUES (?, ?, ?, ?)",
            (t, kind, job_id, json.dumps(data or {}, separators=(",", ":"))),
        )

    def events(self) -> Iterator[Event]:
        for seq, t, kind, job_id, data in self._db.execute(
            "SELECT seq, t, kind, job_id, data FROM events ORDER BY seq"
        ):
            yield Event(seq, t, kind, job_id, json.loads(data))

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0]

    def close(self) -> None:
        self._db.close()
