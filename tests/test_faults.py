"""Faults without Ray: a torn or corrupted journal tail, a full disk while checkpointing, private state files."""

from __future__ import annotations

import errno
import json
import shutil
import sqlite3
import stat

import pytest

from pcs_ray.coordinator import Journal
from pcs_ray.coordinator.journal import torn_wal_bytes
from pcs_ray.placement import create_placement  # noqa: F401  (the core's own imports, as in the core tests)
from builders import Clock, coordinator, submission


def test_a_torn_write_ahead_log_recovers_to_the_last_commit_with_a_warning(tmp_path):
    live = tmp_path / "live" / "journal.sqlite"
    journal = Journal(live)
    for i in range(5):
        journal.append(float(i), "progress", 1, {"step": i})
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for suffix in ("", "-wal"):  # the files as a crash leaves them: the log not yet folded into the database
        shutil.copy(str(live) + suffix, crashed / ("journal.sqlite" + suffix))
    journal.close()
    wal = crashed / "journal.sqlite-wal"
    assert wal.stat().st_size > 32 and torn_wal_bytes(wal) == 0
    with open(wal, "ab") as f:
        f.write(b"\x00\x01half a frame")  # the crash interrupted the next commit
    recovered = Journal(crashed / "journal.sqlite")
    assert [e.data["step"] for e in recovered.events()] == [0, 1, 2, 3, 4]
    assert any("torn write" in w for w in recovered.warnings)
    recovered.append(5.0, "progress", 1, {"step": 5})
    assert len(recovered) == 6


def test_a_corrupted_last_record_is_dropped_and_the_journal_goes_on(tmp_path):
    path = tmp_path / "journal.sqlite"
    core = coordinator(journal=Journal(path), clock=Clock())
    for _ in range(3):
        core.submit(submission())
    core.journal.close()
    db = sqlite3.connect(path)
    last = db.execute("SELECT MAX(seq) FROM events").fetchone()[0]
    db.execute("UPDATE events SET data = ? WHERE seq = ?", ('{"spec": {"workl', last))
    db.commit()
    db.close()
    journal = Journal(path)
    assert journal.warnings and "record" in journal.warnings[0] and "damaged" in journal.warnings[0]
    assert list(tmp_path.glob("journal.sqlite.damaged-*"))
    core = coordinator(journal=journal, clock=Clock())  # the coordinator rebuilds from the good prefix and keeps serving
    assert len(core.jobs) >= 2
    jid, _ = core.submit(submission())
    assert jid == max(core.jobs) and core.status()["jobs"]


def test_a_corrupted_page_recovers_what_can_be_read(tmp_path):
    path = tmp_path / "journal.sqlite"
    journal = Journal(path)
    for i in range(400):
        journal.append(float(i), "progress", 1, {"step": i, "pad": "x" * 200})
    journal.close()
    size = path.stat().st_size
    with open(path, "r+b") as f:  # garbage over the last page: a torn or rotten tail of the database file
        f.seek(size - 4096)
        f.write(b"\xff" * 4096)
    recovered = Journal(path)
    steps = [e.data["step"] for e in recovered.events()]
    assert recovered.warnings and steps == list(range(len(steps))) and 0 < len(steps) < 400


def test_journal_and_history_are_private(tmp_path):
    from pcs_ray.workloads.history import HistoryRecord, append_history

    journal = Journal(tmp_path / "state" / "journal.sqlite")
    journal.append(0.0, "init", None, {})
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / "journal.sqlite").stat().st_mode) == 0o600
    append_history(tmp_path / "state" / "history.jsonl", HistoryRecord(job_id=1, submit_time=0.0, gpus=1, service=1.0))
    assert stat.S_IMODE((tmp_path / "state" / "history.jsonl").stat().st_mode) == 0o600


def test_a_full_disk_while_checkpointing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from pcs_ray.executors import checkpoint

    checkpoint.save_checkpoint(tmp_path, {"step": 10})
    real_open = open

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(checkpoint, "open", lambda p, mode="r", *a, **k: Full(real_open(p, mode, *a, **k)), raising=False)
    with pytest.raises(OSError) as raised:
        checkpoint.save_checkpoint(tmp_path, {"step": 20})
    assert raised.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert checkpoint.load_checkpoint(tmp_path).state["step"] == 10  # the previous checkpoint, intact


def test_a_failed_checkpoint_retries_the_job_and_status_says_why():
    core = coordinator(journal=Journal(":memory:"), clock=Clock())
    jid, _ = core.submit(submission())
    error = "OSError: [Errno 28] No space left on device"
    actions = core.run_ended(jid, 1, "failed", 40, error=error)
    view = next(j for j in core.status()["jobs"] if j["id"] == jid)
    assert view["error"] == error and view["state"] in ("queued", "running") and view["attempts"] >= 1
    assert any(getattr(a, "job_id", None) == jid for a in actions)  # started again at once (the GPU is free)
    assert json.loads(json.dumps(view, allow_nan=False)) == view  # strict JSON, and nothing lost on the way


def test_a_restarted_core_keeps_the_runs_its_host_found_and_requeues_the_rest(tmp_path):
    """A coordinator crash: runs still training go on (their step as the runner says), a preemption in
    flight stays in flight for the host to complete, and only jobs whose runner is gone are lost."""
    path = tmp_path / "journal.sqlite"
    core = coordinator(journal=Journal(path), clock=Clock())
    ids = [core.submit(submission(steps=steps))[0] for steps in (100, 200, 300)]
    core.progress(ids[0], 10, 0.1)
    core._record("stop", ids[1], attempt=1, reason="preempt")  # what decide() journals before it stops a run
    core.journal.close()
    restarted = coordinator(journal=path, clock=Clock(), keep_runs=True)
    assert [j.job_id for j in restarted.holding()] == ids and restarted.recovered == 0
    assert restarted.current_request(ids[1]).attempt == 1
    assert restarted.settle_runs({ids[0]: 42, ids[1]: None}) == 1
    views = {j["id"]: j for j in restarted.status()["jobs"]}
    assert views[ids[0]]["state"] == "running" and views[ids[0]]["steps"] == 42 and views[ids[0]]["attempts"] == 1
    assert views[ids[1]]["state"] == "stopping"
    assert views[ids[2]]["state"] == "queued"
    assert (restarted.recovered, restarted.reattached) == (1, 2)
    assert restarted.run_ended(ids[1], 1, "preempted", 57) is not None
    assert restarted.jobs[ids[1]].steps == 57 and restarted.jobs[ids[1]].preemptions == 1
    assert len(restarted.decision_s) == 1 and restarted.decision_s[0] >= 0  # each decision is timed (load bench)
