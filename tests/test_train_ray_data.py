"""Ray Data datasets with a pcs-ray job: staged by the driver, each rank's shard read through the job's resumable
order, so a job preempted and resized mid-epoch sees every row once per epoch."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import pcs_ray.train as train
from pcs_ray.train import datasets as staging
from pcs_ray.train.config import UnsupportedOptionError
from pcs_ray.train.session import Session, TrainContext, install

ROWS = 50


@pytest.fixture
def staged(tmp_path, monkeypatch):
    """A split ``train`` of ``ROWS`` rows (``id``, a list column ``x``) and a whole ``val``, staged in ``tmp_path``."""
    frame = pd.DataFrame({"id": np.arange(ROWS), "x": [[float(i), i + 0.5] for i in range(ROWS)]})
    out = staging.stage({"train": frame, "val": pa.Table.from_pandas(frame.head(7))},
                        train.DataConfig(datasets_to_split=["train"]), str(tmp_path))
    monkeypatch.setenv(staging.ENV, json.dumps(out))
    staging._shards.clear()
    yield out
    staging._shards.clear()
    install(None)


def _rank(world: int, rank: int, checkpoint_dir: str | None = None) -> Session:
    session = Session(TrainContext(world_size=world, world_rank=rank), checkpoint_dir)
    install(session)
    staging._shards.clear()
    return session


def test_ranks_split_a_pass_and_a_dataset_not_split_is_read_whole(staged):
    seen = []
    for rank in range(3):
        _rank(3, rank)
        shard = train.get_dataset_shard("train")
        batches = list(shard.iter_torch_batches(batch_size=4))
        assert all(b["x"].shape == (len(b["id"]), 2) for b in batches)  # a list column: one more dimension
        assert len(batches) == 4 and shard.count() == len(np.concatenate([b["id"] for b in batches]))
        seen += [b["id"].tolist() for b in batches]
        whole = pd.concat(train.get_dataset_shard("val").iter_batches(batch_size=3, batch_format="pandas"))
        assert whole["id"].tolist() == list(range(7))  # every rank reads it all, in order
    flat = sorted(i for batch in seen for i in batch)
    assert flat == list(range(ROWS))  # each row once in the epoch, across the ranks
    assert seen[0] == [0, 1, 2, 3]  # Ray Data's order: not shuffled unless asked


def test_each_call_is_a_pass_and_a_shuffle_is_asked_for(staged):
    _rank(1, 0)
    shard = train.get_dataset_shard("train")
    first = [i for b in shard.iter_batches(batch_size=8) for i in b["id"]]
    second = [i for b in shard.iter_batches(batch_size=8, local_shuffle_buffer_size=16) for i in b["id"]]
    assert first == list(range(ROWS)) and sorted(second) == first and second != first
    table = next(iter(shard.iter_batches(batch_size=5, batch_format="pyarrow", drop_last=True)))
    assert isinstance(table, pa.Table) and table.num_rows == 5
    assert len(list(shard.iter_batches(batch_size=8, drop_last=True))) == ROWS // 8


def test_a_checkpoint_mid_epoch_resumes_the_epoch_on_another_world_size(staged, tmp_path):
    session = _rank(1, 0, str(tmp_path / "ckpt"))
    taken = []
    for batch in train.get_dataset_shard("train").iter_batches(batch_size=4):
        taken += batch["id"].tolist()
        if len(taken) == 12:
            break
    folder = session.staging_dir()
    session.report({}, 3, folder)  # the stream's position is recorded in the checkpoint
    for rank in range(2):
        _rank(2, rank, str(tmp_path / "ckpt"))
        taken += [i for b in train.get_dataset_shard("train").iter_batches(batch_size=4) for i in b["id"]]
    assert sorted(taken) == list(range(ROWS))


def test_a_dataset_in_the_clusters_storage_is_downloaded_once_into_the_nodes_cache(tmp_path, monkeypatch):
    from pcs_ray.storage import open_storage

    bucket = open_storage(str(tmp_path / "bucket"))
    monkeypatch.setattr(staging, "_storage", lambda uri: bucket)  # an object store: here a folder behind its API
    monkeypatch.setenv("PCS_RAY_CACHE", str(tmp_path / "cache"))
    located = staging.stage({"train": pa.table({"id": np.arange(10)})}, None, "s3://bucket/pcs")
    assert list(bucket.list("datasets")) == [f"datasets/{located['token']}/train.arrow"]
    monkeypatch.setenv(staging.ENV, json.dumps(located))
    for rank in range(2):
        _rank(2, rank)
        shard = train.get_dataset_shard()  # the only one: Ray's default name needs none
        ids = [i for b in shard.iter_batches(batch_size=2) for i in b["id"]]
        assert ids == [[0, 1, 4, 5, 8], [2, 3, 6, 7, 9]][rank]
    assert len(list((tmp_path / "cache").rglob("*.arrow"))) == 1
    staging.unstage(located)
    assert not bucket.list("datasets")
    install(None)


def test_options_and_names_that_mean_nothing_are_said_in_one_line(staged, tmp_path):
    with pytest.raises(KeyError, match="train, val"):
        train.get_dataset_shard("test")
    with pytest.raises(UnsupportedOptionError, match="datasets_to_split"):
        staging.stage({"train": pa.table({"a": [1]})}, train.DataConfig(datasets_to_split=["nope"]), str(tmp_path))
    with pytest.raises(UnsupportedOptionError, match="datasets_to_split"):
        train.DataConfig(datasets_to_split="train")
    from pcs_ray.train.torch import TorchTrainer

    with pytest.raises(UnsupportedOptionError, match="dataset_config"):
        TorchTrainer(lambda: None, datasets={"train": pa.table({"a": [1]})}, dataset_config={"all": True})
    staging.unstage(staged)
    assert not (tmp_path / "datasets" / staged["token"]).exists()


# -- a job stopped mid-epoch, again and again, on 2, 1 and 3 ranks ------------------------------------

LOOP = '''
import json, os, time
import pcs_ray.train as train

def loop(config):
    ctx = train.get_context()
    shard = train.get_dataset_shard("train")
    epoch, step = 0, ctx.start_step
    if (ckpt := train.get_checkpoint()) is not None:
        with open(os.path.join(ckpt, "epoch.json")) as f:
            epoch = json.load(f)["epoch"]
    seen = open(os.path.join(config["seen"], f"a{ctx.attempt}-r{ctx.world_rank}.jsonl"), "a", buffering=1)

    def checkpoint(at_epoch, metrics):
        folder = None
        if ctx.world_rank == 0:
            folder = train.checkpoint_dir()
            with open(os.path.join(folder, "epoch.json"), "w") as f:
                json.dump({"epoch": at_epoch}, f)
        train.report(metrics, step=step, checkpoint=folder)

    read = 0
    while epoch < config["epochs"]:
        for batch in shard.iter_torch_batches(batch_size=4):
            seen.write(json.dumps({"epoch": epoch, "ids": batch["id"].tolist()}) + "\\n")
            step, read = step + 1, read + 1
            time.sleep(0.5 if read > config["slow_after"] else 0.02)  # a stop asked for lands within a batch or two
            if train.should_checkpoint():
                checkpoint(epoch, {"epoch": epoch})  # mid-epoch: the shard's position is recorded with it
        epoch += 1
        checkpoint(epoch, {"epoch": epoch})
'''


@pytest.mark.slow
def test_a_ray_data_loop_preempted_and_resized_mid_epoch_sees_each_row_once_per_epoch(ray_local, tmp_path):
    import ray
    from builders import wait_until

    from pcs_ray.contract import GPUSlot, RunRequest
    from pcs_ray.executors.launch import launch

    rows, epochs = 120, 2
    code, seen = tmp_path / "code", tmp_path / "seen"
    code.mkdir()
    seen.mkdir()
    (code / "loop.py").write_text(LOOP)
    located = staging.stage({"train": pa.table({"id": np.arange(rows)})}, None, str(tmp_path / "state"))

    def request(world: int, attempt: int, slow_after: int) -> RunRequest:
        return RunRequest("d1", "user:loop.py:loop", None, tuple(GPUSlot("node0", g) for g in range(world)),
                          str(tmp_path / "state" / "checkpoints" / "d1"), attempt=attempt,
                          code={"entrypoint": "loop.py:loop", "working_dir": str(code),
                                "config": {"seen": str(seen), "epochs": epochs, "slow_after": slow_after},
                                "runtime_env": {"env_vars": {staging.ENV: json.dumps(located)}}},
                          log_dir=str(tmp_path / "logs" / f"attempt-{attempt}"), report_interval_s=0.0)

    def lines(attempt: int) -> int:
        path = seen / f"a{attempt}-r0.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    worlds = [2, 2, 1, 1, 3, 3]  # 3 preemptions on as many GPUs and 2 resizes, each mid-epoch
    for attempt, world in enumerate(worlds, start=1):
        stopped = attempt < len(worlds)
        handle = launch(request(world, attempt, slow_after=2 if stopped else 10**6))
        if stopped:
            wait_until(lambda: lines(attempt) >= 2 or ray.wait([handle.done], timeout=0)[0], timeout=90,
                       what=f"run {attempt} to read batches")
            handle.request_stop()
            outcome = handle.outcome(timeout=120)
            assert outcome.status == "preempted", outcome
        else:
            outcome = handle.outcome(timeout=120)
            assert outcome.status == "finished", outcome
    by_epoch: dict[int, list[int]] = {}
    for path in seen.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            by_epoch.setdefault(row["epoch"], []).extend(row["ids"])
    assert sorted(by_epoch) == list(range(epochs))
    for epoch, ids in by_epoch.items():
        assert sorted(ids) == list(range(rows)), f"epoch {epoch}: ids seen twice or missed"
    mid_epoch = 0  # stopped runs that left their epoch part read (the rows of it seen by then, by every rank)
    for attempt in range(1, len(worlds)):
        last = json.loads((seen / f"a{attempt}-r0.jsonl").read_text().splitlines()[-1])["epoch"]
        rows_read = [json.loads(line) for a in range(1, attempt + 1) for path in seen.glob(f"a{a}-r*.jsonl")
                     for line in path.read_text().splitlines()]
        ids = [i for row in rows_read if row["epoch"] == last for i in row["ids"]]
        mid_epoch += 0 < len(ids) < rows
    assert mid_epoch >= 3
    staging.unstage(located)
