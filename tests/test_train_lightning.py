"""``pcs_ray.train.lightning``: a ``lightning.Trainer`` script written as Ray's docs show, stopped mid-epoch and at
epochs' ends and resumed on other world sizes, trains every sample of every epoch exactly once, its Lightning
epoch the data stream's; without Lightning the import says which extra to install."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from builders import wait_until

SIZE, BATCH, EPOCHS = 100, 4, 5  # 13 batches of 8 an epoch on 2 ranks, 25 of 4 on 1, 9 of 12 on 3

# The user's script: Ray's Lightning example with its imports changed. Each training step appends the sample
# ids it trained on, with Lightning's epoch and the data stream's, to this rank's file in config["out"].
SCRIPT = '''
import os, time
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, Dataset

import pcs_ray.train as train
from pcs_ray.train.lightning import (RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback,
                                     prepare_trainer)
from pcs_ray.train.session import current


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
        stream = next(iter(current().streams.values()), None)
        with open(os.path.join(self.config["out"], f"{ctx.attempt}-{ctx.world_rank}.txt"), "a") as f:
            f.write(f"{self.trainer.current_epoch} {stream.epoch} {' '.join(map(str, ids.tolist()))}\\n")
        time.sleep(self.config["sleep"])
        loss = (self.layer(x) - x).pow(2).mean()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loop(config):
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


def read_records(out: Path, attempt: int | None = None) -> list[tuple[int, int, list[int]]]:
    """Every trained batch (of one run's ranks, or all) as (Lightning's epoch, the stream's epoch, sample ids)."""
    rows = []
    for path in sorted(out.glob("*-*.txt" if attempt is None else f"{attempt}-*.txt")):
        for line in path.read_text().splitlines():
            epoch, stream_epoch, *ids = map(int, line.split())
            rows.append((epoch, stream_epoch, ids))
    return rows


def assert_each_sample_once_per_epoch(rows, size: int, epochs: int) -> None:
    seen = defaultdict(list)
    for epoch, stream_epoch, ids in rows:
        assert epoch == stream_epoch, (epoch, stream_epoch)  # Lightning's epoch is the stream's
        seen[epoch].extend(ids)
    assert sorted(seen) == list(range(epochs))
    for epoch, ids in seen.items():
        assert sorted(ids) == list(range(size)), f"epoch {epoch}: {len(ids)} samples, {len(set(ids))} distinct"


@pytest.fixture
def script(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "loop.py").write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    sys.path.insert(0, str(code))
    yield code, out
    sys.path.remove(str(code))
    sys.modules.pop("loop", None)


def test_runs_stopped_mid_epoch_and_at_an_epochs_end_resume_exactly_with_other_global_batches(script, tmp_path):
    """In one process (one rank, no Ray): each run is stopped after a given number of batches (some mid-epoch,
    one at an epoch's end) and the next resumes from its Lightning checkpoint with another batch size, which
    changes the global batch as a resize does; each epoch still sees each sample once."""
    import torch.distributed as dist

    import pcs_ray.train.session as session
    from pcs_ray.train.lightning import RayTrainReportCallback

    code, out = script
    import loop as user

    # (batch size, stop asked for after this many questions): a question at each batch but an epoch's last,
    # and one at each epoch's end. The second and fourth runs stop at an epoch's end, the others mid-epoch.
    plan = [(4, 3), (3, 4), (6, 2), (2, 3), (5, None)]
    size, epochs, stopped = 30, 3, []
    for attempt, (batch, stop_after) in enumerate(plan):
        asked = [0]

        def stop_requested(asked=asked, stop_after=stop_after):
            asked[0] += 1
            return stop_after is not None and asked[0] > stop_after

        run = session.Session(session.TrainContext(attempt=attempt), str(tmp_path / "ckpt"), stop_requested)
        session.install(run)
        try:
            user.loop({"out": str(out), "size": size, "batch": batch, "epochs": epochs, "sleep": 0.0})
            stopped.append(None)
        except session.RunStopped as stop:
            stopped.append(stop.step)
        finally:
            session.install(None)
        assert not dist.is_initialized()  # the one-rank group Lightning made is gone with its fit
    assert stopped == [4, 9, 12, 16, None]
    assert_each_sample_once_per_epoch(read_records(out), size, epochs)
    starts = [line.split() for line in (out / "starts.txt").read_text().splitlines()]
    assert [int(s[3]) for s in starts] == [0, *stopped[:-1]]  # each resume at the step its run stopped at
    assert all(s[4].endswith(RayTrainReportCallback.CHECKPOINT_NAME) for s in starts[1:]), starts


@pytest.mark.slow
def test_a_lightning_script_preempted_and_resized_trains_each_sample_once_per_epoch(ray_local, script, tmp_path):
    """Ray's Lightning example on 2, 2, 1, 1, 3 and 3 ranks (three resumes on the same world size, two
    resizes), each run but the last stopped after some batches (mid-epoch, the second after crossing into the
    next epoch); every resume is from the
    Lightning checkpoint its run reported, and each epoch trains each sample exactly once."""
    from pcs_ray.contract import GPUSlot, RunRequest
    from pcs_ray.executors.launch import launch
    from pcs_ray.executors.user_spares import SPARES

    code, out = script
    slots = {1: [("node1", 2)], 2: [("node0", 0), ("node0", 1)], 3: [("node0", 2), ("node1", 0), ("node1", 1)]}
    # A step takes 0.05 s, so that a stop, which reaches the ranks a moment after it is asked for, lands mid-run.
    config = {"out": str(out), "size": SIZE, "batch": BATCH, "epochs": EPOCHS, "sleep": 0.05}
    trained = [5, 10, 14, 12, 6]  # batches each stopped run trains before its stop is asked for
    outcomes = []
    try:
        for attempt, world in enumerate([2, 2, 1, 1, 3, 3]):
            request = RunRequest("lit", "user:loop.py:loop", None, tuple(GPUSlot(n, i) for n, i in slots[world]),
                                 str(tmp_path / "checkpoints" / "lit"), attempt=attempt, report_interval_s=0.0,
                                 code={"entrypoint": "loop.py:loop", "working_dir": str(code), "config": config},
                                 log_dir=str(tmp_path / "logs" / f"attempt-{attempt}"))
            handle = launch(request)
            if attempt < 5:
                wait_until(lambda: len(read_records(out, attempt)) >= trained[attempt] * world, timeout=240,
                           what=f"run {attempt} training")
                handle.request_stop()
            outcomes.append(handle.outcome(timeout=240))
    finally:
        SPARES.clear()
    assert [o.status for o in outcomes] == ["preempted"] * 5 + ["finished"], [(o.status, o.error) for o in outcomes]
    assert_each_sample_once_per_epoch(read_records(out), SIZE, EPOCHS)
    starts = [line.split() for line in (out / "starts.txt").read_text().splitlines()]
    for attempt, outcome in enumerate(outcomes[1:], start=1):
        assert outcome.start_step == outcomes[attempt - 1].step > 0
        mine = [s for s in starts if int(s[0]) == attempt]
        assert len(mine) == int(mine[0][2]) and all(int(s[3]) == outcome.start_step for s in mine), mine
        assert all(s[4].endswith("/checkpoint.ckpt") for s in mine), mine  # Lightning restored its own checkpoint


def test_fsdp_on_a_logical_gpu_is_refused_in_one_line():
    import pcs_ray.train.session as session
    from pcs_ray.train.config import UnsupportedOptionError
    from pcs_ray.train.lightning import RayFSDPStrategy

    session.install(session.Session(session.TrainContext(device="cpu")))
    try:
        with pytest.raises(UnsupportedOptionError, match="RayFSDPStrategy: needs a real GPU"):
            RayFSDPStrategy()
    finally:
        session.install(None)


def test_without_lightning_the_import_names_the_extra():
    code = ("import sys\nsys.modules['lightning'] = sys.modules['pytorch_lightning'] = None\n"
            "try:\n    import pcs_ray.train.lightning\nexcept ImportError as exc:\n    print(type(exc).__name__, exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert done.stdout.strip() == ("MissingExtra pcs_ray.train.lightning needs Lightning: "
                                   "pip install 'pcs-ray[lightning]'"), done.stderr
