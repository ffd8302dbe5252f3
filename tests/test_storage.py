"""The cluster's storage: objects through pyarrow, checkpoints committed by manifest, logs and the journal mirrored.

Every storage here is a real one: a folder (``file://``) or moto's S3 server over HTTP on loopback
(``s3_server``), never a mock of boto calls.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from pcs_ray.coordinator.journal import Journal
from pcs_ray.coordinator.journal_mirror import JournalMirror, restore
from pcs_ray.storage import StorageError, open_storage
from pcs_ray.storage.folders import FolderUpload, download_changed
from pcs_ray.train import remote_store, store


@pytest.fixture(params=["file", "s3"])
def storage(request, tmp_path):
    if request.param == "file":
        return open_storage(f"file://{tmp_path}/bucket", retry_s=2)
    uri = request.getfixturevalue("s3_bucket")
    return open_storage(uri, retry_s=2)


def _checkpoint(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_a_deleted_checkpoint_leaves_no_empty_markers(s3_bucket, s3_server, tmp_path):
    import boto3

    storage = open_storage(s3_bucket, retry_s=2)
    for step in range(1, 6):
        folder = _checkpoint(tmp_path / f"c{step}", m="x")
        _checkpoint(folder / "sub", m="y")
        remote_store.push(storage, "2", folder, step, run=0)
    bucket, _, prefix = s3_bucket[len("s3://"):].partition("/")
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    assert not [k for k in keys if "/data/0-1" in k or "/data/0-2" in k or "/data/0-3" in k], keys


def test_objects_round_trip(storage):
    storage.write("a/b.txt", b"one")
    assert storage.read("a/b.txt") == b"one"
    assert storage.read("a/missing") is None
    assert storage.list("a") == {"a/b.txt": 3}
    storage.delete(["a/b.txt"])
    assert storage.list("a") == {}
    storage.check()


def test_checkpoint_push_then_pull_on_another_node(storage, tmp_path):
    remote_store.push(storage, "7", _checkpoint(tmp_path / "c1", **{"model.pt": "w1"}), 10, run=1)
    remote_store.push(storage, "7", _checkpoint(tmp_path / "c2", **{"model.pt": "w2"}), 20, run=1)
    assert remote_store.remote_step(storage, "7") == 20
    other = tmp_path / "other-node" / "7"
    step, notes = remote_store.pull(storage, "7", other)
    assert (step, notes) == (20, [])
    folder, found = store.newest(other)
    assert found == 20 and (folder / "model.pt").read_text() == "w2"
    # Only the two checkpoints the manifests name are kept in the storage.
    folders = {key.split("/")[3] for key in storage.list("checkpoints/7/data")}
    assert folders == {"1-10", "1-20"}
    remote_store.push(storage, "7", _checkpoint(tmp_path / "c3", **{"model.pt": "w3"}), 30, run=1)
    assert {key.split("/")[3] for key in storage.list("checkpoints/7/data")} == {"1-20", "1-30"}


def test_pull_uses_the_nodes_cache(storage, tmp_path):
    remote_store.push(storage, "3", _checkpoint(tmp_path / "c", **{"m": "x" * 1000}), 5, run=0)
    node = tmp_path / "node" / "3"
    remote_store.pull(storage, "3", node)
    reads = []
    original = storage.read
    storage.read = lambda key: reads.append(key) or original(key)
    assert remote_store.pull(storage, "3", node)[0] == 5
    assert all(key.endswith(".json") for key in reads), reads  # the manifest only: the files were cached


def test_a_torn_upload_is_never_read(storage, tmp_path):
    remote_store.push(storage, "9", _checkpoint(tmp_path / "c1", **{"m": "good"}), 1, run=0)
    remote_store.push(storage, "9", _checkpoint(tmp_path / "c2", **{"m": "newer"}), 2, run=0)
    storage.write("checkpoints/9/data/0-2/r0/m", b"to")  # a part the upload lost
    step, notes = remote_store.pull(storage, "9", tmp_path / "n" / "9")
    assert step == 1 and "unreadable" in notes[0]
    assert (store.newest(tmp_path / "n" / "9")[0] / "m").read_text() == "good"


def test_ranks_on_two_nodes_merge_into_one_checkpoint(storage, tmp_path):
    remote_store.push(storage, "4", _checkpoint(tmp_path / "r0", **{"model": "m", "shared": "rank0"}), 3, run=2, rank=0)
    remote_store.push(storage, "4", _checkpoint(tmp_path / "r1", **{"shard-1": "s", "shared": "rank1"}), 3, run=2, rank=1)
    node = tmp_path / "n" / "4"
    assert remote_store.pull(storage, "4", node)[0] == 3
    folder = store.newest(node)[0]
    assert {p.name for p in folder.iterdir() if not p.name.startswith(".")} == {"model", "shared", "shard-1"}
    assert (folder / "shared").read_text() == "rank0"


def test_no_checkpoint_in_storage_empties_the_cache(storage, tmp_path):
    node = tmp_path / "n" / "5"
    staged = _checkpoint(tmp_path / "stale", m="old")
    store.commit(node, staged, 4)
    assert remote_store.pull(storage, "5", node) == (None, [])
    assert store.newest(node) is None


def test_unreachable_storage_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    with pytest.raises(StorageError) as caught:
        open_storage("s3://bucket/prefix", retry_s=0.5).check()
    assert "\n" not in str(caught.value) and "AWS_ENDPOINT_URL" in str(caught.value)


def test_a_missing_bucket_is_refused_at_once(s3_bucket):
    began = time.monotonic()
    with pytest.raises(StorageError) as caught:
        open_storage("s3://no-such-bucket-x/prefix", retry_s=30).check()
    assert time.monotonic() - began < 10, "a refusal for good is not retried"
    assert "\n" not in str(caught.value) and "NO_SUCH_BUCKET" in str(caught.value)


def test_folder_upload_and_download(storage, tmp_path):
    local = tmp_path / "rank-logs"
    local.mkdir()
    upload = FolderUpload(storage, "logs/1/attempt-0", local, interval_s=0.05)
    upload.start()
    (local / "rank-1.log").write_text("hello from a worker\n")
    time.sleep(0.3)
    (local / "rank-1.log").write_text("hello from a worker\nbye\n")
    upload.close()
    head = tmp_path / "head-logs"
    assert download_changed(storage, "logs/1", head / "1") == ["logs/1/attempt-0/rank-1.log"]
    assert (head / "1" / "attempt-0" / "rank-1.log").read_text().endswith("bye\n")
    assert download_changed(storage, "logs/1", head / "1") == []  # nothing new


def test_journal_mirror_restores_on_a_new_state_folder(storage, tmp_path):
    old = tmp_path / "old"
    journal = Journal(old / "journal.sqlite")
    mirror = JournalMirror(storage, old / "journal.sqlite", interval_s=0.05)
    mirror.start()
    for i in range(30):
        journal.append(float(i), "submit", i, {"n": i})
        if i % 7 == 0:
            assert mirror.wait(10)
    (old / "speeds.json").write_text(json.dumps({"a": 1}))
    journal.forget([0, 1, 2], 31.0, {"jobs": 3})  # a compaction: records deleted, folded into a base
    journal.append(32.0, "submit", 99, {})
    assert mirror.wait(10)
    mirror._files_at = 0.0
    mirror.flush()
    mirror.close()
    new = tmp_path / "new"
    assert restore(storage, new) == len(journal)
    rebuilt = Journal(new / "journal.sqlite")
    assert [(e.seq, e.kind, e.job_id, e.data) for e in rebuilt.events()] == \
        [(e.seq, e.kind, e.job_id, e.data) for e in journal.events()]
    assert json.loads((new / "speeds.json").read_text()) == {"a": 1}
    assert restore(storage, new) == 0  # a folder with a journal keeps it


def test_mirror_wait_covers_records_appended_from_another_thread(storage, tmp_path):
    journal = Journal(tmp_path / "journal.sqlite")
    mirror = JournalMirror(storage, tmp_path / "journal.sqlite", interval_s=0.5)
    mirror.start()
    writer = threading.Thread(target=lambda: [journal.append(float(i), "x", None, {}) for i in range(50)])
    writer.start()
    writer.join()
    began = time.monotonic()
    assert mirror.wait(10)
    assert time.monotonic() - began < 2
    assert mirror.mirrored == 50
    mirror.close()


@pytest.mark.slow
def test_wrong_credentials_are_one_line_at_start(tmp_path):
    """moto's server checking credentials (its own process, auth on): `pcs-ray start --storage` refuses at once,
    in one line naming what to set, before it looks for Ray."""
    import os
    import subprocess
    import sys

    from s3_server import free_port

    port = free_port()
    bin_dir = os.path.dirname(sys.executable)
    server = subprocess.Popen([os.path.join(bin_dir, "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "wrong",
               "AWS_SECRET_ACCESS_KEY": "wrong", "AWS_REGION": "us-east-1"}
        began = time.monotonic()
        for _ in range(50):  # the server's start
            done = subprocess.run([os.path.join(bin_dir, "pcs-ray"), "start", "--storage", "s3://bucket/prefix",
                                   "--address", "127.0.0.1:1"], env=env, capture_output=True, text=True, timeout=60)
            if "INVALID_ACCESS_KEY_ID" in done.stderr or "refused" in done.stderr:
                break
            time.sleep(0.2)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "refused" in lines[0] and "AWS_ACCESS_KEY_ID" in lines[0], lines
        assert time.monotonic() - began < 40
    finally:
        server.kill()
        server.wait()


def test_status_says_the_storage_is_away_when_nothing_is_written(s3_bucket, s3_server, tmp_path, monkeypatch):
    """Runs all waiting on the storage write no journal records: the mirror's own check still notices."""
    import pcs_ray.coordinator.journal_mirror as journal_mirror

    monkeypatch.setattr(journal_mirror, "PROBE_EVERY_S", 0.5)
    Journal(tmp_path / "journal.sqlite").append(1.0, "x", None, {})
    mirror = JournalMirror(open_storage(s3_bucket, retry_s=2), tmp_path / "journal.sqlite", interval_s=0.1)
    mirror.start()
    assert mirror.wait(10) and mirror.describe()["problem"] is None
    s3_server.stop()
    try:
        deadline = time.monotonic() + 15
        while not mirror.describe()["problem"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "unreachable" in (mirror.describe()["problem"] or ""), mirror.describe()
        Journal(tmp_path / "journal.sqlite").append(2.0, "x", None, {})
        began = time.monotonic()
        assert mirror.wait(30) is False and time.monotonic() - began < 1  # a known outage holds no call up
    finally:
        s3_server.start()
    deadline = time.monotonic() + 15
    while mirror.describe()["problem"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mirror.describe()["problem"] is None
    mirror.close()
