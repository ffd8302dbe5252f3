"""One cluster of three machines that share no disk and no loopback (network and mount namespaces,
``hosts.py``), with a real S3 server: the operator's steps of the README, a job whose ranks span the
machines, shrunk and grown, its logs from every host, and a coordinator replaced with nothing but the bucket."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from hosts import hosts_fixture
from hosts_cli import job, one_json, pcs, status, wait_for

pytestmark = pytest.mark.slow

HOSTS = ("head", "w1", "w2")
hosts = hosts_fixture("module", names=HOSTS, gpus_per_host=2, start_ray=True)
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "user-code"
#: The example loop, each rank first saying which machine it runs on (each host has its own host name).
SPANNING = """
import socket
import pcs_ray.train as train
from train_mlp import train_loop

def loop(config):
    print(f"rank {train.get_context().world_rank} on {socket.gethostname()}", flush=True)
    train_loop(config)
"""


def submit(hosts, name: str, builtin: bool = False, **fields) -> int:
    """A job of the user's own code (the example loop), or with ``builtin`` one of pcs-ray's workloads."""
    code = {} if builtin else {"entrypoint": "spanning.py:loop", "working_dir": str(hosts.inputs / "user-code")}
    spec = {"name": name, **code, "class": "B", **fields}
    path = hosts.put_file(f"{name}.yaml", json.dumps(spec))
    out = pcs(hosts, "submit", path, "--json", "--address", hosts.ray_address).stdout
    return int(one_json(out)["id"])


@pytest.fixture(scope="module")
def cluster(hosts):
    """The coordinator started on the head with the bucket as the cluster's storage, as the README says."""
    shutil.copytree(EXAMPLE, hosts.inputs / "user-code", dirs_exist_ok=True)
    (hosts.inputs / "user-code" / "spanning.py").write_text(SPANNING)
    pcs(hosts, "start", "--address", hosts.ray_address, "--storage", hosts.storage_uri, "--state-dir", hosts.state_dir,
        "--cluster-spec", hosts.spec_path, "--policy", "fair", "--grace", 20)
    yield hosts
    pcs(hosts, "stop", "--address", hosts.ray_address, "--timeout", 20, check=False)


def test_a_job_spanning_three_machines_is_shrunk_grown_and_logs_every_rank(cluster):
    hosts = cluster
    elastic = submit(hosts, "elastic", steps=600, gpus=6, min_gpus=2,
                     config={"lr": 0.02, "batch_size": 64, "checkpoint_every": 50})
    wait_for(lambda: job(hosts, elastic)["state"] == "running" and job(hosts, elastic)["steps"] >= 60, 240,
             "the elastic job to train across the hosts")
    assert len(job(hosts, elastic)["gpus"]) == 6
    rigid = submit(hosts, "rigid", steps=60, gpus=2, min_gpus=2, config={"checkpoint_every": 20})
    wait_for(lambda: job(hosts, rigid)["state"] == "running", 240, "the rigid arrival to run")
    shrunk = job(hosts, elastic)
    wait_for(lambda: job(hosts, rigid)["state"] == "finished", 300, "the rigid job to finish")
    final = wait_for(lambda: (j := job(hosts, elastic))["state"] in ("finished", "failed") and j, 600,
                     "the elastic job to end")
    assert final["state"] == "finished", final
    assert final["steps"] == 600
    assert final["lost_steps"] <= 50 * max(0, final["attempts"] - 1), final  # at most one interval per resume
    # Logs: every attempt's ranks, the ones on the worker machines included, read through the head.
    seen = {}
    for attempt in range(final["attempts"] + 1):
        out = pcs(hosts, "logs", elastic, "--attempt", attempt, "--address", hosts.ray_address, check=False)
        if out.returncode == 0:
            seen[attempt] = {line.split("] ", 1)[-1] for line in out.stdout.splitlines() if " on " in line
                             and line.split("] ", 1)[-1].startswith("rank ")}
    assert len(seen) >= 3, (seen, shrunk)  # spanning, shrunk, grown again
    first = seen[min(seen)]
    assert {line.rsplit(" ", 1)[1] for line in first} == set(HOSTS), first
    assert all(seen.values()), seen


KILL_COORDINATOR = """
import ray
ray.init(address="{address}", namespace="pcs-ray")
ray.kill(ray.get_actor("coordinator"), no_restart=True)
"""


def test_a_coordinator_replaced_with_an_empty_state_folder_knows_every_job_from_the_bucket(cluster):
    """The head's coordinator killed and its state folder deleted: a new one given only --storage (and an
    empty --state-dir) knows every acknowledged job, and all of them finish."""
    hosts = cluster
    jobs = [submit(hosts, f"kept-{i}", steps=120, gpus=4, min_gpus=2, config={"checkpoint_every": 20})
            for i in range(2)]  # acknowledged: each submission returned once its records were in the bucket
    jobs.append(submit(hosts, "kept-builtin", builtin=True, workload="tiny_cnn", steps=60, gpus=2,
                       checkpoint_every=10, step_time=0.2))
    wait_for(lambda: job(hosts, jobs[0])["steps"] >= 20, 240, "the first job to checkpoint")
    hosts.python("head", KILL_COORDINATOR.format(address=hosts.ray_address))
    hosts.run("head", f"rm -rf {hosts.state_dir}/* {hosts.state_dir}/.[!.]*", check=False)
    fresh = f"{hosts.state_dir}/replaced"
    pcs(hosts, "start", "--address", hosts.ray_address, "--storage", hosts.storage_uri, "--state-dir", fresh,
        "--cluster-spec", hosts.spec_path, "--policy", "fair", "--grace", 20)
    known = {j["id"]: j for j in status(hosts)["jobs"]}
    assert set(jobs) <= set(known), known.keys()
    ended = wait_for(lambda: all(job(hosts, j)["state"] in ("finished", "failed") for j in jobs) and
                     [job(hosts, j) for j in jobs], 600, "every job known before the replacement to end")
    assert [j["state"] for j in ended] == ["finished"] * 3, ended
    assert [j["steps"] for j in ended] == [120, 120, 60]


def test_storage_down_for_30_s_then_a_worker_machine_killed_loses_no_job(cluster):
    """S3 stopped for 30 s mid-run: no job fails (uploads wait and retry). Then every process of a worker
    machine killed at once: its job resumes on the machines left, from the bucket, and finishes."""
    hosts = cluster
    elastic = submit(hosts, "survivor", steps=400, gpus=6, min_gpus=2, config={"checkpoint_every": 20})
    wait_for(lambda: job(hosts, elastic)["steps"] >= 40, 300, "the job to train across the hosts")
    hosts.s3.stop()
    stopped = time.monotonic()
    told = wait_for(lambda: (status(hosts).get("storage") or {}).get("problem"), 25, "status to say the storage is away")
    assert "unreachable" in told, told
    time.sleep(max(0.0, 30 - (time.monotonic() - stopped)))
    hosts.s3.start()
    assert job(hosts, elastic)["state"] in ("running", "queued"), job(hosts, elastic)
    before = job(hosts, elastic)["steps"]
    wait_for(lambda: job(hosts, elastic)["steps"] >= before + 40, 300, "training to go on after the outage")
    hosts.kill_host("w2")
    final = wait_for(lambda: (j := job(hosts, elastic))["state"] in ("finished", "failed") and j, 600,
                     "the job to end after losing a machine")
    assert final["state"] == "finished" and final["steps"] == 400, (final["error"] or "")[-600:]
    assert final["lost_steps"] <= 20 * max(0, final["attempts"] - 1) + 20, final
