"""``RunConfig(storage_path=URI)``, ``storage_filesystem`` and ``Checkpoint`` by URI: a run's result kept in a storage,
its checkpoint named where the cluster keeps it and downloaded from there.

Every storage is a real one: moto's S3 server over HTTP on loopback (``s3_bucket``: ``s3://<bucket>/cluster`` and
the AWS variables set for the test), or a folder. The drivers' tests play a job's runs in this process
(``run_rank``, as ``test_train_api`` does) on a coordinator core with or without a cluster storage; the Tune
test (slow) runs a sweep's trials on the session's local Ray.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import pytest

import pcs_ray.train as train
from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator import Coordinator, Journal, StartRun
from pcs_ray.coordinator.local import LocalCoordinator
from pcs_ray.policies import build_policy
from pcs_ray.storage import open_storage
from pcs_ray.train import Checkpoint, RunConfig, ScalingConfig, UnsupportedOptionError
from pcs_ray.train import remote_store
from pcs_ray.train.result import Result
from pcs_ray.train.torch import TorchTrainer

LOOP = """
import os
import pcs_ray.train as train

def loop(config):
    for epoch in range(config["epochs"]):
        folder = train.checkpoint_dir()
        with open(os.path.join(folder, "model.txt"), "w") as f:
            f.write(f"weights after epoch {epoch}")
        train.report({"epoch": epoch, "loss": 1.0 / (epoch + 1)}, checkpoint=folder)
"""


def _files(folder) -> dict[str, str]:
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()}


def _checkpoint_folder(tmp_path, name="ckpt", **files) -> Path:
    folder = tmp_path / name
    (folder / "sub").mkdir(parents=True)
    for rel, text in files.items():
        (folder / rel).write_text(text)
    return folder


# -- RunConfig ---------------------------------------------------------------------------------------------
def test_run_config_takes_a_storage_uri_or_a_pyarrow_file_system_as_ray_train_does(s3_bucket, tmp_path):
    from pyarrow import fs as pafs

    assert RunConfig(storage_path=f"{s3_bucket}/runs").remote
    assert RunConfig(storage_path="gs://bucket/runs").remote  # opened, not contacted
    s3 = open_storage(s3_bucket).fs
    bucket_path = s3_bucket[len("s3://"):]
    assert RunConfig(storage_path=bucket_path, storage_filesystem=s3).remote
    local = RunConfig(storage_path=str(tmp_path), storage_filesystem=pafs.LocalFileSystem())
    assert not local.remote and RunConfig(storage_path=f"file://{tmp_path}").local_folder() == str(tmp_path)
    assert RunConfig(storage_path=str(tmp_path)).result_storage() is None  # a local folder: nothing to check


@pytest.mark.parametrize("make, option, words", [
    (lambda: RunConfig(storage_path="nosuchscheme://bucket/runs"), "storage_path", "cannot be opened"),
    (lambda: RunConfig(storage_path="s3:///runs"), "storage_path", "no bucket"),
    (lambda: RunConfig(storage_path="b/runs", storage_filesystem="s3"), "storage_filesystem", "pyarrow.fs.FileSystem"),
    (lambda: RunConfig(storage_filesystem=__import__("pyarrow.fs").fs.LocalFileSystem()), "storage_filesystem",
     "give storage_path"),
    (lambda: RunConfig(storage_path="s3://b/runs", storage_filesystem=__import__("pyarrow.fs").fs.LocalFileSystem()),
     "storage_filesystem", "no scheme"),
])
def test_a_storage_that_cannot_be_opened_is_one_line(make, option, words):
    with pytest.raises(UnsupportedOptionError) as info:
        make()
    text = str(info.value)
    assert f"RunConfig({option})" in text and words in text and "\n" not in text and isinstance(info.value, ValueError)


def test_a_storage_that_cannot_be_written_is_refused_before_anything_is_submitted(s3_bucket):
    class NeverCalled:
        def submit(self, spec):
            raise AssertionError("submitted")

    missing = "s3://no-such-bucket-pcs-ray/runs"
    trainer = TorchTrainer("loop.py:loop", scaling_config=ScalingConfig(use_gpu=True), client=NeverCalled(),
                           run_config=RunConfig(name="mlp", storage_path=missing), working_dir=".")
    for call in (trainer.submit, trainer.fit):
        with pytest.raises(UnsupportedOptionError) as info:
            call()
        text = str(info.value)
        assert "cannot be written" in text and "nothing was submitted" in text and "\n" not in text


# -- Checkpoint by URI --------------------------------------------------------------------------------------
def test_a_checkpoint_in_the_storage_is_named_by_its_uri_and_downloaded_from_it(s3_bucket, tmp_path):
    storage = open_storage(s3_bucket, retry_s=5)
    files = {"model.txt": "w2", "sub/opt.txt": "o2"}
    remote_store.push(storage, "7", _checkpoint_folder(tmp_path, "c1", **{"model.txt": "w1", "sub/opt.txt": "o1"}), 1, run=1)
    remote_store.push(storage, "7", _checkpoint_folder(tmp_path, "c2", **files), 2, run=1)
    uri = remote_store.remote_url(storage, "7")
    assert uri == f"{s3_bucket}/checkpoints/7/data/1-2/r0"
    assert remote_store.job_url(uri) == f"{s3_bucket}/checkpoints/7"

    checkpoint = Checkpoint(uri)
    assert checkpoint.path == uri == checkpoint and checkpoint.remote
    assert type(checkpoint.filesystem).__name__ == "S3FileSystem"
    assert checkpoint.to_directory(tmp_path / "copy") == str(tmp_path / "copy") and _files(tmp_path / "copy") == files
    with checkpoint.as_directory() as d:
        assert _files(d) == files
    assert not Path(d).exists()  # the temporary download is gone after the block
    fresh = checkpoint.to_directory()  # Ray's: a temporary folder when none is named
    assert _files(fresh) == files
    again = pickle.loads(pickle.dumps(checkpoint))  # travels (to a rank, a Tune trial) as its URI
    assert again == uri and again.remote and _files(again.to_directory(tmp_path / "again")) == files
    with pytest.raises(FileNotFoundError, match="no files there"):
        Checkpoint(f"{s3_bucket}/checkpoints/404").to_directory(tmp_path / "none")


def test_a_checkpoint_in_a_given_file_system_and_a_local_one(s3_bucket, tmp_path):
    storage = open_storage(s3_bucket, retry_s=5)
    storage.write("mine/model.txt", b"w")
    checkpoint = Checkpoint(f"{s3_bucket[len('s3://'):]}/mine", filesystem=storage.fs)  # Ray's (path, filesystem)
    assert checkpoint.remote and checkpoint.filesystem is storage.fs
    assert _files(checkpoint.to_directory(tmp_path / "got")) == {"model.txt": "w"}
    local = Checkpoint.from_directory(_checkpoint_folder(tmp_path, "here", **{"m": "x"}))
    assert not local.remote and local.to_directory() == str(tmp_path / "here")  # used where it is
    with local.as_directory() as d:
        assert d == str(tmp_path / "here")
    assert type(local.filesystem).__name__ == "LocalFileSystem"


# -- Result kept in the storage ------------------------------------------------------------------------------
def test_a_result_is_kept_in_a_remote_storage_as_result_json_lines(s3_bucket):
    rows = [{"step": 1, "attempt": 1, "loss": 2.0}, {"step": 2, "attempt": 1, "loss": 1.0}]
    checkpoint = Checkpoint(f"{s3_bucket}/checkpoints/3/data/1-2/r0")
    result = Result({"loss": 1.0}, checkpoint, job_id=3, history=lambda: rows)
    storage = RunConfig(storage_path=f"{s3_bucket}/runs").result_storage()
    kept = result.keep_in("mlp", storage)
    assert kept.path == f"{s3_bucket}/runs/mlp" and kept.checkpoint is checkpoint  # not copied: where the cluster keeps it
    assert type(kept.filesystem).__name__ == "S3FileSystem"
    lines = [json.loads(line) for line in storage.read("mlp/result.json").decode().splitlines()]
    assert lines == [{**row, "job_id": 3} for row in rows]

    def unreadable():
        raise ConnectionError("the coordinator forgot the job")
    Result({"loss": 1.0}, None, job_id=4, history=unreadable).keep_in("lost", storage)
    assert json.loads(storage.read("lost/result.json")) == {"loss": 1.0, "job_id": 4}  # the final metrics alone


# -- Drivers on a coordinator with and without a cluster storage --------------------------------------------------------
class InProcess(LocalCoordinator):
    """A client whose jobs run in this process: the core's runs are played by ``run_rank`` (rank 0 of 1), their
    logs uploaded to the cluster's storage as a rank's actor does."""

    def wait(self, job_id: int, timeout: float | None = None) -> dict:
        from pcs_ray.executors.user_run import run_rank

        while not self.core.jobs[job_id].done:
            request = next(a.request for a in self.held if isinstance(a, StartRun) and a.request.job_id == str(job_id))
            self.held.remove(next(a for a in self.held if isinstance(a, StartRun) and a.request is request))
            out = run_rank(request, lambda: False, 0, 1, None, {})
            if request.storage:  # what a rank's actor does with its logs folder: upload it (pcs-ray logs reads it there)
                from pcs_ray.storage.folders import FolderUpload

                logs = remote_store.local_paths(request.storage, request.job_id, request.attempt)[1]
                FolderUpload(open_storage(request.storage), f"logs/{job_id}/attempt-{request.attempt}", logs).flush()
            with self.lock:
                self.held += self.core.run_ended(job_id, request.attempt, out.status, out.step, error=out.error,
                                                 fatal=out.fatal, metrics=out.metrics)
        return self.core.job_view(job_id)


def _cluster(tmp_path, storage: str | None) -> InProcess:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "loop.py").write_text(LOOP)
    core = Coordinator(ClusterSpec.homogeneous(1, 2), build_policy("fifo"), Journal(tmp_path / "journal.sqlite"),
                       checkpoint_root=tmp_path / "state" / "checkpoints", clock=lambda: 1000.0, storage=storage)
    return InProcess(core)


def _trainer(tmp_path, client, **run) -> TorchTrainer:
    return TorchTrainer("loop.py:loop", train_loop_config={"epochs": 3}, working_dir=tmp_path / "code", client=client,
                        scaling_config=ScalingConfig(use_gpu=True), run_config=RunConfig(name="mlp", **run))


def test_with_a_cluster_storage_the_result_goes_to_storage_path_and_the_checkpoint_is_the_clusters(
        s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv(remote_store.CACHE_ENV, str(tmp_path / "node-cache"))
    client = _cluster(tmp_path, s3_bucket)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn of: the cluster keeps checkpoints in its storage
        result = _trainer(tmp_path, client, storage_path=f"{s3_bucket}/runs").fit()
    jid = result.job_id
    assert result.path == f"{s3_bucket}/runs/mlp"
    assert result.checkpoint.path.startswith(f"{s3_bucket}/checkpoints/{jid}/data/") and result.checkpoint.remote
    assert result.checkpoint == client.core.job_view(jid)["checkpoint"]
    assert _files(result.checkpoint.to_directory(tmp_path / "got")) == {"model.txt": "weights after epoch 2"}
    lines = [json.loads(line) for line in open_storage(s3_bucket).read("runs/mlp/result.json").decode().splitlines()]
    assert [(r["step"], r["epoch"], r["job_id"]) for r in lines] == [(1, 0, jid), (2, 1, jid), (3, 2, jid)]
    assert result.metrics == {"epoch": 2, "loss": 1 / 3}

    plain = _trainer(tmp_path, client).fit()  # no storage_path: Result.path is the job's folder in the storage
    assert plain.path == f"{s3_bucket}/checkpoints/{plain.job_id}" and plain.checkpoint.startswith(plain.path + "/data/")
    kept = _trainer(tmp_path, client, storage_path=str(tmp_path / "runs")).fit()  # a local folder gets a copy
    assert kept.path == str(tmp_path / "runs" / "mlp")
    assert _files(kept.checkpoint) == {"model.txt": "weights after epoch 2"} and not kept.checkpoint.remote


def test_without_a_cluster_storage_the_result_still_goes_there_and_it_says_once_where_checkpoints_stay(
        s3_bucket, tmp_path):
    import pcs_ray.train.trainer.torch_trainer as torch_trainer

    torch_trainer._said.clear()
    client = _cluster(tmp_path, None)
    with pytest.warns(UserWarning) as said:
        result = _trainer(tmp_path, client, storage_path=f"{s3_bucket}/runs").fit()
        again = _trainer(tmp_path, client, storage_path=f"{s3_bucket}/runs").fit()
    [warning] = [w for w in said if "STATE_DIR" in str(w.message)]  # once, not once per fit
    assert "the cluster has no storage" in str(warning.message) and "\n" not in str(warning.message)
    assert result.path == again.path == f"{s3_bucket}/runs/mlp"
    folder = tmp_path / "state" / "checkpoints" / str(result.job_id)
    assert not result.checkpoint.remote and Path(result.checkpoint).parent == folder
    assert _files(result.checkpoint.to_directory(tmp_path / "got")) == {"model.txt": "weights after epoch 2"}
    lines = open_storage(s3_bucket).read("runs/mlp/result.json").decode().splitlines()
    assert [json.loads(line)["job_id"] for line in lines] == [again.job_id] * 3  # the newest run of that name


# -- Tune ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_sweeps_experiment_and_its_trials_checkpoints_go_to_an_s3_storage_path(ray_local, s3_bucket, tmp_path):
    from ray import tune

    import pcs_ray.executors.tune as pcs_tune
    from builders import coordinator

    link = LocalCoordinator(coordinator(gpus=2, checkpoint_root=tmp_path / "ckpt", workloads=("tiny_cnn",)))
    aws = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}

    def trainable(config):
        # Each node's AWS variables are a trial's credentials; this session's Ray was started without them.
        os.environ.update(config["aws"])
        import tempfile

        start = 0
        if (checkpoint := tune.get_checkpoint()) is not None:
            with checkpoint.as_directory() as d:
                start = int(Path(d, "it").read_text())
        for it in range(start + 1, 3):
            with tempfile.TemporaryDirectory() as d:
                Path(d, "it").write_text(str(it))
                tune.report({"it": it, "x": config["x"]}, checkpoint=tune.Checkpoint.from_directory(d))

    tuner = pcs_tune.PCSTuner(trainable, param_space={"x": tune.grid_search([1, 2]), "aws": aws}, iterations=2,
                              client=link, iteration_time=0.1, run_config=RunConfig(name="sweep",
                                                                                     storage_path=f"{s3_bucket}/tune"))
    grid = tuner.fit()
    assert not grid.errors, grid.errors
    keys = open_storage(s3_bucket).list("tune/sweep")
    assert any(k.endswith("tuner.pkl") for k in keys) and any("experiment_state" in k for k in keys)
    for result in grid:
        assert result.metrics["it"] == 2 and type(result.filesystem).__name__ == "S3FileSystem"
        assert result.checkpoint.path.startswith(f"{s3_bucket[len('s3://'):]}/tune/sweep/")
        with result.checkpoint.as_directory() as d:
            assert Path(d, "it").read_text() == "2"
    trials = {k.split("/")[2] for k in keys if "/checkpoint_" in k}
    assert len(trials) == 2  # each trial's checkpoints under the experiment's folder in the bucket
    assert link.core.jobs[tuner.job_id].state == "finished"

    with pytest.raises(UnsupportedOptionError, match="cannot be written"):  # a wrong bucket: no sweep registered
        pcs_tune.PCSTuner(trainable, param_space={}, iterations=1, client=link,
                          storage_path="s3://no-such-bucket-pcs-ray/tune")
    assert len(link.core.jobs) == 1
