"""Ray Train and Ray Tune drivers on three machines that share no disk and no loopback (``hosts.py``), with
the cluster's storage in a real S3 bucket (``pcs-ray start --storage``) and each driver's ``storage_path`` in it.

* Ray's own ``torch_linear_example.py`` (from the installed wheel, its import lines swapped for pcs-ray's as
  ``test_ray_train_examples`` does) driven from the head machine with ``storage_path="s3://.../results"``, its
  4 workers on GPUs of more than one machine: ``Result.path`` holds ``result.json`` and ``Result.checkpoint``
  names objects in the bucket.
* A ``PCSTuner`` sweep of checkpointing trials driven from the head machine with its experiment in the bucket;
  a rigid job arriving mid-sweep takes GPUs from it, so trials are paused and resumed in new processes (one at
  least on another machine, whose disk holds nothing of the first's) from the checkpoint they last reported.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess

import pytest

from hosts import VENV_BIN, hosts_fixture
from hosts_cli import job, one_json, pcs, wait_for
from test_ray_train_examples import LINEAR, PORTED, port

pytestmark = pytest.mark.slow

HOSTS = ("head", "w1", "w2")
hosts = hosts_fixture("module", names=HOSTS, gpus_per_host=2, start_ray=True)



def machines(gpus) -> set[str]:
    """The hosts a list of GPU names (``node:index``) lies on."""
    return {g.rsplit(":", 1)[0] for g in gpus}


def keys_under(hosts, uri: str) -> list[str]:
    """Every object key under ``s3://bucket/prefix`` (read from the test process, with boto3)."""
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    assert bucket == hosts.s3.bucket, uri
    client, keys = hosts.s3.client(), []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/"):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


def driver(hosts, folder: str, script: str, *args, timeout: float) -> str:
    """``python script args`` on the head machine, in ``folder`` (handed to the hosts), as a user runs a Ray
    driver there: ``RAY_ADDRESS`` names the cluster, token auth as the cluster's. Returns its stdout."""
    env = {"RAY_ADDRESS": hosts.ray_address}
    cmd = [str(VENV_BIN / "python"), script, *map(str, args)]
    try:
        return hosts.run("head", cmd, env=env, timeout=timeout, cwd=hosts.inputs / folder).stdout
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"`{shlex.join(cmd)}` on head ran past {timeout:.0f} s\n--- stdout ---\n"
                             f"{(e.stdout or '')[-3000:]}\n--- stderr ---\n{(e.stderr or '')[-3000:]}") from None


def printed(out: str, tag: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith(tag + " ")]


@pytest.fixture(scope="module")
def cluster(hosts):
    """The coordinator started on the head with the bucket as the cluster's storage, as the README says."""
    pcs(hosts, "start", "--address", hosts.ray_address, "--storage", hosts.storage_uri, "--state-dir", hosts.state_dir,
        "--cluster-spec", hosts.spec_path, "--policy", "fair", "--grace", 20)
    yield hosts
    pcs(hosts, "stop", "--address", hosts.ray_address, "--timeout", 20, check=False)


# -- Ray Train: torch_linear_example.py ---------------------------------------------------------------------
#: The driver: Ray's example as its own ``__main__`` runs it, but through ``train_linear``'s ``storage_path``
#: argument (the example's ``__main__`` passes none), with the ``Result`` that ``fit()`` returned kept to print.
LINEAR_DRIVER = """
import json, sys
import ray
import torch_linear_example as example

results = []

class Kept(example.TorchTrainer):
    def fit(self, *args, **kwargs):
        results.append(super().fit(*args, **kwargs))
        return results[-1]

example.TorchTrainer = Kept
ray.init()  # RAY_ADDRESS: the cluster
metrics = example.train_linear(num_workers=int(sys.argv[2]), use_gpu=True, epochs=3, storage_path=sys.argv[1])
[result] = results
print("RESULT " + json.dumps({"job": result.job_id, "path": result.path, "checkpoint": result.checkpoint.path,
                              "metrics": metrics}), flush=True)
"""


def test_rays_torch_linear_example_spans_machines_and_keeps_its_result_in_the_bucket(cluster):
    hosts = cluster
    original = LINEAR.read_text()
    ported = port(original)
    assert sum(a != b for a, b in zip(original.splitlines(), ported.splitlines())) == len(PORTED)  # imports only
    hosts.put_file("linear/torch_linear_example.py", ported)
    hosts.put_file("linear/driver.py", LINEAR_DRIVER)
    storage_path = f"{hosts.storage_uri}/results"

    out = driver(hosts, "linear", "driver.py", storage_path, 4, timeout=300)
    [result] = printed(out, "RESULT")
    view = job(hosts, result["job"])
    assert view["state"] == "finished", view
    assert len(view["segments"][0]["gpus"]) == 4 and len(machines(view["segments"][0]["gpus"])) >= 2, view["segments"]
    assert set(result["metrics"]) == {"loss"}  # what the loop last reported

    # Result.path: <storage_path>/<name> (the example names no run: job-<id>) holding result.json.
    assert result["path"] == f"{storage_path}/job-{result['job']}"
    client = hosts.s3.client()
    bucket, _, key = result["path"][len("s3://"):].partition("/")
    rows = [json.loads(line) for line in
            client.get_object(Bucket=bucket, Key=f"{key}/result.json")["Body"].read().decode().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["job_id"] == result["job"] for r in rows), rows
    assert {k: v for k, v in rows[-1].items() if k in result["metrics"]} == result["metrics"]

    # Result.checkpoint: the newest checkpoint, in the cluster's storage (the bucket), with the example's model.pt.
    checkpoint = result["checkpoint"]
    assert checkpoint.startswith(f"{hosts.storage_uri}/checkpoints/{result['job']}/"), checkpoint
    kept = keys_under(hosts, checkpoint)
    assert any(k.endswith("/model.pt") for k in kept), kept


# -- Ray Tune: a PCSTuner sweep of checkpointing trials -----------------------------------------------------------
ITERS = 10
#: The driver: a Tune function trainable that resumes from ``tune.get_checkpoint()`` and reports a checkpoint
#: every iteration; each result printed (trial, iteration, where the run started from, host, process).
SWEEP_DRIVER = """
import json, os, socket, sys, tempfile, time
from pathlib import Path

from ray import tune

from pcs_ray.client import Client
from pcs_ray.executors.tune import PCSTuner

ITERS = int(sys.argv[2])


def trainable(config):
    start = 0
    if (checkpoint := tune.get_checkpoint()) is not None:
        with checkpoint.as_directory() as d:
            start = int(Path(d, "it").read_text())
    for it in range(start + 1, ITERS + 1):
        time.sleep(config["sleep_s"])
        with tempfile.TemporaryDirectory() as d:
            Path(d, "it").write_text(str(it))
            tune.report({"it": it, "start": start, "score": config["x"] * it, "host": socket.gethostname(),
                         "pid": os.getpid()}, checkpoint=tune.Checkpoint.from_directory(d))


class Printed(tune.Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        print("REPORT " + json.dumps({"trial": trial.trial_id, **{k: result[k] for k in ("it", "start", "host", "pid")}}),
              flush=True)


tuner = PCSTuner(trainable, client=Client(), iterations=ITERS, iteration_time=1.0, grace_s=20,
                 param_space={"x": tune.grid_search([1, 2, 3, 4]), "sleep_s": float(sys.argv[3])},
                 tune_config=tune.TuneConfig(metric="score", mode="max"),
                 run_config=tune.RunConfig(name="sweep", storage_path=sys.argv[1], callbacks=[Printed()], verbose=0))
print("SWEEP " + json.dumps({"job": tuner.job_id}), flush=True)
grid = tuner.fit()
best = grid.get_best_result()
print("GRID " + json.dumps({
    "errors": [str(e) for e in grid.errors], "states": [r.metrics.get("it") for r in grid],
    "terminated": grid.num_terminated,
    "best": {"config": {"x": best.config["x"]}, "it": best.metrics["it"], "path": best.path,
             "checkpoint": best.checkpoint.path if best.checkpoint else None,
             "filesystem": type(best.filesystem).__name__},
    "log": {"pauses": len(tuner.scheduler.log.pauses), "hard_stops": tuner.scheduler.log.hard_stops,
            "acks": tuner.scheduler.log.acks,
            "placements": {t: [list(g) for g in p] for t, p in tuner.scheduler.log.placements.items()}},
}), flush=True)
"""

RIGID = {"name": "rigid", "workload": "tiny_cnn", "steps": 20, "gpus": 4, "min_gpus": 4, "step_time": 0.05,
         "params": {"num_samples": 256}}


def test_a_sweep_with_its_experiment_in_the_bucket_is_preempted_and_resumes_trials_from_their_checkpoints(cluster):
    hosts = cluster
    hosts.put_file("sweep/sweep.py", SWEEP_DRIVER)
    storage_path = f"{hosts.storage_uri}/tune"
    log = hosts.root / "sweep-driver.out"
    with open(log, "w") as out:
        proc = hosts.popen("head", [str(VENV_BIN / "python"), "sweep.py", storage_path, ITERS, 2.0],
                           env={"RAY_ADDRESS": hosts.ray_address}, cwd=hosts.inputs / "sweep",
                           stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        def reports():
            return printed(log.read_text(errors="replace"), "REPORT")

        def mid_sweep():
            assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
            last = {r["trial"]: r["it"] for r in reports()}
            assert all(it < ITERS for it in last.values()), f"a trial ended before the rigid job arrived: {last}"
            return sum(1 <= it <= ITERS - 3 for it in last.values()) >= 3

        # Tune starts the trials one after another (seconds apart here): wait until 3 of the 4 train, none ended.
        wait_for(mid_sweep, 180, "3 of the 4 trials to be training", every=0.5)
        [sweep] = printed(log.read_text(), "SWEEP")
        held = job(hosts, sweep["job"])
        assert held["state"] == "running" and len(held["gpus"]) == 4, (held["state"], held["gpus"])
        # A rigid job of 4 GPUs arrives: fair shares leave the sweep 2 of the 6, so at least one trial that is
        # training gives its GPU up (paused at its next report, from the checkpoint it reported).
        path = hosts.put_file("rigid.yaml", json.dumps(RIGID))
        rigid = int(one_json(pcs(hosts, "submit", path, "--json", "--address", hosts.ray_address).stdout)["id"])
        try:
            proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the sweep's driver ran past 240 s:\n{log.read_text(errors='replace')[-6000:]}") from None
    finally:
        if proc.poll() is None:  # its process group: nsenter and the driver it forked on the head
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, text[-6000:]
    [grid] = printed(text, "GRID")
    assert not grid["errors"] and grid["terminated"] == 4 and grid["states"] == [ITERS] * 4, grid  # every trial ran to the end
    best = grid["best"]
    assert best["config"]["x"] == 4 and best["it"] == ITERS and best["filesystem"] == "S3FileSystem", best
    bucket_path = storage_path[len("s3://"):]
    assert best["checkpoint"] and best["checkpoint"].startswith(f"{bucket_path}/sweep/"), best
    assert keys_under(hosts, f"s3://{best['checkpoint']}"), best  # the objects are in the bucket

    sweep_view = job(hosts, sweep["job"])
    assert sweep_view["state"] == "finished", sweep_view
    # Preempted: the sweep gave a GPU up for the rigid job, a trial paused and resumed in a new process from
    # the checkpoint it last reported (its first iteration there is the one after), losing and redoing none.
    assert grid["log"]["acks"] >= 1 and grid["log"]["pauses"] + grid["log"]["hard_stops"] >= 1, grid["log"]
    by_trial: dict[str, list[dict]] = {}
    for r in printed(text, "REPORT"):
        by_trial.setdefault(r["trial"], []).append(r)
    resumed = {t: rs for t, rs in by_trial.items() if len({(r["host"], r["pid"]) for r in rs}) > 1}
    assert resumed, by_trial
    for t, rs in by_trial.items():
        assert [r["it"] for r in rs] == list(range(1, ITERS + 1)), (t, rs)
    for t, rs in resumed.items():
        moves = [(a, b) for a, b in zip(rs, rs[1:]) if (a["host"], a["pid"]) != (b["host"], b["pid"])]
        assert all(b["start"] == a["it"] > 0 and b["it"] == a["it"] + 1 for a, b in moves), (t, rs)
    # At least one moved to another machine, where nothing of its first one's disk is: it read its checkpoint
    # from the bucket (the rigid job takes whole machines' GPUs, the sweep keeps another machine's).
    moved = {t: [(r["it"], r["host"]) for r in rs] for t, rs in resumed.items() if len({r["host"] for r in rs}) > 1}
    assert moved, {t: [(r["it"], r["start"], r["host"]) for r in rs] for t, rs in resumed.items()}
    print("trials resumed on another machine:", moved)
    final = wait_for(lambda: (j := job(hosts, rigid))["state"] in ("finished", "failed") and j, 180,
                     "the rigid job to end")
    assert final["state"] == "finished", final
    assert len(final["segments"][0]["gpus"]) == 4, final["segments"]
