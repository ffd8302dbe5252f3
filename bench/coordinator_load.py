"""Load through the coordinator actor: many queued jobs on a local multi-node cluster, stand-in runners.

    PYTHONPATH=. python bench/coordinator_load.py [--nodes 4] [--gpus-per-node 64] [--jobs 10000]

Brings up `pcs-ray up --local` (token auth on, a private token file),
replaces its coordinator by one whose runners are ``pcs_ray.executors.standin`` (they
start, report progress, checkpoint and stop like real ones), submits
``--jobs`` jobs through ``pcs_ray.client.Client`` one after another, and
prints one JSON object: submissions per second, submit→prediction latency
(p50/p99: the call returns the job's predicted completion), ``status``
latency (p50/p99) with everything queued, the coordinator's decision latency
(each policy + placement + diff inside the actor, as it times them:
``decision_latency``) and its resident memory. ``--variability SEED`` gives
the GPUs measured per-class scores, so placement runs inside every forward
play (issue 13's latency target through the actor); ``--window K`` adds the
latency over the submissions after the K-th, when the queue is full.
``--real-runners --demo-cluster --jobs 1000`` keeps ``up``'s coordinator
and its warm runners (real training on the demo's 8 emulated GPUs);
``--training-first K`` waits after the K-th submission until runners train on
every GPU, so that what follows is timed beside training, not start-up.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from common import Cli, cli_env, log, up_local
from pcs_ray.api import strict_json


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _wait_for_training(client, gpus: int, limit_s: float) -> dict:
    """Poll ``status`` until every GPU is held by a running job that has reported steps (or ``limit_s``)."""
    began = time.perf_counter()
    while True:
        jobs = client.status()["jobs"]
        training = [j for j in jobs if j["state"] == "running" and (j.get("steps") or 0) > 0]
        held = sum(len(j.get("gpus") or ()) for j in training)
        if held >= gpus or time.perf_counter() - began > limit_s:
            return {"waited_s": round(time.perf_counter() - began, 1), "jobs_training": len(training), "gpus_held": held}
        time.sleep(1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--policy", default="pcs-bal")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variability", type=int, default=None, metavar="SEED",
                    help="give the GPUs PAL's measured per-class scores (drawn with this seed, locality penalty 1.2, "
                         "as bench/coordinator_latency.py's variable scenario): placement then runs inside every "
                         "forward play")
    ap.add_argument("--real-runners", action="store_true",
                    help="keep up's coordinator and its warm runners (real PyTorch training on emulated GPUs) "
                         "instead of stand-ins; with --demo-cluster, issue 16's 1,000 jobs on the demo's 8 GPUs")
    ap.add_argument("--demo-cluster", action="store_true",
                    help="start the demo's cluster (2 nodes x 4 GPUs, half-DGX-1 links, measured variability) "
                         "instead of --nodes x --gpus-per-node")
    ap.add_argument("--window", type=int, default=1000,
                    help="also report submit->prediction over the submissions after this many (the queue is full)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop submitting after this many seconds (the figures then cover the jobs submitted so far)")
    ap.add_argument("--training-first", type=int, default=0, metavar="K",
                    help="after the first K submissions, wait (up to 180 s, not timed) until every GPU is held by "
                         "a job whose runner has reported steps, so the rest are measured beside runners that "
                         "train rather than ones still starting")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pcsray-load-"))
    token = tmp / "token"
    token.write_text(secrets.token_hex(32))
    cli = Cli(cli_env(token))
    os.environ.update(RAY_AUTH_TOKEN_PATH=str(token))
    out: dict = {"nodes": args.nodes, "gpus": args.nodes * args.gpus_per_node, "jobs": args.jobs,
                 "load_average_before": os.getloadavg()}
    try:
        shape = ["--nodes", str(args.nodes), "--gpus-per-node", str(args.gpus_per_node)]
        if args.demo_cluster:
            from pcs_ray.commands.demo_cluster import demo_cluster

            spec, _ = demo_cluster(tmp, seed=1)
            (tmp / "cluster.json").write_text(spec.model_dump_json())
            shape = ["--cluster-spec", str(tmp / "cluster.json")]
            out.update(nodes=len(spec.nodes), gpus=spec.num_gpus, cluster="the demo's (half-DGX-1 links, measured variability)")
        with up_local(cli, tmp / "state", *shape, "--policy", args.policy, "--cpus-per-node", "2", timeout=600) as cluster:
            try:
                measure(args, cluster.up["address"], tmp, out)
            finally:
                import ray

                ray.shutdown()  # before its GCS goes: a driver that loses the GCS aborts the process
        out["down_left"] = cluster.down.get("left")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(strict_json.dumps(out))


def measure(args, address: str, tmp: Path, out: dict) -> None:
    """Submit ``args.jobs`` jobs to the cluster at ``address`` and put the figures in ``out``."""
    import ray

    from pcs_ray.api.actor_ref import NAMESPACE
    from pcs_ray.client import Client, connect, get_coordinator
    from pcs_ray.coordinator.actor import start_coordinator
    from pcs_ray.coordinator.config import CoordinatorConfig, cluster_dict
    from pcs_ray.cluster.discovery import cluster_from_ray_nodes
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    connect(address, NAMESPACE)
    out["runners"] = "real (warm pool)" if args.real_runners else "stand-ins"
    if args.real_runners:
        actor = get_coordinator()
    else:
        stock = get_coordinator()  # replaced by one with stand-in runners; its warm runners (torch, ~0.8 GB each) go too
        ray.get(stock.shutdown_runners.remote())
        ray.kill(stock, no_restart=True)
        head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])
        cluster = cluster_from_ray_nodes(ray.nodes())
        if args.variability is not None:
            from coordinator_latency import with_measured_variability

            cluster = with_measured_variability(cluster, args.variability)
        out["variability"] = args.variability
        config = CoordinatorConfig(cluster=cluster_dict(cluster),
                                   state_dir=str(tmp / "load-state"), policy=args.policy, wfq=None,
                                   placement="packed-sticky", grace_s=5.0, launcher="pcs_ray.executors.standin:launch")
        time.sleep(2.0)
        actor = start_coordinator(config, pin_here=False, strategy=NodeAffinitySchedulingStrategy(head, soft=False))
    pid = ray.get(actor.ping.remote())["pid"]
    client = Client(coordinator=actor)
    rng = random.Random(args.seed)
    lat, handles = [], []
    began = time.perf_counter()
    for i in range(args.jobs):
        if args.budget_s is not None and time.perf_counter() - began > args.budget_s:
            log(f"budget spent after {i} submissions")
            break
        gpus = rng.choice([1, 1, 1, 2, 2, 4, 8])
        spec = {"workload": "tiny_cnn", "steps": rng.randint(200, 20_000), "gpus": gpus,
                "min_gpus": max(1, gpus // 2), "step_time": 0.05, "checkpoint_every": 100,
                "class": rng.choice("ABCD"), "name": f"load-{i}"}
        t = time.perf_counter()
        handles.append(client.submit(spec))
        lat.append(time.perf_counter() - t)
        if args.training_first and i + 1 == args.training_first:
            waited = time.perf_counter()
            out["training_before_timing"] = _wait_for_training(client, out["gpus"], 180.0)
            began += time.perf_counter() - waited  # the wait is not submission time
        if i and i % 1000 == 0:
            log(f"{i} submitted, last p99 {1000 * np.percentile(lat[-1000:], 99):.0f} ms")
    wall = time.perf_counter() - began
    submitted = len(lat)
    # How the window's forecasts were played (Coordinator.forecast): a sample of its jobs, in order.
    window_ids = [h.id for h in handles[args.window:]][::10] if submitted > args.window else []
    bases = [client.predict(jid) for jid in window_ids]
    ages = [b["refresh_age_s"] for b in bases if b.get("basis") == "branch"]
    status_lat = []
    for _ in range(30):
        t = time.perf_counter()
        st = client.status()
        status_lat.append(time.perf_counter() - t)
    states: dict[str, int] = {}
    for j in st["jobs"]:
        states[j["state"]] = states.get(j["state"], 0) + 1
    out.update(
        submitted=submitted, budget_s=args.budget_s,
        submissions_per_s=round(submitted / wall, 1),
        submit_p99_ms_per_1000={f"{k}-{k + 1000}": round(1000 * float(np.percentile(lat[k:k + 1000], 99)), 1)
                                for k in range(0, submitted, 1000)},
        submit_to_prediction_ms={"p50": round(1000 * float(np.percentile(lat, 50)), 1),
                                 "p99": round(1000 * float(np.percentile(lat, 99)), 1),
                                 "p99_last_1000": round(1000 * float(np.percentile(lat[-1000:], 99)), 1)},
        **({f"submit_to_prediction_ms_after_{args.window}": {
            "n": submitted - args.window, "p50": round(1000 * float(np.percentile(lat[args.window:], 50)), 1),
            "p99": round(1000 * float(np.percentile(lat[args.window:], 99)), 1), "target_p99": 100.0}}
           if submitted > args.window else {}),
        status_ms={"p50": round(1000 * float(np.percentile(status_lat, 50)), 1),
                   "p99": round(1000 * float(np.percentile(status_lat, 99)), 1)},
        decision=ray.get(actor.decision_latency.remote()),
        submit_inside=ray.get(actor.submit_latency.remote()),
        **({f"submit_inside_after_{args.window}": ray.get(actor.submit_latency.remote(args.window))}
           if submitted > args.window else {}),
        window_forecast_basis={"sampled": len(bases),
                               **{b: sum(1 for r in bases if r.get("basis") == b) for b in ("branch", "fresh")},
                               "refresh_age_s_p50": float(np.percentile(ages, 50)) if ages else None,
                               "refresh_age_s_max": max(ages, default=None)},
        coordinator_rss_mb=_rss_mb(pid), job_states=states, load_average_after=os.getloadavg(),
    )


if __name__ == "__main__":
    main()
