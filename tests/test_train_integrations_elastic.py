"""A Lightning script and a Transformers script, each written as Ray's docs show and submitted as an elastic
``TorchTrainer`` job (1 to 4 GPUs) to a coordinator on 4 GPUs, run beside rigid jobs that arrive and leave: the
elastic job starts on the 3 GPUs a 1-GPU job leaves free, shrinks to 1 when a 2-GPU job arrives and grows to 2
when the 1-GPU job leaves. Every run after the first resumes from the integration's own checkpoint at the step
the run before stopped at, no step lost, and each epoch still trains each sample once."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from builders import wait_until

pytestmark = pytest.mark.slow

# A rigid job that holds its GPUs until the test releases it (its marker file appears), reporting as it goes.
HOLD = '''
import os, time
import pcs_ray.train as train

def hold(config):
    step = 0
    while not os.path.exists(config["release"]):
        time.sleep(0.05)
        step += 1
        train.report({}, step=step)
'''

# Ray's Lightning example with its imports changed. Each rank writes, at its fit's start, the step Lightning
# restored and the checkpoint file it restored from, and at each training step the step and the sample ids.
LIGHTNING = '''
import os, time
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, Dataset

import pcs_ray.train as train
from pcs_ray.train.lightning import (RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback,
                                     prepare_trainer)


class Numbered(Dataset):
    def __init__(self, size):
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        return torch.tensor([float(i) / self.size]), i


class Model(pl.LightningModule):
    def __init__(self, config):
        super().__init__()
        self.config, self.layer = config, torch.nn.Linear(1, 1)

    def on_train_start(self):
        ctx = train.get_context()
        with open(os.path.join(self.config["out"], "starts.txt"), "a") as f:
            f.write(f"{ctx.attempt} {ctx.world_rank} {ctx.world_size} {self.trainer.global_step} "
                    f"{self.trainer.ckpt_path}\\n")

    def training_step(self, batch, batch_idx):
        x, ids = batch
        ctx = train.get_context()
        with open(os.path.join(self.config["out"], f"steps-{ctx.attempt}-{ctx.world_rank}.txt"), "a") as f:
            f.write(f"{self.trainer.global_step} {self.trainer.current_epoch} {' '.join(map(str, ids.tolist()))}\\n")
        time.sleep(self.config["sleep"])
        loss = (self.layer(x) - x).pow(2).mean()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def train_func(config):
    dl = DataLoader(Numbered(config["size"]), batch_size=config["batch"], shuffle=True)
    trainer = pl.Trainer(max_epochs=config["epochs"], devices="auto", accelerator="auto", strategy=RayDDPStrategy(),
                         plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()],
                         enable_checkpointing=False, logger=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer = prepare_trainer(trainer)
    model = Model(config)
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            trainer.fit(model, train_dataloaders=dl, ckpt_path=os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.fit(model, train_dataloaders=dl)
'''

# Ray's Transformers example with its imports changed (a tiny BERT built from its config: nothing downloaded).
# Rank 0 writes, on a resume, the step in the Trainer's state of the folder it resumes from and that folder's
# files; each rank writes the step and the sample ids of each batch it trains.
TRANSFORMERS = '''
import json, os, time
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

import pcs_ray.train as train
from pcs_ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer


class Samples(torch.utils.data.Dataset):
    def __init__(self, size):
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 30, (8,), generator=g), "labels": i % 2, "sample_id": i}


def collate(items):
    return {"input_ids": torch.stack([x["input_ids"] for x in items]),
            "labels": torch.tensor([x["labels"] for x in items]),
            "sample_id": torch.tensor([x["sample_id"] for x in items])}


class Recording(Trainer):
    def compute_loss(self, model, inputs, **kwargs):
        ids = inputs.pop("sample_id").tolist()
        with open(self.record, "a") as f:
            f.write(json.dumps([self.state.global_step, ids]) + "\\n")
        time.sleep(self.sleep)
        return super().compute_loss(model, inputs, **kwargs)


def train_func(config):
    torch.manual_seed(0)
    ctx = train.get_context()
    model = BertForSequenceClassification(BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32))
    args = TrainingArguments(output_dir=os.path.join(config["out"], f"trainer-{ctx.attempt}"),
                             num_train_epochs=config["epochs"], per_device_train_batch_size=config["batch"],
                             save_strategy="no", report_to=[], logging_steps=5, remove_unused_columns=False,
                             disable_tqdm=True, learning_rate=1e-3)
    trainer = Recording(model=model, args=args, train_dataset=Samples(config["size"]), data_collator=collate)
    trainer.record = os.path.join(config["out"], f"steps-{ctx.attempt}-{ctx.world_rank}.jsonl")
    trainer.sleep = config["sleep"]
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            folder = os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME)
            if ctx.world_rank == 0:
                state = json.load(open(os.path.join(folder, "trainer_state.json")))
                with open(os.path.join(config["out"], "starts.txt"), "a") as f:
                    f.write(json.dumps([ctx.attempt, ctx.world_size, state["global_step"],
                                        sorted(os.listdir(folder))]) + "\\n")
            trainer.train(resume_from_checkpoint=folder)
    else:
        trainer.train()
'''


@pytest.fixture
def coordinator(ray_local, tmp_path):
    """A coordinator on 4 GPUs (two nodes of 2) under the fair policy: each arrival takes its share of the
    elastic job's GPUs, each departure gives them back."""
    from pcs_ray.client import Client
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.coordinator.actor import start_coordinator
    from pcs_ray.coordinator.config import CoordinatorConfig, cluster_dict

    config = CoordinatorConfig(cluster=cluster_dict(ClusterSpec.homogeneous(4, 2)), state_dir=str(tmp_path / "state"),
                               policy="fair", grace_s=30.0, progress_journal_every=0.0, warm_pool=False)
    actor = start_coordinator(config)
    yield Client(coordinator=actor)
    ray_local.kill(actor, no_restart=True)
    time.sleep(0.5)


@pytest.fixture
def code(tmp_path):
    """A folder for the user's script (importable here, as a driver imports its own training function) and the
    rigid jobs' loop; the output folder the loops write their records to."""
    folder, out = tmp_path / "code", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    (folder / "hold.py").write_text(HOLD)
    sys.path.insert(0, str(folder))
    yield folder, out
    sys.path.remove(str(folder))
    for name in ("lightning_train", "transformers_train"):
        sys.modules.pop(name, None)


def _running_on(client, jid: int, gpus: int, steps: int):
    """The job's view once its current run holds ``gpus`` GPUs and has trained ``steps`` steps past its start."""
    job = client.job(jid)
    seg = job["segments"][-1] if job["segments"] else None
    ok = (job["state"] == "running" and seg is not None and seg["end"] is None and len(seg["gpus"]) == gpus
          and job["steps"] >= seg["from_step"] + steps)
    return job if ok else None


def _rigid(client, code_dir: Path, out: Path, gpus: int):
    """A rigid ``gpus``-GPU job that holds its GPUs until :func:`_release` lets it finish."""
    return client.submit({"entrypoint": "hold.py:hold", "working_dir": str(code_dir), "step_time": 0.05,
                          "name": f"rigid-{gpus}", "gpus": gpus, "config": {"release": str(out / f"release-{gpus}")}})


def _release(out: Path, gpus: int) -> None:
    (out / f"release-{gpus}").touch()


def _resized_beside_rigid_jobs(client, trainer, code_dir: Path, out: Path, timeout: float):
    """Submit the elastic job beside a running 1-GPU rigid job (it starts on 3 GPUs), shrink it to 1 with a
    2-GPU arrival, grow it to 2 with the 1-GPU job's departure, and let it finish there; the 2-GPU job leaves
    after. Each resize waits for the run before to train a few steps. Returns the fit's result and the job's view.

    Three runs (3 + 1 + 2 ranks) are the fewest that show two resizes to three sizes: each run's start (a
    process per rank importing torch and the integration) is most of this test's time on a CPU runner."""
    one = _rigid(client, code_dir, out, 1)
    try:
        jid = trainer.submit().id
        wait_until(lambda: _running_on(client, jid, 3, 2), timeout=150, what="the elastic job on 3 GPUs", every=0.2)
        two = _rigid(client, code_dir, out, 2)  # the fair share: 1 GPU for the elastic job
        wait_until(lambda: _running_on(client, jid, 1, 2), timeout=150, what="the elastic job on 1 GPU", every=0.2)
        _release(out, 1)  # its GPU goes back to the elastic job
        result = trainer.fit(timeout=timeout)
    finally:  # a rigid job left holding its GPUs would outlive a failed test
        _release(out, 1)
        _release(out, 2)
    job = client.job(jid)
    print("segments (gpus, from_step, seconds):", job["steps"],  # shown with a failure, and with -s
          [(len(s["gpus"]), s["from_step"], round((s["end"] or s["start"]) - s["start"], 1)) for s in job["segments"]])
    assert job["state"] == "finished", job["error"]
    for rigid in (one, two):
        assert client.wait(rigid.id, timeout=60)["state"] == "finished"
    counts = [len(s["gpus"]) for s in job["segments"]]
    assert counts == [3, 1, 2], counts  # two resizes, three sizes
    assert [s.get("stopped_for") for s in job["segments"]] == ["resize", "resize", None], job["segments"]
    assert job["lost_steps"] == 0 and job["attempts"] == 3 and job["retries"] == 0, job
    assert all(s["from_step"] > 0 for s in job["segments"][1:]), job["segments"]
    return result, job


def _check_steps(job: dict, steps_by_attempt: dict[int, list[int]]) -> None:
    """Each run trained consecutive steps from its segment's ``from_step`` on, and the next run starts at the step
    after this run's last: the step it stopped (and checkpointed) at."""
    segments = job["segments"]
    for attempt, seg in enumerate(segments, start=1):
        steps = sorted(set(steps_by_attempt[attempt]))
        assert steps == list(range(seg["from_step"], steps[-1] + 1)), (attempt, steps)
        if attempt < len(segments):
            assert segments[attempt]["from_step"] == steps[-1] + 1, (attempt, steps[-1], segments[attempt])
    assert job["steps"] == max(steps_by_attempt[len(segments)]) + 1


def test_an_elastic_lightning_script_resized_beside_rigid_jobs_resumes_from_its_own_checkpoints(coordinator, code):
    """Ray's Lightning example as an elastic TorchTrainer job, resized 3 -> 1 -> 2 by a rigid arrival and a
    departure: each run resumed from Lightning's ``checkpoint.ckpt`` at the step its predecessor stopped at."""
    from pcs_ray.train import RunConfig, ScalingConfig
    from pcs_ray.train.lightning import RayTrainReportCallback
    from pcs_ray.train.torch import TorchTrainer

    client, (code_dir, out) = coordinator, code
    (code_dir / "lightning_train.py").write_text(LIGHTNING)
    import lightning_train

    size, epochs = 200, 4  # enough left after the shrink to 1 GPU that the job is still there to grow
    config = {"out": str(out), "size": size, "batch": 4, "epochs": epochs, "sleep": 0.05}
    trainer = TorchTrainer(lightning_train.train_func,
                           train_loop_config=config,
                           scaling_config=ScalingConfig(num_workers=(1, 4), use_gpu=True),
                           run_config=RunConfig(name="lightning-elastic"), working_dir=code_dir, client=client)
    result, job = _resized_beside_rigid_jobs(client, trainer, code_dir, out, timeout=240)
    assert result.metrics["epoch"] == epochs - 1 and result.metrics["step"] == job["steps"]

    starts = [line.split() for line in (out / "starts.txt").read_text().splitlines()]
    steps, per_epoch = {}, {}
    for path in out.glob("steps-*-*.txt"):
        attempt = int(path.name.split("-")[1])
        for line in path.read_text().splitlines():
            step, epoch, *ids = map(int, line.split())
            steps.setdefault(attempt, []).append(step)
            per_epoch.setdefault(epoch, []).extend(ids)
    for attempt, seg in enumerate(job["segments"], start=1):
        mine = [s for s in starts if int(s[0]) == attempt]
        assert sorted(int(s[1]) for s in mine) == list(range(len(seg["gpus"]))), mine  # every rank of the run
        assert all(int(s[2]) == len(seg["gpus"]) and int(s[3]) == seg["from_step"] for s in mine), (mine, seg)
        if attempt > 1:  # Lightning restored its own checkpoint file, the one its callback reported
            assert all(s[4].endswith("/" + RayTrainReportCallback.CHECKPOINT_NAME) for s in mine), mine
    _check_steps(job, steps)
    assert sorted(per_epoch) == list(range(epochs))
    for epoch, ids in per_epoch.items():  # across every resize, each epoch trained each sample once
        assert sorted(ids) == list(range(size)), (epoch, len(ids), len(set(ids)))


def test_an_elastic_transformers_script_resized_beside_rigid_jobs_resumes_from_its_own_checkpoints(coordinator, code,
                                                                                                    monkeypatch):
    """Ray's Transformers example as an elastic TorchTrainer job, resized 3 -> 1 -> 2 by a rigid arrival and a
    departure: each run resumed from the Trainer's own checkpoint folder saved at the step its predecessor
    stopped at."""
    from pcs_ray.train import RunConfig, ScalingConfig
    from pcs_ray.train.torch import TorchTrainer

    client, (code_dir, out) = coordinator, code
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the driver imports the script, and with it transformers
    (code_dir / "transformers_train.py").write_text(TRANSFORMERS)
    import transformers_train

    size, epochs = 200, 4  # enough left after the shrink to 1 GPU that the job is still there to grow
    config = {"out": str(out), "size": size, "batch": 4, "epochs": epochs, "sleep": 0.05}
    env = {"env_vars": {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}}
    trainer = TorchTrainer(transformers_train.train_func,
                           train_loop_config=config,
                           scaling_config=ScalingConfig(num_workers=(1, 4), use_gpu=True),
                           run_config=RunConfig(name="transformers-elastic", worker_runtime_env=env),
                           working_dir=code_dir, client=client)
    _, job = _resized_beside_rigid_jobs(client, trainer, code_dir, out, timeout=240)

    steps, trained = {}, []
    for path in out.glob("steps-*-*.jsonl"):
        attempt = int(path.name.split("-")[1])
        for line in path.read_text().splitlines():
            step, ids = json.loads(line)
            steps.setdefault(attempt, []).append(step)
            trained.append((attempt, step, ids))
    starts = [json.loads(line) for line in (out / "starts.txt").read_text().splitlines()]
    assert [s[0] for s in starts] == list(range(2, len(job["segments"]) + 1)), starts  # one line per resume
    for (attempt, world, step, files), seg in zip(starts, job["segments"][1:]):
        assert world == len(seg["gpus"]) and step == seg["from_step"], (starts, seg)
        for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json"):
            assert name in files, files  # the Trainer's own checkpoint-<step> folder, as its callback reported it
    _check_steps(job, steps)
    ids = [i for *_, batch in sorted(trained, key=lambda r: (r[0], r[1])) for i in batch]
    assert len(ids) == epochs * size  # across every resize, each epoch trained each sample once
    for epoch in range(epochs):
        assert sorted(ids[epoch * size:(epoch + 1) * size]) == list(range(size)), epoch
