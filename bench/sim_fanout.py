"""``pcs-ray simulate`` of several policies x seeds (issue 41): one process against Ray tasks on a 2-node
``pcs-ray up --local`` cluster.

The same command runs four times, each as a fresh ``pcs-ray`` process, end to end (start-up, workload
generation, the runs, output): in one process; on the cluster with ``--address`` just after it came up
(``cold``: Ray starts a worker per CPU, each importing pcs-ray); again on the same cluster (``warm``:
workers already there); and in one process again after the cluster went down. Each node gets
``--cpus-per-node`` Ray CPUs (one task at a time each), so 2 nodes x 1 CPU match this machine's 2 cores:
the speed-up is at most 2, less what Ray's own processes and other users of the machine take (``load_avg``
before and after says how busy it was). ``solver_on_cluster``: a short ``pcs-ray solve --address`` on the same
cluster, its backend (``ray``: its evaluations ran as Ray tasks there) and simulations. ``identical``: every figure but ``wall_s`` is the same in the
one-process and the cluster runs.

Usage: python bench/sim_fanout.py [--num-jobs 2000] [--gpus 64] [--policies fifo,srsf,pcs-bal,themis]
       [--seeds 1,2,3,4] [--nodes 2] [--cpus-per-node 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from common import Cli, cli_env, log, private_token, up_local

from pcs_ray.api import strict_json
from pcs_ray.sim.metrics import without_wall


def timed(cli: Cli, args: list, what: str) -> tuple[float, dict]:
    log(f"{what} ...")
    t0 = time.perf_counter()
    out = cli.json(*args, timeout=3600)
    wall = time.perf_counter() - t0
    log(f"{what}: {wall:.1f} s")
    return wall, out


def solve_on(cli: Cli, address: str, out: Path) -> dict:
    """A short ``pcs-ray solve --address``: that its evaluations ran as Ray tasks there, and how long it took."""
    log("solve on the cluster ...")
    t0 = time.perf_counter()
    cli("solve", "--num-jobs", 100, "--gpus", 16, "--generations", 1, "--population", 4, "--samples", 2,
        "--test-samples", 1, "--address", address, "--out", out, timeout=3600)
    front = json.loads(out.read_text())
    return {"backend": front["backend"], "simulations": front["simulations_this_run"],
            "wall_s": round(time.perf_counter() - t0, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-jobs", type=int, default=2000)  # fewer: Ray's start-up outweighs the runs
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--policies", default="fifo,srsf,pcs-bal,themis")
    ap.add_argument("--seeds", default="1,2,3,4")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--cpus-per-node", type=int, default=1)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="pcs-sim-fanout-"))
    token = private_token(work)
    cli = Cli(cli_env(token))
    simulate = ["simulate", "--workload", "themis1", "--num-jobs", args.num_jobs, "--gpus", args.gpus,
                "-p", args.policies, "--seed", args.seeds]
    load_before = os.getloadavg()
    one_first, here = timed(cli, simulate, "one process")
    t0 = time.perf_counter()
    with up_local(cli, work / "state", "--nodes", args.nodes, "--gpus-per-node", 1,
                  "--cpus-per-node", args.cpus_per_node) as cluster:
        up_s = time.perf_counter() - t0
        on = [*simulate, "--address", cluster.up["address"]]
        cold, on_cluster = timed(cli, on, "cluster, cold")
        warm, on_warm = timed(cli, on, "cluster, warm")
        solver = solve_on(cli, cluster.up["address"], work / "front.json")
    one_again, _ = timed(cli, simulate, "one process again")
    load_after = os.getloadavg()
    one = statistics.fmean([one_first, one_again])
    runs = here["runs"]
    result = {
        "workload": f"themis1, {args.num_jobs} jobs, load 0.9, {args.gpus} GPUs, predictions on",
        "policies": args.policies.split(","), "seeds": [int(s) for s in args.seeds.split(",")],
        "combinations": len(runs),
        "cluster": {"nodes": args.nodes, "ray_cpus": args.nodes * args.cpus_per_node, "up_s": round(up_s, 1)},
        "machine_cpus": os.cpu_count(),
        "wall_one_process_s": [round(one_first, 2), round(one_again, 2)],
        "wall_cluster_cold_s": round(cold, 2),
        "wall_cluster_warm_s": round(warm, 2),
        "ratio_cold": round(one / cold, 2),
        "ratio_warm": round(one / warm, 2),
        "run_wall_sum_s": {"one_process": round(sum(r["wall_s"] for r in runs), 2),
                           "cluster_warm": round(sum(r["wall_s"] for r in on_warm["runs"]), 2)},
        "solver_on_cluster": solver,
        "identical": without_wall(here) == without_wall(on_cluster) == without_wall(on_warm),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in load_after],
        "bound": f"at most {min(os.cpu_count() or 1, args.nodes * args.cpus_per_node)}x: this machine's cores "
                 "and the cluster's Ray CPUs",
        "down": cluster.down,
    }
    print(strict_json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
