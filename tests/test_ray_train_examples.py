"""Ray Train's own example, copied from the installed wheel with only its import lines changed, run as
written (driver and loop, 2 workers) on a two-node ``pcs-ray up --local`` cluster with token auth.

The cluster's processes are stopped by PID (``pcs-ray down``'s record) in the fixture.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from local_up import ROOT, private_env, status, up_local

pytestmark = [pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the local launcher reads /proc"),
              pytest.mark.slow]  # starts a local Ray cluster through the CLI

RAY_TRAIN = Path(importlib.util.find_spec("ray").submodule_search_locations[0]) / "train"
LINEAR = RAY_TRAIN / "examples" / "pytorch" / "torch_linear_example.py"

#: The only lines a Ray Train script changes to run under pcs-ray.
PORTED = {
    "import ray.train as train": "import pcs_ray.train as train",
    "from ray.train import Checkpoint, RunConfig, ScalingConfig": "from pcs_ray.train import Checkpoint, RunConfig, ScalingConfig",
    "from ray.train.torch import TorchTrainer": "from pcs_ray.train.torch import TorchTrainer",
}


def port(source: str) -> str:
    """``source`` with its Ray Train import lines swapped for pcs-ray's, every other line as it was."""
    return "".join(PORTED.get(line.rstrip("\n"), line.rstrip("\n")) + ("\n" if line.endswith("\n") else "")
                   for line in source.splitlines(keepends=True))


def changed_lines(before: str, after: str) -> set[tuple[str, str]]:
    old, new = before.splitlines(), after.splitlines()
    assert len(old) == len(new)
    return {(a, b) for a, b in zip(old, new) if a != b}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train-examples")
    env, state = private_env(tmp), tmp / "state"
    with up_local(env, state, "--nodes", 2, "--gpus-per-node", 1) as info:
        yield {"env": {**env, "RAY_ADDRESS": info["address"], "PCS_RAY_API": info["api"]}, "up": info,
               "state": state, "tmp": tmp}


def test_rays_torch_linear_example_runs_with_only_its_imports_changed(cluster):
    original = LINEAR.read_text()
    ported = port(original)
    assert changed_lines(original, ported) == set(PORTED.items())  # every import line changed, nothing else
    script = cluster["tmp"] / "torch_linear_example.py"
    script.write_text(ported)
    env = {**cluster["env"], "RAY_AUTH_MODE": "token"}  # a Ray driver of a token cluster, as its user runs it
    run = subprocess.run([sys.executable, str(script), "--address", cluster["up"]["address"], "--num-workers", "2"],
                         env=env, capture_output=True, text=True, timeout=420, cwd=script.parent, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    printed = ast.literal_eval(run.stdout.strip().splitlines()[-1])  # the example prints result.metrics

    job = max(status(cluster["env"])["jobs"], key=lambda j: j["id"])  # the one it submitted, the newest
    assert job["state"] == "finished" and job["total_steps"] is None  # a Ray script gives no total
    assert len(job["segments"][0]["gpus"]) == 2 and job["retries"] == 0
    rows = [json.loads(line) for line in
            (cluster["state"] / "logs" / str(job["id"]) / "attempt-1" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # one report per epoch, 3 epochs
    last = {k: v for k, v in rows[-1].items() if k not in ("step", "attempt")}
    assert printed == job["metrics"] == last and set(last) == {"loss"}  # Result.metrics: what the loop last reported


ELASTIC = """
import json, os, tempfile, time
import torch
import pcs_ray.train as train
from pcs_ray.train import Checkpoint, RunConfig, ScalingConfig
from pcs_ray.train.torch import TorchTrainer

def train_func(config):
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = torch.load(os.path.join(d, "state.pt"), weights_only=True)["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        time.sleep(config["epoch_s"])
        with tempfile.TemporaryDirectory() as d:  # every rank reports a checkpoint, as Ray's examples do
            torch.save({"epoch": epoch}, os.path.join(d, "state.pt"))
            train.report({"epoch": epoch, "world": train.get_context().get_world_size()},
                         checkpoint=Checkpoint.from_directory(d))

if __name__ == "__main__":
    trainer = TorchTrainer(train_func, train_loop_config={"epochs": 30, "epoch_s": 0.5},
                           scaling_config=ScalingConfig(num_workers=(1, 2), use_gpu=True),
                           run_config=RunConfig(name="elastic"))
    print(json.dumps({"job": trainer.submit().id}), flush=True)
    result = trainer.fit()
    frame = result.metrics_dataframe
    print(json.dumps({"metrics": result.metrics, "epochs": frame["epoch"].tolist(), "steps": frame["step"].tolist()}))
"""


def _cli(env, *args) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "pcs_ray.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def test_an_elastic_torch_trainer_is_resized_by_a_rigid_arrival_and_resumes_from_its_own_checkpoints(cluster):
    env = cluster["env"]
    _cli(env, "config", "set", "--policy", "fair")  # equal shares: a second job takes one of the elastic job's GPUs
    script = cluster["tmp"] / "elastic.py"
    script.write_text(ELASTIC)
    driver = subprocess.Popen([sys.executable, str(script)], env={**env, "RAY_AUTH_MODE": "token"}, cwd=script.parent,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        jid = json.loads(driver.stdout.readline())["job"]
        deadline = time.monotonic() + 240
        while not any(j["id"] == jid and len(j["gpus"]) == 2 and j["steps"] >= 3 for j in status(env)["jobs"]):
            assert time.monotonic() < deadline and driver.poll() is None, "the elastic job never trained on 2 GPUs"
            time.sleep(1.0)
        rigid = cluster["tmp"] / "rigid.yaml"
        rigid.write_text("name: rigid\nworkload: tiny_cnn\nsteps: 20\ngpus: 1\nstep_time: 0.05\n"
                         "params: {num_samples: 256}\n")
        _cli(env, "submit", str(rigid))
        out, err = driver.communicate(timeout=420)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out[-3000:] + err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    jobs = {j["name"]: j for j in status(env)["jobs"]}
    elastic, other = jobs["elastic"], jobs["rigid"]
    assert elastic["state"] == "finished" and other["state"] in ("finished", "running", "queued")
    counts = [len(s["gpus"]) for s in elastic["segments"]]
    assert counts[0] == 2 and 1 in counts and elastic["preemptions"] >= 1  # resized at least once
    assert all(s["from_step"] > 0 for s in elastic["segments"][1:]) and elastic["lost_steps"] == 0
    # Each run resumed from the checkpoint the loop itself reported: epoch e is always step e + 1, none lost.
    rows = [json.loads(line) for attempt in range(1, elastic["attempts"] + 1) for line in
            (cluster["state"] / "logs" / str(elastic["id"]) / f"attempt-{attempt}" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["step"] == r["epoch"] + 1 for r in rows) and {r["epoch"] for r in rows} == set(range(30))
    assert result["epochs"] == list(range(30)) and result["metrics"] == elastic["metrics"] and result["metrics"]["epoch"] == 29


REGRESSION = RAY_TRAIN / "examples" / "pytorch" / "torch_regression_example.py"
REGRESSION_CSV = 's3://anonymous@air-example-data/regression.csv'
#: Its imports, as a Ray Data user changes them (``import ray`` and ``from ray.data import Dataset`` stay).
PORTED_DATA = {
    "import ray.train as train": "import pcs_ray.train as train",
    "from ray.train import Checkpoint, DataConfig, ScalingConfig":
        "from pcs_ray.train import Checkpoint, DataConfig, ScalingConfig",
    "from ray.train.torch import TorchTrainer": "from pcs_ray.train.torch import TorchTrainer",
}


def test_rays_torch_regression_example_trains_on_ray_data_sharded_by_pcs_ray(cluster):
    """Ray Data built by the driver on the cluster (a CSV read, mapped, repartitioned and split), a train
    dataset split across the 2 ranks and a validation dataset read whole by rank 0, 3 epochs."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(300, 100)), columns=[f"x{i:03d}" for i in range(100)])
    frame["y"] = frame.sum(axis=1) * 0.1
    csv = cluster["tmp"] / "regression.csv"  # the example's own data is on S3: the same columns, here
    frame.to_csv(csv, index=False)
    original = REGRESSION.read_text()
    ported = port_with(original, {**PORTED_DATA, f'    dataset = ray.data.read_csv("{REGRESSION_CSV}")':
                                  f'    dataset = ray.data.read_csv("{csv}")'})
    assert changed_lines(original, ported) == {*PORTED_DATA.items(), (
        f'    dataset = ray.data.read_csv("{REGRESSION_CSV}")', f'    dataset = ray.data.read_csv("{csv}")')}
    script = cluster["tmp"] / "torch_regression_example.py"
    script.write_text(ported)
    env = {**cluster["env"], "RAY_AUTH_MODE": "token"}
    run = subprocess.run([sys.executable, str(script), "--address", cluster["up"]["address"], "--num-workers", "2"],
                         env=env, capture_output=True, text=True, timeout=420, cwd=script.parent, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    job = max(status(cluster["env"])["jobs"], key=lambda j: j["id"])
    assert job["state"] == "finished" and len(job["segments"][0]["gpus"]) == 2 and job["retries"] == 0
    rows = [json.loads(line) for line in
            (cluster["state"] / "logs" / str(job["id"]) / "attempt-1" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # one report per epoch, 3 epochs
    assert set(job["metrics"]) == {"loss"} and job["metrics"]["loss"] > 0  # rank 0's validation loss
    assert not any((cluster["state"] / "datasets").iterdir())  # fit() deleted the staged datasets


def port_with(source: str, lines: dict[str, str]) -> str:
    """``source`` with each line named in ``lines`` replaced, every other line as it was."""
    return "".join(lines.get(line.rstrip("\n"), line.rstrip("\n")) + ("\n" if line.endswith("\n") else "")
                   for line in source.splitlines(keepends=True))
