"""Faults on a real local multi-node cluster (`pcs-ray up --local`), and on the journal and checkpoints.

    PYTHONPATH=. python bench/faults.py [--nodes 3] [--gpus-per-node 2] [--jobs 6] [--steps 3000]

Prints one JSON object, per fault: jobs lost, acknowledged submissions lost,
steps of work lost (per job: the step reached before the fault minus the step
it resumed from), time to recover (the fault until every affected job runs
again; for the journal: until the coordinator serves again), and for the
node fault the checkpoint interval each job's loss is bounded by.

Faults: ``coordinator_mid_run`` and ``coordinator_mid_preemption`` (the
coordinator actor killed while every GPU trains, and again while a
preemption is in flight; Ray restarts it, it adopts the runs still training
on their warm runners: steps lost counts, per job, the highest step seen
before the kill minus the step its training continued from),
``coordinator_mid_submission`` (killed while a client submits 40 jobs back
to back: every acknowledged submission there exactly once, none twice), ``worker_node`` (SIGKILL of every process of the last worker node,
its jobs resume elsewhere from their checkpoints), ``runner`` (SIGKILL of one
runner process), ``journal_torn_tail`` and ``journal_corrupt_record`` (a
coordinator rebuilt from a damaged journal), ``checkpoint_disk_full`` (a
checkpoint write that hits ENOSPC). The head node's loss is out of scope
(Ray's GCS fault tolerance needs an external Redis). The cluster runs with
token authentication (a private token file) and Ray's node health checks
tightened (``RAY_health_check_period_ms=500``, threshold 3) so a dead node is
declared in seconds; with Ray's defaults add ~30 s to ``worker_node``.
"""

from __future__ import annotations

import argparse
import errno
import os
import secrets
import shutil
import signal
import sqlite3
import tempfile
import time
from pathlib import Path

from common import Cli, cli_env, log, up_local
from pcs_ray.api import strict_json
from pcs_ray.commands import local_cluster as lc
from pcs_ray.contract import TERMINAL


class Watch:
    """Polls the coordinator's status; remembers each job's highest step seen."""

    def __init__(self, client):
        self.client = client
        self.best: dict[int, int] = {}

    def jobs(self) -> dict[int, dict]:
        jobs = {j["id"]: j for j in self.client.status()["jobs"]}
        for jid, j in jobs.items():
            self.best[jid] = max(self.best.get(jid, 0), j["steps"])
        return jobs

    def until(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.jobs()
            if predicate(jobs):
                return jobs
            time.sleep(0.25)
        raise RuntimeError(f"timed out waiting for {what}")


def _losses(jobs: dict[int, dict], submitted: list[int], victims: dict[int, int], resumed: dict[int, int]) -> dict:
    lost_jobs = [j for j in submitted if jobs.get(j, {}).get("state") != "finished"]
    return {
        "jobs_lost": len(lost_jobs),
        "acknowledged_submissions_lost": len([j for j in submitted if j not in jobs]),
        "steps_lost": {str(j): victims[j] - resumed.get(j, 0) for j in victims},
    }


def node_fault(client, state: Path, args) -> dict:
    """Kill the last worker node while every job runs; all must finish on the nodes left."""
    job = Path(tempfile.mkdtemp(prefix="pcsray-bench-")) / "job.yaml"
    job.write_text(f"workload: tiny_cnn\nsteps: {args.steps}\ngpus: 1\ncheckpoint_every: {args.interval}\n")
    submitted = [client.submit(job).id for _ in range(args.jobs)]
    watch = Watch(client)
    record = lc.load(state)
    dead = record.nodes[-1].name
    watch.until(lambda js: all(js[j]["state"] == "running" and js[j]["steps"] > args.interval for j in submitted),
                600, "every job to run past its first checkpoint")
    jobs = watch.jobs()
    on_dead = [j for j in submitted if any(g.startswith(dead + ":") for g in jobs[j]["gpus"])]
    killed_at = time.monotonic()
    lc.kill_node(record.nodes[-1])
    reached = {j: watch.best[j] for j in on_dead}
    checkpoints = {j: _peek(state / "checkpoints" / str(j)) for j in on_dead}  # what their resume starts from
    watch.until(lambda js: all(js[j]["state"] == "running" and js[j]["attempts"] > jobs[j]["attempts"]
                               and not any(g.startswith(dead + ":") for g in js[j]["gpus"]) or js[j]["state"] == "finished"
                               for j in on_dead), 600, "the dead node's jobs to run again")
    restarted_s = time.monotonic() - killed_at
    seen = watch.jobs()
    watch.until(lambda js: all(js[j]["steps"] != seen[j]["steps"] or js[j]["state"] == "finished" for j in on_dead),
                600, "the dead node's jobs to report progress again")
    recovered_s = time.monotonic() - killed_at
    final = watch.until(lambda js: all(js[j]["state"] in TERMINAL for j in submitted),
                        1800, "every job to end")
    out = _losses(final, submitted, reached, checkpoints)
    out.update(time_to_recover_s=round(recovered_s, 2), time_to_restart_s=round(restarted_s, 2), dead_node=dead, jobs_on_dead_node=len(on_dead),
               checkpoint_interval_steps=args.interval,
               max_steps_lost_within_one_interval=all(v <= args.interval for v in out["steps_lost"].values()),
               states=sorted({j["state"] for j in final.values() if j["id"] in submitted}))
    return out


def runner_fault(client, state: Path, args) -> dict:
    """SIGKILL one runner process mid-run."""
    import ray
    from ray.util.state import list_actors

    job = Path(tempfile.mkdtemp(prefix="pcsray-bench-")) / "job.yaml"
    job.write_text(f"workload: tiny_cnn\nsteps: {args.steps // 2}\ngpus: 1\ncheckpoint_every: {args.interval}\n")
    jid = client.submit(job).id
    watch = Watch(client)
    before = watch.until(lambda js: js[jid]["state"] == "running" and js[jid]["steps"] > args.interval, 600, "the job to run")[jid]
    runners = list_actors(address=args.dashboard, filters=[("state", "=", "ALIVE")], limit=1000)
    pid = next(int(a.pid) for a in runners if a.pid and a.class_name in ("Runner", "RemoteRunner"))
    ours = {p for n in lc.load(state).nodes for p in lc.session_pids(n.leader)}
    assert pid in ours, "the runner is not a process of this local cluster"
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    reached = watch.best[jid]
    ckpt = _peek(state / "checkpoints" / str(jid))
    again = watch.until(lambda js: js[jid]["attempts"] > before["attempts"] and js[jid]["state"] == "running"
                        or js[jid]["state"] == "finished", 300, "the job to run again")
    restarted_s = time.monotonic() - killed_at
    watch.until(lambda js: js[jid]["steps"] != again[jid]["steps"] or js[jid]["state"] == "finished", 300,
                "the new runner's first progress report")
    recovered_s = time.monotonic() - killed_at
    final = watch.until(lambda js: js[jid]["state"] in TERMINAL, 900, "the job to end")
    out = _losses(final, [jid], {jid: reached}, {jid: ckpt})
    out.update(time_to_recover_s=round(recovered_s, 2), time_to_restart_s=round(restarted_s, 2),
               checkpoint_interval_steps=args.interval,
               recover_means="the kill until the new runner's first progress report (restart: until it is launched)")
    del ray
    return out


def coordinator_faults(client, args) -> dict:
    """Kill the coordinator actor (Ray restarts it) mid-run, then mid-preemption; every job must finish
    and no step of work may be lost: the runs go on on their warm runners and the new actor adopts them."""
    import ray

    from pcs_ray.client import get_coordinator

    job = Path(tempfile.mkdtemp(prefix="pcsray-bench-")) / "job.yaml"
    job.write_text(f"workload: tiny_cnn\nsteps: {args.steps}\ngpus: 1\ncheckpoint_every: {args.interval}\n")
    gpus = sum(len(n["gpus"]) for n in client.config()["cluster"]["nodes"])  # those alive (after a node fault)
    watch = Watch(client)
    submitted = [client.submit(job).id for _ in range(gpus)]
    watch.until(lambda js: all(js[j]["state"] == "running" and js[j]["steps"] > args.interval for j in submitted),
                600, "every job to run past its first checkpoint")
    out = {}

    def restart() -> tuple[dict, float, float]:
        """Kill the actor (Ray restarts it); its first answer, when it was killed and how long it took to serve."""
        actor = get_coordinator()
        pid = ray.get(actor.ping.remote())["pid"]
        killed_at = time.monotonic()
        ray.kill(actor, no_restart=False)
        info = ray.get(actor.ping.remote(), timeout=300)  # calls wait (and are retried) while Ray restarts it
        while info["pid"] == pid:  # the kill is asynchronous: the old process may still answer once
            time.sleep(0.1)
            info = ray.get(actor.ping.remote(), timeout=300)
        watch.jobs()
        return info, killed_at, time.monotonic() - killed_at

    def kill(victims: list[int], what: str) -> dict:
        before = watch.jobs()
        reached = {j: watch.best[j] for j in victims}
        info, killed_at, serving_s = restart()

        def moving(js):  # each victim trains again (reports a step past what it had reached) or has ended
            return all(js[j]["state"] in TERMINAL
                       or (js[j]["state"] == "running" and js[j]["steps"] > reached[j]) for j in victims)

        after = watch.until(moving, 600, f"the jobs to train again after the kill {what}")
        recovered_s = time.monotonic() - killed_at
        lost = {}
        for j in victims:
            a, b = before[j], after[j]
            if b["attempts"] == a["attempts"]:
                lost[str(j)] = 0  # the same run went on: nothing was redone
            else:  # a new run: it continued from the step its first new segment started at
                lost[str(j)] = max(0, reached[j] - b["segments"][len(a["segments"])]["from_step"])
        return {"jobs_killed_with": len(victims), "runs_adopted": info["reattached"], "runs_lost": info["recovered"],
                "steps_lost": lost, "time_to_serve_s": round(serving_s, 2), "time_to_recover_s": round(recovered_s, 2),
                "attempts": {str(j): after[j]["attempts"] for j in victims}}

    out["coordinator_mid_run"] = kill(submitted, "mid-run")
    client.set_config("srsf")  # a short arrival now preempts the long job with the most work left
    short = client.submit({"workload": "tiny_cnn", "steps": 20, "gpus": 1})
    stopping = [j for j, v in watch.jobs().items() if v["state"] == "stopping"]
    out["coordinator_mid_preemption"] = kill(stopping, "mid-preemption") if stopping else {
        "note": "the preemption had ended before the kill; rerun"}
    out["coordinator_mid_preemption"]["preemption_in_flight"] = bool(stopping)
    out["coordinator_mid_submission"], late = mid_submission(client, restart)
    everyone = submitted + [short.id] + late
    final = watch.until(lambda js: all(js[j]["state"] in TERMINAL for j in everyone),
                        1800, "every job to end")
    for fault in ("coordinator_mid_run", "coordinator_mid_preemption", "coordinator_mid_submission"):
        out[fault].update(jobs_lost=len([j for j in everyone if final[j]["state"] != "finished"]),
                          acknowledged_submissions_lost=len([j for j in everyone if j not in final]))
    out["coordinator_mid_preemption"]["preemptions"] = {str(j): final[j]["preemptions"] for j in stopping}
    return out


def mid_submission(client, restart, count: int = 40) -> tuple[dict, list[int]]:
    """Kill the coordinator while a client submits ``count`` jobs back to back (each with its own submission id).

    A call in flight when the actor dies is retried on the restarted one (``max_task_retries``); the
    submission id makes the retry return the job the journal already holds. Every acknowledged submission
    must be there exactly once, and none twice."""
    import threading

    names = [f"midsub-{k}" for k in range(count)]
    acked: dict[str, int] = {}
    errors: list[str] = []

    def submit_all():
        for name in names:
            try:
                acked[name] = client.submit({"name": name, "workload": "tiny_cnn", "steps": 20, "gpus": 1}).id
            except Exception as exc:  # an unacknowledged submission: the client was told it failed
                errors.append(f"{name}: {exc}".splitlines()[0])

    thread = threading.Thread(target=submit_all)
    thread.start()
    while len(acked) + len(errors) < count // 4 and thread.is_alive():
        time.sleep(0.05)
    acked_before = len(acked)
    info, _, serving_s = restart()
    thread.join(timeout=600)
    jobs = client.status()["jobs"]
    seen: dict[str, list[int]] = {}
    for j in jobs:
        if j.get("name") in names:
            seen.setdefault(j["name"], []).append(j["id"])
    return {
        "submissions": count, "acknowledged_before_kill": acked_before, "acknowledged": len(acked),
        "refused": len(errors), "refusals": errors[:3],
        "acknowledged_submissions_lost_now": len([n for n in acked if n not in seen]),
        "duplicated": len([n for n, ids in seen.items() if len(ids) > 1]),
        "refused_but_present": len([n for n in seen if n not in acked]),
        "ids_match": all(seen.get(n) == [jid] for n, jid in acked.items()),
        "time_to_serve_s": round(serving_s, 2), "runs_adopted": info["reattached"],
    }, sorted(acked.values())


def _peek(directory: Path) -> int:
    from pcs_ray.executors.checkpoint import peek_step

    return peek_step(directory) or 0


def journal_faults() -> dict:
    """A coordinator rebuilt from a journal with a torn WAL tail, and one with a corrupted last record."""
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.coordinator import Coordinator, Journal
    from pcs_ray.policies import build_policy

    def core(journal):
        return Coordinator(ClusterSpec.homogeneous(8, 4), build_policy("fifo"), journal, checkpoint_root="/tmp/ckpt",
                           clock=time.time, workloads=("tiny",))

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        live = Path(tmp) / "live" / "journal.sqlite"
        c = core(Journal(live))
        acked = [c.submit({"workload": "tiny", "steps": 100, "gpus": 1, "step_time": 0.1})[0] for _ in range(50)]
        crashed = Path(tmp) / "crashed"
        crashed.mkdir()
        for suffix in ("", "-wal"):
            shutil.copy(str(live) + suffix, crashed / ("journal.sqlite" + suffix))
        with open(crashed / "journal.sqlite-wal", "ab") as f:
            f.write(os.urandom(1000))  # a commit torn mid-write by the crash
        began = time.perf_counter()
        j = Journal(crashed / "journal.sqlite")
        rebuilt = core(j)
        rebuilt.status()
        out["journal_torn_tail"] = {
            "jobs_lost": len(set(acked) - set(rebuilt.jobs)), "acknowledged_submissions_lost": len(set(acked) - set(rebuilt.jobs)),
            "steps_lost": 0, "time_to_recover_s": round(time.perf_counter() - began, 4), "warned": bool(j.warnings)}
        c.journal.close()
        db = sqlite3.connect(live)
        last = db.execute("SELECT MAX(seq) FROM events").fetchone()[0]
        db.execute("UPDATE events SET data = '{\"trunc' WHERE seq = ?", (last,))
        db.commit()
        db.close()
        began = time.perf_counter()
        j = Journal(live)
        rebuilt = core(j)
        rebuilt.submit({"workload": "tiny", "steps": 100, "gpus": 1, "step_time": 0.1})
        out["journal_corrupt_record"] = {
            "records_dropped": 1, "jobs_lost": len(set(acked) - set(rebuilt.jobs)),
            "time_to_recover_s": round(time.perf_counter() - began, 4), "warned": bool(j.warnings),
            "note": "the damaged record is the last one (a progress or submit event); a submission whose record is "
                    "damaged was acknowledged only if its commit returned, so it is the one case that can be lost"}
    return out


def disk_full_fault() -> dict:
    from pcs_ray.executors import checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint.save_checkpoint(tmp, {"step": 100})

        class Full:
            def __init__(self, *a, **k):
                pass

            def write(self, data):
                raise OSError(errno.ENOSPC, "No space left on device")

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        checkpoint.open = Full
        try:
            checkpoint.save_checkpoint(tmp, {"step": 200})
            raised = None
        except OSError as e:
            raised = str(e)
        finally:
            del checkpoint.open
        kept = checkpoint.load_checkpoint(tmp).state["step"]
    return {"checkpoint_disk_full": {"error": raised, "checkpoint_kept_step": kept, "steps_lost": 200 - kept,
                                     "jobs_lost": 0, "note": "the runner fails with this error; the coordinator "
                                     "requeues the job (status shows the error) and it resumes from step 100"}}


def cluster_faults(cluster, args, out: dict) -> None:
    """The runner, worker-node and coordinator faults on a local cluster ``up`` started."""
    from pcs_ray.client import Client

    args.dashboard = cluster.up["dashboard"]
    client = Client(cluster.up["address"])
    log(f"cluster up in {out['up_s']} s")
    if args.only != "coordinator":
        log("killing a runner")
        out["runner"] = runner_fault(client, cluster.state_dir, args)
        log(f"{strict_json.dumps(out['runner'])}\nkilling a worker node")
        out["worker_node"] = node_fault(client, cluster.state_dir, args)
        log(strict_json.dumps(out["worker_node"]))
    log("killing the coordinator (last: it switches the policy to SRSF)")
    out.update(coordinator_faults(client, args))
    log(strict_json.dumps({k: v for k, v in out.items() if k.startswith("coordinator")}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--gpus-per-node", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--interval", type=int, default=100, help="checkpoint_every of the jobs")
    ap.add_argument("--only", choices=["cluster", "local", "coordinator"],
                    help="run only the cluster faults, only the in-process ones, or only the coordinator kills (on the cluster)")
    args = ap.parse_args()
    out: dict = {"load_average": os.getloadavg()}
    if args.only in (None, "local"):
        out.update(journal_faults())
        out.update(disk_full_fault())
    if args.only != "local":
        tmp = Path(tempfile.mkdtemp(prefix="pcsray-faults-"))
        token = tmp / "token"
        token.write_text(secrets.token_hex(32))
        health = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}
        began = time.perf_counter()
        try:
            with up_local(Cli(cli_env(token, **health)), tmp / "state", "--nodes", args.nodes,
                          "--gpus-per-node", args.gpus_per_node, timeout=300) as cluster:
                record = lc.load(cluster.state_dir)
                try:
                    out["up_s"] = round(time.perf_counter() - began, 1)
                    os.environ.update(RAY_AUTH_TOKEN_PATH=str(token), RAY_health_check_period_ms="500")
                    cluster_faults(cluster, args, out)
                finally:
                    import ray

                    ray.shutdown()  # before its GCS goes: a driver that loses the GCS aborts the process
            out["down_left_processes"] = sum(len(v) for v in cluster.down.get("left", {}).values())
            out["after_down_alive"] = sum(len(lc.session_pids(n.leader)) for n in record.nodes)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(strict_json.dumps(out))


if __name__ == "__main__":
    main()
