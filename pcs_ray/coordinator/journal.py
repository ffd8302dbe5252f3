"""The coordinator's durable journal: an append-only event log in SQLite (stdlib).

Every submission and state change is appended and committed *before* the
coordinator acts on it, so a coordinator that dies at any point is rebuilt
from the journal by replaying the events in order. WAL mode keeps a commit
to one small write.

A damaged journal (a torn write-ahead log after a crash mid-write, a
corrupted page or record) is recovered to its last committed, readable
record with a warning: SQLite drops WAL frames past the last valid commit by
itself; a record or page that cannot be read ends the replay there, and the
good prefix is copied into a fresh journal (the damaged file is kept beside
it as ``*.damaged-<time>``). The journal and its folder are the owner's only
(0600 files in a 0700 folder).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import struct
import time
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


log = logging.getLogger("pcs_ray.coordinator")


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
        self.warnings: list[str] = []
        if self.path != ":memory:":
            private_file(Path(self.path))
            torn = torn_wal_bytes(Path(self.path + "-wal"))
            if torn:
                self._warn(f"journal {self.path}: the write-ahead log ends in a torn write ({torn} bytes); "
                           "recovered to the last committed record")
        self._db = self._open()
        good, damage = self._readable()
        if damage is not None:
            self._salvage(good, damage)

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(_SCHEMA)
        return db

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning(message)

    def _readable(self) -> tuple[list[tuple], str | None]:
        """Every record up to the first that cannot be read, and what stopped the read (``None``: none)."""
        good: list[tuple] = []
        try:
            for row in self._db.execute("SELECT seq, t, kind, job_id, data FROM events ORDER BY seq"):
                seq, t, kind, job_id, data = row
                try:
                    parsed = json.loads(data)
                    ok = isinstance(parsed, dict) and isinstance(kind, str) and isinstance(t, (int, float))
                except (TypeError, ValueError):
                    ok = False
                if not ok:
                    return good, f"record {seq} is corrupted"
                good.append(row)
        except sqlite3.DatabaseError as e:
            return good, f"{e} after record {good[-1][0] if good else 0}"
        return good, None

    def _salvage(self, good: list[tuple], damage: str) -> None:
        """Keep the damaged file aside and continue in a fresh journal holding the good prefix."""
        self._db.close()
        if self.path == ":memory:":
            raise sqlite3.DatabaseError(f"in-memory journal damaged: {damage}")
        aside = f"{self.path}.damaged-{int(time.time())}"
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.replace(self.path + suffix, aside + suffix)
        private_file(Path(self.path))
        self._db = self._open()
        self._db.executemany("INSERT INTO events (seq, t, kind, job_id, data) VALUES (?, ?, ?, ?, ?)", good)
        self._warn(f"journal {self.path} was damaged ({damage}); recovered {len(good)} record(s) up to the last "
                   f"good one, the damaged file is kept as {aside}")

    def append(self, t: float, kind: str, job_id: int | None = None, data: dict | None = None) -> None:
        """Record one event durably (committed when this returns)."""
        self._db.execute(
            "INSERT INTO events (t, kind, job_id, data) VALUES (?, ?, ?, ?)",
            (t, kind, job_id, json.dumps(data or {}, separators=(",", ":"))),
        )

    def insert_rows(self, rows: list[tuple]) -> None:
        """Put records with their own sequence numbers, in one transaction (a journal rebuilt from its mirror,
        ``pcs_ray.coordinator.journal_mirror``): rows ``(seq, t, kind, job_id, data)``, data as JSON text."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT INTO events (seq, t, kind, job_id, data) VALUES (?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def forget(self, job_ids: list[int], t: float, marker: dict) -> None:
        """Delete every event of ``job_ids`` and put ``marker`` in the place of any earlier ``compacted``
        record, in one transaction (``pcs_ray.coordinator.retention``): a crash leaves all of it or none."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("DELETE FROM events WHERE job_id IN (SELECT value FROM json_each(?))", (json.dumps(job_ids),))
            self._db.execute("DELETE FROM events WHERE kind = 'compacted'")
            self._db.execute("INSERT INTO events (t, kind, job_id, data) VALUES (?, 'compacted', NULL, ?)",
                             (t, json.dumps(marker, separators=(",", ":"))))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def events(self) -> Iterator[Event]:
        for seq, t, kind, job_id, data in self._db.execute(
            "SELECT seq, t, kind, job_id, data FROM events ORDER BY seq"
        ):
            yield Event(seq, t, kind, job_id, json.loads(data))

    def events_of(self, kinds: tuple[str, ...]) -> Iterator[Event]:
        """The events of these kinds only, in order (the dashboard's configuration history)."""
        marks = ", ".join("?" * len(kinds))
        for seq, t, kind, job_id, data in self._db.execute(
            f"SELECT seq, t, kind, job_id, data FROM events WHERE kind IN ({marks}) ORDER BY seq", tuple(kinds)
        ):
            yield Event(seq, t, kind, job_id, json.loads(data))

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0]

    def close(self) -> None:
        self._db.close()


def private_file(path: Path) -> None:
    """Create ``path``'s folder 0700 and the file 0600 (owner only), tightening existing ones."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)


def torn_wal_bytes(wal: Path) -> int:
    """Bytes past the last whole frame of a SQLite write-ahead log (0: none, or no log)."""
    try:
        size = wal.stat().st_size
        with open(wal, "rb") as f:
            header = f.read(32)
    except OSError:
        return 0
    if size < 32 or len(header) < 32:
        return size
    page = struct.unpack(">I", header[8:12])[0]
    if page == 1:
        page = 65536
    return (size - 32) % (page + 24) if page else 0
