"""A plain loop on ``prepare_data_loader``: every epoch trains each sample exactly once across three
preemptions and two resizes, each run stopped mid-epoch and resumed on other GPUs and world sizes."""

from __future__ import annotations

import pytest
from resume_runs import WORLDS, epochs_seen, play, recorder_actor

pytestmark = pytest.mark.slow  # runs on Ray

SIZE, EPOCHS = 44, 4  # a multiple of the batch: no run can start a tail with fewer samples than ranks

LOOP = '''
import json, os, time
import torch
from torch.utils.data import DataLoader, Dataset
import pcs_ray.train as train

class Ids(Dataset):
    def __len__(self):
        return SIZE

    def __getitem__(self, i):
        return torch.full((3,), float(i)), i

def loop(config):
    ctx = train.get_context()
    model = train.torch.prepare_model(torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = train.torch.prepare_data_loader(DataLoader(Ids(), batch_size=4, shuffle=True))
    epoch, step = 0, 0
    if (ckpt := train.get_checkpoint()) is not None:
        state = torch.load(os.path.join(ckpt, "state.pt"), weights_only=True)
        epoch, step = state["epoch"], state["step"]
        getattr(model, "module", model).load_state_dict(state["model"])
    record = open(os.path.join(config["ids_dir"], f"rank-{ctx.world_rank}.jsonl"), "a", buffering=1)
    while epoch < config["epochs"]:
        if ctx.world_size > 1:  # as Ray Train loops do
            loader.sampler.set_epoch(epoch)
        for x, ids in loader:
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            record.write(json.dumps({"epoch": epoch, "run": ctx.attempt, "ids": ids.tolist()}) + "\\n")
            time.sleep(config["sleep"])
            if train.should_checkpoint():
                folder = train.checkpoint_dir()
                torch.save({"epoch": epoch, "step": step, "model": getattr(model, "module", model).state_dict()}, os.path.join(folder, "state.pt"))
                train.report({"loss": loss.item()}, step=step, checkpoint=folder)
            train.report({"loss": loss.item()}, step=step)
        epoch += 1
'''.replace("SIZE", str(SIZE))


@pytest.fixture(scope="module")
def ray_env(ray_local, tmp_path_factory):
    from pcs_ray.executors.launch import launch

    code_dir = tmp_path_factory.mktemp("code")
    (code_dir / "loop.py").write_text(LOOP)
    return ray_local, launch, recorder_actor(ray_local), code_dir


def test_a_data_loader_loop_sees_every_sample_once_per_epoch_across_preemptions_and_resizes(ray_env, tmp_path):
    ray, launch, recorder, code_dir = ray_env
    ids_dir = tmp_path / "ids"
    ids_dir.mkdir()
    outcomes = play(ray, launch, recorder, "plain", tmp_path, code_dir,
                    {"ids_dir": str(ids_dir), "epochs": EPOCHS, "sleep": 0.05})
    assert [o.status for o in outcomes] == ["preempted"] * (len(WORLDS) - 1) + ["finished"], [o.error for o in outcomes]
    assert [len(o.gpus) for o in outcomes] == list(WORLDS)
    for before, after in zip(outcomes, outcomes[1:]):
        assert after.start_step == before.step > 0  # each run resumed from the checkpoint the one before took
    seen, runs = epochs_seen(ids_dir)
    assert sorted(seen) == list(range(EPOCHS))
    for epoch, ids in seen.items():
        assert sorted(ids) == list(range(SIZE)), f"epoch {epoch}"
    # The stops landed mid-epoch (else this would not test a resumed epoch): epochs trained by several runs.
    assert sum(len(r) > 1 for r in runs.values()) >= 3, runs
