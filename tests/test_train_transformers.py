"""``pcs_ray.train.huggingface.transformers``: a ``transformers.Trainer`` script written as Ray's docs show runs
under pcs-ray by its imports, checkpoints when pcs-ray asks, and each epoch trains every sample exactly once
across preemptions and resizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builders import wait_until
from pcs_ray.contract import GPUSlot, RunRequest

SIZE, BATCH, EPOCHS = 128, 4, 3

SCRIPT = '''
import os, time
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
    """Writes the ids of every batch it trains on, with the step and the epoch it trains them in."""

    def compute_loss(self, model, inputs, **kwargs):
        ids = inputs.pop("sample_id").tolist()
        with open(self.record, "a") as f:
            f.write(json.dumps([self.state.global_step, ids]) + "\\n")
        time.sleep(self.sleep)
        return super().compute_loss(model, inputs, **kwargs)


def loop(config):
    torch.manual_seed(0)
    ctx = train.get_context()
    model = BertForSequenceClassification(BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32))
    args = TrainingArguments(output_dir=config["output"] + f"/run{config['run']}", num_train_epochs=config["epochs"],
                             per_device_train_batch_size=config["batch"], save_strategy="no", report_to=[],
                             logging_steps=5, remove_unused_columns=False, disable_tqdm=True, learning_rate=1e-3)
    trainer = Recording(model=model, args=args, train_dataset=Samples(config["size"]), data_collator=collate)
    trainer.record = os.path.join(config["output"], f"ids-run{config['run']}-rank{ctx.world_rank}.jsonl")
    trainer.sleep = config["sleep"]
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            folder = os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME)
            state = json.load(open(os.path.join(folder, "trainer_state.json")))
            print("resumed", state["global_step"], sorted(os.listdir(folder)), flush=True)
            trainer.train(resume_from_checkpoint=folder)
    else:
        trainer.train()
    print("world", torch.distributed.get_world_size() if ctx.world_size > 1 else 1,
          "ddp", type(trainer.model_wrapped).__name__, flush=True)
'''.replace("import os, time", "import json, os, time")


@pytest.fixture(scope="module")
def env(ray_local, tmp_path_factory):
    code_dir = tmp_path_factory.mktemp("hf-code")
    (code_dir / "loop.py").write_text(SCRIPT)
    from pcs_ray.executors.launch import launch
    from pcs_ray.executors.user_spares import SPARES

    yield code_dir, launch
    SPARES.clear()


def _request(code_dir: Path, root: Path, gpus, run: int) -> RunRequest:
    config = {"run": run, "output": str(root / "out"), "size": SIZE, "batch": BATCH, "epochs": EPOCHS, "sleep": 0.02}
    return RunRequest("hf", "user:loop.py:loop", None, tuple(GPUSlot("node0", i) for i in gpus),
                      str(root / "checkpoints" / "hf"), attempt=run,
                      code={"entrypoint": "loop.py:loop", "working_dir": str(code_dir), "config": config,
                            "runtime_env": {"env_vars": {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}}},
                      log_dir=str(root / "logs" / f"run{run}"), report_interval_s=0.0)


def _records(out: Path, run: int | None = None) -> list[tuple[int, int, list[int]]]:
    """(run, step, ids) of every batch trained, run by run and step by step (ranks of one step together)."""
    rows = []
    for path in out.glob("ids-run*-rank*.jsonl"):
        index = int(path.name.split("-")[1][3:])
        if run is None or index == run:
            for line in path.read_text().splitlines():
                if line.endswith("]"):  # a line being written is left for the next read
                    step, ids = json.loads(line)
                    rows.append((index, step, ids))
    return sorted(rows, key=lambda r: (r[0], r[1]))


@pytest.mark.slow
def test_a_trainer_preempted_and_resized_trains_each_sample_once_per_epoch(env, tmp_path):
    """Runs on 2, 2, 1, 1, 3 ranks each stopped mid-epoch, then 3 ranks to the end: read in training order, the
    samples trained are ``EPOCHS`` blocks of ``SIZE``, each block every sample once; every resume started at the
    step of the Trainer's own checkpoint folder the run before reported."""
    code_dir, launch = env
    out = tmp_path / "out"
    out.mkdir()
    worlds = [2, 2, 1, 1, 3, 3]
    outcomes = []
    for run, world in enumerate(worlds, start=1):
        handle = launch(_request(code_dir, tmp_path, range(world), run))
        if run < len(worlds):
            def mid_epoch():
                done = sum(len(ids) for *_, ids in _records(out))
                return len({s for _, s, _ in _records(out, run)}) >= 2 and 16 <= done % SIZE <= SIZE - 40
            wait_until(mid_epoch, timeout=120, what=f"run {run} to train mid-epoch", every=0.01)
            handle.request_stop()
        outcomes.append(handle.outcome(timeout=180))
        logs = tmp_path / "logs" / f"run{run}"
        assert outcomes[-1].status == ("finished" if run == len(worlds) else "preempted"), \
            (outcomes[-1], (logs / "rank-0.log").read_text()[-3000:])
        log = (logs / "rank-0.log").read_text()
        if run > 1:
            resumed = next(line for line in log.splitlines() if line.startswith("resumed "))
            step = int(resumed.split()[1])
            assert step == outcomes[-2].step > 0, (resumed, outcomes[-2])  # the checkpoint the run before reported
            for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json"):
                assert f"'{name}'" in resumed, resumed  # the Trainer's own checkpoint folder
            first = min(s for _, s, _ in _records(out, run))
            assert first == step, (first, step)  # the Trainer continued from that checkpoint's state

    assert "world 3 ddp DistributedDataParallel" in log, log[-2000:]  # the Trainer trained on pcs-ray's group
    rows = _records(out)
    trained = [i for *_, ids in rows for i in ids]
    assert len(trained) == EPOCHS * SIZE, (len(trained), [(r, len(ids)) for r, _, ids in rows][-20:])
    for epoch in range(EPOCHS):
        block = trained[epoch * SIZE:(epoch + 1) * SIZE]
        assert sorted(block) == list(range(SIZE)), (epoch, sorted(set(range(SIZE)) - set(block)))
    done = 0
    for run, outcome in enumerate(outcomes[:-1], start=1):  # every stop landed mid-epoch
        done += sum(len(ids) for r, _, ids in rows if r == run)
        assert done % SIZE, (run, done)
    steps = {}
    for run, step, _ in rows:
        steps.setdefault(run, set()).add(step)
    for run, outcome in enumerate(outcomes, start=1):  # steps are consecutive, and each run's last reported
        assert sorted(steps[run]) == list(range(min(steps[run]), outcome.step)), (run, sorted(steps[run]))


def test_without_the_extra_the_import_says_what_to_install():
    """``transformers`` missing: importing the module raises one line naming the extra."""
    code = ("import sys; sys.modules['transformers'] = None\n"
            "try:\n    import pcs_ray.train.huggingface.transformers\n"
            "except ImportError as exc:\n    print('ERR', exc)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    line = done.stdout.strip()
    assert line.startswith("ERR ") and "pip install 'pcs-ray[transformers]'" in line and "\n" not in line, done
