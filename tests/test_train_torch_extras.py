"""``ray.train.torch``'s mixed precision (``accelerate``), ``TorchConfig`` and ``CheckpointConfig``'s best K, under
pcs-ray: each reaches where it acts (the loop's forward and optimizer, the ranks' process group, the commits of
checkpoints locally and in an S3 bucket), and a value that cannot be used is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import pcs_ray.train as train  # noqa: E402
import pcs_ray.train.torch as train_torch  # noqa: E402
from pcs_ray.train import remote_store, session as train_session, store  # noqa: E402
from pcs_ray.jobs.train_options import checkpoint_spec  # noqa: E402
from pcs_ray.train.config import CheckpointConfig, RunConfig, TorchConfig, UnsupportedOptionError  # noqa: E402
from pcs_ray.train.result import Result  # noqa: E402

BEST_LOW = {"num_to_keep": 2, "score_attribute": "val_loss", "score_order": "min"}
VAL_LOSS = {1: 5.0, 2: 1.0, 3: 4.0, 4: 0.5, 5: 3.0, 6: 2.0}  # the two lowest: steps 4 and 2


@pytest.fixture
def rank(tmp_path):
    """A one-rank run's session on the CPU (a logical GPU), its checkpoints in ``tmp_path/job``."""
    session = train_session.Session(train_session.TrainContext(device="cpu", job_id="7"), str(tmp_path / "job"))
    train_session.install(session)
    yield session
    train_session.install(None)


def _fit(model, optimizer, steps: int) -> list[float]:
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = x @ torch.arange(8, dtype=torch.float32).unsqueeze(1)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        train_torch.backward(loss)
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_accelerate_amp_runs_the_forward_in_bfloat16_on_a_logical_gpu_and_the_loss_falls(rank):
    train_torch.accelerate(amp=True)
    torch.manual_seed(0)
    model = train.prepare_model(torch.nn.Linear(8, 1))
    assert model(torch.randn(2, 8)).dtype == torch.bfloat16  # autocast, as Ray's prepare_model sets it
    optimizer = train_torch.prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.02))
    losses = _fit(model, optimizer, 30)
    assert losses[-1] < 0.2 * losses[0]
    assert any("bfloat16" in said for said in rank.said)  # said once in the rank's log
    with pytest.raises(RuntimeError, match="once, before prepare_model") as info:
        train_torch.accelerate(amp=True)
    assert "\n" not in str(info.value)


def test_accelerate_after_prepare_model_is_refused_as_ray_does(rank):
    model = train.prepare_model(torch.nn.Linear(2, 1))
    assert model(torch.randn(1, 2)).dtype == torch.float32  # no amp asked: full precision
    with pytest.raises(RuntimeError, match="accelerator has already been set"):
        train_torch.accelerate(amp=True)


def test_a_gradient_scaler_scales_backward_and_steps_the_optimizer(rank):
    """The GPU's path (float16 with a GradScaler), run with the CPU's scaler: ``backward`` scales the loss and the
    prepared optimizer unscales, steps and updates through the scaler, and an LR scheduler takes it."""
    accelerator = train_torch.Accelerator(False, "cpu")
    accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    rank.accelerator = accelerator
    model = train.prepare_model(torch.nn.Linear(8, 1))
    inner = torch.optim.SGD(model.parameters(), lr=0.02)
    optimizer = train_torch.prepare_optimizer(inner)
    assert isinstance(optimizer, torch.optim.Optimizer) and optimizer.param_groups is inner.param_groups
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1000)
    loss = model(torch.ones(1, 8)).sum()
    train_torch.backward(loss)
    assert torch.allclose(model.weight.grad, torch.full_like(model.weight.grad, 1024.0))  # scaled
    optimizer.zero_grad()
    losses = _fit(model, optimizer, 30)
    scheduler.step()
    assert losses[-1] < 0.2 * losses[0] and optimizer.state_dict()["param_groups"][0]["lr"] == 0.02


@pytest.mark.parametrize("make, option", [
    (lambda: TorchConfig(init_method="tcp://10.0.0.1:2345"), "init_method"),
    (lambda: TorchConfig(backend="mpi"), "backend"),
    (lambda: TorchConfig(timeout_s=0), "timeout_s"),
    (lambda: CheckpointConfig(num_to_keep=0), "num_to_keep"),
    (lambda: CheckpointConfig(checkpoint_score_attribute="loss"), "num_to_keep"),
    (lambda: CheckpointConfig(num_to_keep=3, checkpoint_score_attribute="loss", checkpoint_score_order="low"),
     "checkpoint_score_order"),
    (lambda: CheckpointConfig(checkpoint_at_end=True), "checkpoint_frequency"),
])
def test_a_torch_or_checkpoint_config_that_cannot_be_used_is_refused_in_one_line(make, option):
    with pytest.raises(UnsupportedOptionError) as info:
        make()
    assert option in str(info.value) and "\n" not in str(info.value)


def test_torch_and_checkpoint_configs_travel_in_the_job_spec_to_the_ranks_code(tmp_path):
    from pcs_ray.jobs.jobfile import JobFile

    trainer = train_torch.TorchTrainer(
        "train.py:loop", torch_config=TorchConfig(backend="gloo", timeout_s=60), working_dir=tmp_path,
        run_config=RunConfig(checkpoint_config=CheckpointConfig(2, "val_loss", "min")), client=object())
    spec = trainer.spec()
    assert spec["torch_config"] == {"backend": "gloo", "timeout_s": 60} and spec["checkpoint_config"] == BEST_LOW
    job = JobFile(**spec)
    assert (job.torch_config, job.checkpoint_config) == (spec["torch_config"], BEST_LOW)
    plain = train_torch.TorchTrainer("train.py:loop", run_config=RunConfig(
        checkpoint_config=CheckpointConfig(num_to_keep=2)), working_dir=tmp_path, client=object()).spec()
    assert "torch_config" not in plain and "checkpoint_config" not in plain  # the default: nothing travels
    with pytest.raises(ValueError, match="backend"):
        JobFile(entrypoint="train.py:loop", torch_config={"backend": "mpi"})


def test_the_torch_config_reaches_init_process_group(monkeypatch):
    import datetime

    import torch.distributed as dist

    from pcs_ray.executors import rendezvous, user_run

    notes: list[str] = []
    assert user_run.group_options({"backend": "nccl", "timeout_s": 60}, "cpu", notes) == ("gloo", 60)
    assert len(notes) == 1 and "gloo" in notes[0]  # NCCL on a logical GPU: gloo, said once
    assert user_run.group_options(None, "cuda:0", []) == ("nccl", None)
    called = {}
    monkeypatch.setattr(rendezvous, "pick_interfaces", lambda: {})
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: called.update(backend=backend, **kw))
    rendezvous.join_group("gloo", ("127.0.0.1", 1234), 0, 2, timeout_s=60)
    assert called["backend"] == "gloo" and called["timeout"] == datetime.timedelta(seconds=60)


def _report_checkpoints(tmp_path, keep, steps=VAL_LOSS):
    session = train_session.Session(train_session.TrainContext(device="cpu", job_id="7", attempt=1),
                                    str(tmp_path / "job"), keep=keep)
    for step, loss in steps.items():
        folder = tmp_path / f"c{step}"
        folder.mkdir(parents=True)
        (folder / "model.pt").write_text(str(step))
        session.report({"val_loss": loss, "loss": torch.tensor(float(step))}, step, checkpoint=str(folder))
    return session


def test_best_k_keeps_the_k_best_beside_the_newest_two_with_their_metrics(tmp_path):
    _report_checkpoints(tmp_path, BEST_LOW)
    job = tmp_path / "job"
    kept = store.kept(job)
    assert [m["step"] for _, m in kept] == [2, 4, 5, 6]  # the best two (2, 4) and the newest two (5, 6)
    assert sorted(p.name for p in job.iterdir() if not p.name.startswith(".")) == \
        sorted(["latest", "previous", *[p.name for p, m in kept if m["step"] in (2, 4)]])
    assert [s for _, s in store.checkpoints(job)] == [6, 5]  # a run still resumes from the newest, falls back to 5
    assert kept[1][1]["metrics"] == {"val_loss": 0.5, "loss": 4.0}  # a tensor kept as its number
    result = Result({"val_loss": 2.0}, train.Checkpoint(str(job / "latest")), view={"checkpoint": str(job / "latest")})
    best = result.best_checkpoints
    assert [(json.loads((Path(p) / store.MARKER).read_text())["step"], m["val_loss"]) for p, m in best] == \
        [(2, 1.0), (4, 0.5), (5, 3.0), (6, 2.0)]
    assert best[-1][0] == result.checkpoint


def test_num_to_keep_without_a_score_keeps_the_newest_k_and_no_policy_the_newest_two(tmp_path):
    _report_checkpoints(tmp_path / "newest", checkpoint_spec({"num_to_keep": 4}))
    assert [m["step"] for _, m in store.kept(tmp_path / "newest" / "job")] == [3, 4, 5, 6]
    _report_checkpoints(tmp_path / "default", None)
    assert [m["step"] for _, m in store.kept(tmp_path / "default" / "job")] == [5, 6]


@pytest.fixture
def bucket_storage(s3_bucket):
    from pcs_ray.storage import open_storage

    return open_storage(s3_bucket, retry_s=2)


def test_best_k_in_a_bucket_keeps_the_k_best_and_a_node_still_resumes_from_the_newest(bucket_storage, tmp_path):
    for step, loss in VAL_LOSS.items():
        folder = tmp_path / f"c{step}"
        folder.mkdir()
        (folder / "model.pt").write_text(str(step))
        remote_store.push(bucket_storage, "7", folder, step, run=1, metrics={"val_loss": loss}, keep=BEST_LOW)
    folders = {key.split("/")[3] for key in bucket_storage.list("checkpoints/7/data")}
    assert folders == {"1-2", "1-4", "1-5", "1-6"}  # the others' objects are deleted
    kept = remote_store.kept_checkpoints(bucket_storage, "checkpoints/7")
    assert [(m["step"], m["metrics"]["val_loss"]) for _, m in kept] == [(2, 1.0), (4, 0.5), (5, 3.0), (6, 2.0)]
    cache = tmp_path / "cache"
    assert remote_store.pull(bucket_storage, "7", cache)[0] == 6
    assert (cache / "latest" / "model.pt").read_text() == "6"
    newest = remote_store.remote_url(bucket_storage, "7")
    result = Result({}, train.Checkpoint(newest), view={"checkpoint": newest})
    best = result.best_checkpoints
    assert [m["val_loss"] for _, m in best] == [1.0, 0.5, 3.0, 2.0] and best[-1][0] == newest
    with best[1][0].as_directory() as d:
        assert open(f"{d}/model.pt").read() == "4"
