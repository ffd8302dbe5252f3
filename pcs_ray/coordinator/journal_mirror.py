"""The coordinator's journal, and the files it rebuilds from, mirrored to the cluster's storage.

A head machine that dies takes its disk with it. With ``--storage`` a thread copies every journal
record committed since its last pass into the storage as one object (``journal/seg-<first>-<last>.jsonl``,
rows ``[seq, t, kind, job, data]``) at most ``interval_s`` after it was committed; a call that
acknowledges a change to a client (a submission, a cancellation, a configuration) waits for its
records to be there before it returns (:meth:`JournalMirror.wait`). Many segments, or a compaction of
the journal (``pcs_ray.coordinator.retention`` deletes records), are folded into one base object
(``journal/base-<last>.jsonl``) that replaces the older ones. The speed model's and the job history's
files are copied whole when they change.

A coordinator started on an empty state folder with the same storage rebuilds the journal from the
newest base and the segments after it (:func:`restore`) before it replays it, and takes those files back.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path

from pcs_ray.storage.objects import Storage, StorageError, open_storage

PREFIX = "journal"
FILES_PREFIX = "coordinator"
#: Segments after the newest base past which the mirror folds them into a new base.
FOLD_AFTER = 400
#: The files besides the journal a coordinator rebuilds from, copied whole (names in the state folder).
STATE_FILES = ("speeds.json", "history.jsonl", "cluster-spec.yaml")
FILES_EVERY_S = 10.0
#: Seconds between the mirror's checks that the storage answers while it has nothing to write (a cluster whose
#: runs all wait on the storage writes no records, and status must still say why).
PROBE_EVERY_S = 5.0
PROBE_RETRY_S = 2.0

log = logging.getLogger("pcs_ray.coordinator")


def _rows(db: sqlite3.Connection, after: int) -> list[list]:
    return [list(r) for r in db.execute("SELECT seq, t, kind, job_id, data FROM events WHERE seq > ? ORDER BY seq",
                                        (after,))]


def chain(keys) -> tuple[int, str | None, list[tuple[int, int, str]]]:
    """What the mirror's objects ``keys`` hold: the newest base (its last record and key; 0 and None: none) and
    the segments after it, in order (first record, last record, key)."""
    bases = [(int(k.rsplit("-", 1)[1].split(".")[0]), k) for k in keys if k.split("/")[-1].startswith("base-")]
    base_last, base_key = max(bases) if bases else (0, None)
    segments = []
    for key in keys:
        name = key.split("/")[-1]
        if name.startswith("seg-"):
            first, end = (int(x) for x in name[4:].split(".")[0].split("-"))
            if first > base_last:
                segments.append((first, end, key))
    return base_last, base_key, sorted(segments)


def _encode(rows: list[list]) -> bytes:
    return ("\n".join(json.dumps(r, separators=(",", ":")) for r in rows) + "\n").encode()


class JournalMirror(threading.Thread):
    """Copies the journal at ``journal_path`` (and ``STATE_FILES`` beside it) to ``storage`` as it grows."""

    def __init__(self, storage: Storage, journal_path: str | Path, interval_s: float = 0.2):
        super().__init__(name="pcs-ray-journal-mirror", daemon=True)
        self.storage, self.path, self.interval_s = storage, Path(journal_path), interval_s
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)
        self._db_lock = threading.Lock()  # the mirror's thread and callers of wait share the connection
        self.segments = 0
        self.mirrored = self._stored_last()
        self._cond = threading.Condition()
        self._wanted = 0
        self._halt = threading.Event()
        self._files_sent: dict[str, tuple[int, int]] = {}
        self._files_at = 0.0
        self.problem: str | None = None
        self._probe = open_storage(storage.uri, retry_s=PROBE_RETRY_S)
        self._answered = time.monotonic()
        self.lag_s: float = 0.0  # how far behind the last pass ended (the oldest record it copied, when copied)

    def _stored_last(self) -> int:
        base_last, _, segments = chain(self.storage.list(PREFIX))
        self.segments = len(segments)
        return max([base_last] + [end for _, end, _ in segments])

    # -- the thread ---------------------------------------------------------------------------------
    def run(self) -> None:
        while not self._halt.is_set():
            with self._cond:
                self._cond.wait(timeout=self.interval_s)
            try:
                self.flush()
                self._check()
            except StorageError as exc:
                self.problem = str(exc)
                log.warning("journal mirror: %s", exc)
            except Exception as exc:  # keep mirroring whatever one pass met
                self.problem = f"{type(exc).__name__}: {exc}"
                log.exception("journal mirror")

    def flush(self) -> None:
        """Copy what was committed since the last pass (a fold into a new base where it is due)."""
        with self._db_lock:
            rows = _rows(self._db, self.mirrored)
        if rows:
            began = time.time()
            compacted = any(r[2] == "compacted" for r in rows)
            if compacted or self.segments >= FOLD_AFTER:
                self._fold()
            else:
                self.storage.write(f"{PREFIX}/seg-{rows[0][0]:012d}-{rows[-1][0]:012d}.jsonl", _encode(rows))
                self.segments += 1
            self.mirrored = rows[-1][0]
            self.lag_s = time.time() - began
            self.problem = None
            self._answered = time.monotonic()
        with self._cond:
            self._cond.notify_all()
        if time.monotonic() - self._files_at >= FILES_EVERY_S:
            self._files_at = time.monotonic()
            self._copy_files()

    def _check(self) -> None:
        """Ask the storage for a small object when nothing was written for a while: whether it answers."""
        if time.monotonic() - self._answered < PROBE_EVERY_S:
            return
        self._probe.read(f"{PREFIX}/.probe")  # raises StorageError (the problem) where it does not answer
        self._answered = time.monotonic()
        self.problem = None

    def _fold(self) -> None:
        """One base object holding the whole journal as it is now; older bases and segments deleted."""
        with self._db_lock:
            rows = _rows(self._db, 0)
        if not rows:
            return
        old = list(self.storage.list(PREFIX))
        self.storage.write(f"{PREFIX}/base-{rows[-1][0]:012d}.jsonl", _encode(rows))
        self.storage.delete([k for k in old if not k.endswith(f"base-{rows[-1][0]:012d}.jsonl")])
        self.segments = 0

    def _copy_files(self) -> None:
        for name in STATE_FILES:
            path = self.path.parent / name
            try:
                stat = path.stat()
            except OSError:
                continue
            seen = (stat.st_size, stat.st_mtime_ns)
            if self._files_sent.get(name) != seen:
                self.storage.write(f"{FILES_PREFIX}/{name}", path.read_bytes())
                self._files_sent[name] = seen

    def describe(self) -> dict:
        """The storage as ``status`` shows it: its URI, the journal records not yet in it, and what is wrong
        (a storage being retried, or given up on; None: nothing)."""
        with self._db_lock:
            (last,) = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()
        return {"uri": self.storage.uri, "behind": max(0, last - self.mirrored),
                "problem": self.storage.problem or self.problem or self._probe.problem}

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Block until every record committed before this call is in the storage (False: not within ``timeout_s``,
        or at once while the storage is known to be away: a call then returns on the head's journal alone, and
        ``status`` says the storage is behind)."""
        if self.storage.problem or self.problem or self._probe.problem:
            return False
        with self._db_lock:
            (target,) = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.notify_all()
            while self.mirrored < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self.is_alive():
                    return False
                self._cond.wait(timeout=min(left, self.interval_s))
        return True

    def close(self) -> None:
        self._halt.set()
        with self._cond:
            self._cond.notify_all()
        if self.is_alive():
            self.join(timeout=5)
        try:
            self.flush()
        except Exception as exc:
            log.warning("journal mirror: last flush failed: %s", exc)
        with self._db_lock:
            self._db.close()


def restore(storage: Storage, state_dir: str | Path, journal_name: str = "journal.sqlite") -> int:
    """Rebuild ``state_dir``'s journal from the storage where the folder holds none (or an empty one), and take
    back the files the coordinator rebuilds from; returns the records restored (0: nothing to do)."""
    from pcs_ray.coordinator.journal import Journal

    state_dir = Path(state_dir)
    path = state_dir / journal_name
    if path.exists():
        existing = Journal(path)
        try:
            if len(existing):
                return 0
        finally:
            existing.close()
    _, base_key, segments = chain(storage.list(PREFIX))
    chunks = ([base_key] if base_key else []) + [key for _, _, key in segments]
    rows: list = []
    for key in chunks:
        data = storage.read(key) or b""
        for line in data.decode().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    for name in STATE_FILES:
        if not (state_dir / name).exists():
            storage.download(f"{FILES_PREFIX}/{name}", state_dir / name)
    if not rows:
        return 0
    journal = Journal(path)
    try:
        journal.insert_rows([tuple(r) for r in rows])
    finally:
        journal.close()
    return len(rows)
