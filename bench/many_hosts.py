"""Faults of a cluster whose machines share no disk, with its storage in S3: what each one loses, and how long.

Three machines emulated as ``tests/hosts.py`` makes them (network, mount, PID and host-name namespaces
on a bridge; moto's S3 server on the bridge), set up with the README's operator steps and
``pcs-ray start --storage``. Needs root. Prints one JSON object:

* ``mirror``: how far the journal's mirror trails a commit (an append, then ``wait``), in ms, on the
  same S3 server from this process;
* ``head``: the coordinator killed and its state folder deleted while jobs train and queue; a new one
  started on an empty folder with ``--storage`` only: acknowledged jobs it knows, seconds until it
  answers ``status``, steps redone per job (against the checkpoint interval), jobs finished;
* ``outage``: S3 stopped for ``--outage-s`` seconds mid-run: jobs failed, the longest time the job's
  step stood still, whether ``status`` said why;
* ``worker``: every process of a worker machine killed at once: seconds until the job trains again,
  steps redone, how it ended.

``python bench/many_hosts.py [--jobs 4] [--outage-s 30]``
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import hosts_cli  # noqa: E402  (the operator's commands on an emulated head, as the tests type them)

CHECKPOINT_EVERY = 20
LOOP = """
import socket
import pcs_ray.train as train
from train_mlp import train_loop

def loop(config):
    print(f"rank {train.get_context().world_rank} on {socket.gethostname()}", flush=True)
    train_loop(config)
"""
KILL_COORDINATOR = """
import ray
ray.init(address="{address}", namespace="pcs-ray")
ray.kill(ray.get_actor("coordinator"), no_restart=True)
"""


def log(message: str) -> None:
    print(f"[many_hosts] {message}", file=sys.stderr, flush=True)


class Cluster:
    def __init__(self, hosts):
        self.hosts = hosts

    def pcs(self, *args, timeout=180, check=True):
        return hosts_cli.pcs(self.hosts, *args, timeout=timeout, check=check)

    def start(self, state_dir: str) -> float:
        began = time.monotonic()
        self.pcs("start", "--address", self.hosts.ray_address, "--storage", self.hosts.storage_uri, "--state-dir",
                 state_dir, "--cluster-spec", self.hosts.spec_path, "--policy", "fair", "--grace", 20)
        self.status()
        return time.monotonic() - began

    def status(self) -> dict:
        return hosts_cli.status(self.hosts)

    def jobs(self, ids) -> dict[int, dict]:
        return {j["id"]: j for j in self.status()["jobs"] if j["id"] in set(ids)}

    def submit(self, name: str, **fields) -> int:
        spec = {"name": name, "entrypoint": "spanning.py:loop", "working_dir": str(self.hosts.inputs / "user-code"),
                "class": "B", **fields}
        path = self.hosts.put_file(f"{name}.yaml", json.dumps(spec))
        return int(json.loads(self.pcs("submit", path, "--json", "--address", self.hosts.ray_address).stdout)["id"])

    def wait_for(self, predicate, timeout: float, what: str, every: float = 1.0):
        return hosts_cli.wait_for(predicate, timeout, what, every)

    def ended(self, ids, timeout: float = 900) -> dict[int, dict]:
        return self.wait_for(lambda: (js := self.jobs(ids)) and all(j["state"] in ("finished", "failed", "cancelled")
                                                                    for j in js.values()) and js, timeout, "jobs to end", 3)


def mirror_lag(storage_uri: str, records: int = 200) -> dict:
    """Milliseconds from a journal record's commit until the mirror has it in the storage."""
    import tempfile

    from pcs_ray.coordinator.journal import Journal
    from pcs_ray.coordinator.journal_mirror import JournalMirror
    from pcs_ray.storage import open_storage

    folder = Path(tempfile.mkdtemp(prefix="pcs-ray-mirror-bench-"))
    journal = Journal(folder / "journal.sqlite")
    mirror = JournalMirror(open_storage(storage_uri.rstrip("/") + "-mirror-bench"), folder / "journal.sqlite")
    mirror.start()
    lags = []
    try:
        for i in range(records):
            began = time.perf_counter()
            journal.append(float(i), "bench", i, {"i": i})
            mirror.wait()
            lags.append((time.perf_counter() - began) * 1000)
            time.sleep(0.01)
    finally:
        mirror.close()
        journal.close()
        shutil.rmtree(folder, ignore_errors=True)
    lags.sort()
    return {"records": records, "p50_ms": round(statistics.median(lags), 1),
            "p99_ms": round(lags[int(0.99 * (len(lags) - 1))], 1), "max_ms": round(lags[-1], 1),
            "interval_ms": round(mirror.interval_s * 1000)}


def head_loss(cluster: Cluster, jobs: int) -> dict:
    hosts = cluster.hosts
    ids = [cluster.submit(f"head-{i}", steps=400, gpus=2, min_gpus=2, config={"checkpoint_every": CHECKPOINT_EVERY})
           for i in range(jobs)]
    cluster.wait_for(lambda: sum(j["state"] == "running" and j["steps"] >= 30 for j in cluster.jobs(ids).values()) >= 2,
                     300, "two jobs to train")
    before = cluster.jobs(ids)
    hosts.python("head", KILL_COORDINATOR.format(address=hosts.ray_address))
    killed = time.monotonic()
    hosts.run("head", f"rm -rf {hosts.state_dir}/*", check=False)
    answered_s = cluster.start(f"{hosts.state_dir}/replaced")
    answered = time.monotonic() - killed
    known = cluster.jobs(ids)
    ended = cluster.ended(ids)
    return {
        "acknowledged": len(ids), "known_after": len(known), "lost_acknowledged": len(set(ids) - set(known)),
        "states_at_kill": sorted(j["state"] for j in before.values()),
        "steps_at_kill": {str(k): j["steps"] for k, j in before.items()},
        "seconds_kill_to_status": round(answered, 1),
        "start_command_s": round(answered_s, 1),
        "finished": sum(j["state"] == "finished" for j in ended.values()),
        "not_finished": {str(k): {"state": j["state"], "steps": j["steps"], "error": (j["error"] or "")[-400:]}
                         for k, j in ended.items() if j["state"] != "finished"},
        "steps_redone": {str(k): redone(cluster, k, before[k]["steps"], before[k]["attempts"]) for k in ended},
        "attempts_at_kill_and_end": {str(k): [before[k]["attempts"], j["attempts"]] for k, j in ended.items()},
        "checkpoint_every": CHECKPOINT_EVERY,
    }


def redone(cluster: Cluster, jid: int, steps_at_kill: int, attempt_at_kill: int) -> int | None:
    """Steps a job trained again after a fault: its step when the fault struck less the step its next run
    resumed from, as that run's rank 0 printed it (None: it had not trained before the fault)."""
    if not steps_at_kill:
        return None
    for attempt in range(attempt_at_kill + 1, attempt_at_kill + 4):
        out = cluster.pcs("logs", jid, "--attempt", attempt, "--rank", 0, "--address", cluster.hosts.ray_address,
                          check=False).stdout
        found = re.search(r"resumed at step (\d+)", out)
        if found:
            return max(0, steps_at_kill - int(found.group(1)))
    return None


def outage_then_worker(cluster: Cluster, outage_s: float) -> tuple[dict, dict]:
    hosts = cluster.hosts
    jid = cluster.submit("survivor", steps=500, gpus=6, min_gpus=2, config={"checkpoint_every": CHECKPOINT_EVERY})
    cluster.wait_for(lambda: cluster.jobs([jid])[jid]["steps"] >= 40, 300, "the job to train across the hosts")
    hosts.s3.stop()
    stopped = time.monotonic()
    said, last, still = None, cluster.jobs([jid])[jid]["steps"], 0.0
    mark = time.monotonic()
    while time.monotonic() - stopped < outage_s:
        view = cluster.status()
        said = said or (view.get("storage") or {}).get("problem")
        step = next(j["steps"] for j in view["jobs"] if j["id"] == jid)
        if step != last:
            last, mark = step, time.monotonic()
        still = max(still, time.monotonic() - mark)
        time.sleep(1)
    hosts.s3.start()
    while time.monotonic() - mark < 120:
        step = cluster.jobs([jid])[jid]["steps"]
        if step != last:
            break
        time.sleep(0.5)
    still = max(still, time.monotonic() - mark)
    during = cluster.jobs([jid])[jid]
    outage = {"seconds": outage_s, "job_state_after": during["state"], "failed_jobs": int(during["state"] == "failed"),
              "longest_standstill_s": round(still, 1), "status_said": said}
    cluster.wait_for(lambda: cluster.jobs([jid])[jid]["steps"] >= last + 40, 300, "training after the outage")
    attempts = cluster.jobs([jid])[jid]["attempts"]
    steps_at_kill = cluster.jobs([jid])[jid]["steps"]
    hosts.kill_host("w2")
    killed = time.monotonic()
    cluster.wait_for(lambda: (j := cluster.jobs([jid])[jid])["attempts"] > attempts and j["state"] == "running"
                     and j["steps"] > 0, 600, "the job to train again", 0.5)
    resumed_s = time.monotonic() - killed
    end = cluster.ended([jid])[jid]
    worker = {"seconds_to_train_again": round(resumed_s, 1), "steps_at_kill": steps_at_kill, "state": end["state"],
              "steps": end["steps"], "steps_redone": redone(cluster, jid, steps_at_kill, attempts),
              "lost_steps_counted": end["lost_steps"], "attempts": end["attempts"],
              "checkpoint_every": CHECKPOINT_EVERY}
    return outage, worker


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4, help="jobs submitted before the head's coordinator is killed")
    parser.add_argument("--outage-s", type=float, default=30.0, help="seconds the S3 server is stopped")
    args = parser.parse_args(argv)
    from hosts import emulated_hosts, missing

    why = missing()
    if why:
        raise SystemExit(f"many_hosts: {why}")
    began = time.monotonic()
    with emulated_hosts(("head", "w1", "w2"), gpus_per_host=2) as hosts:
        log("starting Ray on three emulated machines")
        hosts.start_ray()
        shutil.copytree(ROOT / "examples" / "user-code", hosts.inputs / "user-code", dirs_exist_ok=True)
        (hosts.inputs / "user-code" / "spanning.py").write_text(LOOP)
        cluster = Cluster(hosts)
        cluster.start(hosts.state_dir)
        log("journal mirror lag")
        import os

        os.environ.update(hosts.s3.env())
        out = {"mirror": mirror_lag(hosts.storage_uri)}
        log("the head's coordinator lost with its disk")
        out["head"] = head_loss(cluster, args.jobs)
        log("S3 away, then a worker machine lost")
        out["outage"], out["worker"] = outage_then_worker(cluster, args.outage_s)
        cluster.pcs("stop", "--address", hosts.ray_address, "--timeout", 20, check=False)
    out["wall_s"] = round(time.monotonic() - began, 1)
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
