"""Placement speed; prints one JSON object.

1. Per-round latency of ``place()`` for PAL, PM-First, MAPA-Preserve and the
   combined policy on 64, 256, 1,024 and 4,096 GPUs with a full queue. Jobs
   are drawn from the Sia-Philly traces' sizes and models (classes, bandwidth
   sensitivity), FIFO-filled until no queued job fits. Each measured round
   finishes 10% of the running jobs and starts queued ones in their place,
   then calls ``place`` with the new allocation (non-sticky policies re-place
   every running job; sticky ones only the new). PAL and PM-First run on
   4-GPU nodes (the paper's setting), MAPA-Preserve and combined on 8-GPU
   DGX-1 V100 nodes; Longhorn variability throughout. The first (cold)
   round, which places every job from an empty cluster, is reported apart.
2. MAPA matching: one ``select`` for a job of 2..8 GPUs on an 8-GPU DGX-1
   V100 and a 16-GPU DGX-2 node, with random GPUs busy (enough left free),
   after the node's subset tables are built (their one-time cost is reported too),
   and for comparison the same matching with networkx's VF2 (every embedding enumerated and scored).

Usage: ``python bench/placement_speed.py [--rounds N] [--sizes 64,256,...]``.
Timings are wall-clock on a shared machine; other work running at the same time adds noise.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from pcs_ray.api import strict_json
from pcs_ray.cluster import ClusterSpec
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.data import data_dir
from pcs_ray.placement import create_placement, read_topo
from pcs_ray.placement.bandwidth import default_regression, subset_table
from pcs_ray.variability.profiles import apply_profile, load_profile
from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.workloads.traces import read_sia_philly
from common import log

DATA = data_dir()
TOPO = DATA / "topology"
SETUPS = {  # placement -> (GPUs per node, topology file or None)
    "pal": (4, None),
    "pm-first": (4, None),
    "mapa-preserve": (8, "dgx1-v100.topo"),
    "combined": (8, "dgx1-v100.topo"),
}


def job_pool() -> list[JobSpec]:
    return [j for k in range(1, 8) for j in read_sia_philly(DATA / "pal" / "sia-philly" / f"workload-{k}.csv")]


class Queue:
    """Active jobs in FIFO order and the allocation a rigid FIFO gives them."""

    def __init__(self, pool: list[JobSpec], capacity: int, rng: random.Random) -> None:
        self.pool, self.capacity, self.rng = [j for j in pool if j.max_gpus <= capacity], capacity, rng
        self.jobs: list[JobState] = []
        self.next_id = 0
        self.top_up()

    def draw(self) -> JobState:
        spec = self.rng.choice(self.pool)
        n = spec.max_gpus
        spec = JobSpec(self.next_id, 0.0, spec.service, n, linear_speedup(n), min_gpus=n, model=spec.model,
                       job_class=spec.job_class, bw_sensitive=spec.bw_sensitive, pattern="ring")
        self.next_id += 1
        return JobState.new(spec)

    def top_up(self) -> None:
        """Keep queued demand at least the cluster size beyond what runs (a full queue)."""
        while sum(j.spec.max_gpus for j in self.jobs if not j.alloc) < self.capacity:
            self.jobs.append(self.draw())

    def allocate(self) -> tuple[dict[int, int], list[JobState]]:
        alloc, free, changed = {}, self.capacity, []
        for job in self.jobs:
            n = job.spec.max_gpus
            if n <= free:
                alloc[job.spec.job_id] = n
                free -= n
        for job in self.jobs:
            n = alloc.get(job.spec.job_id, 0)
            if job.alloc != n:
                job.alloc = n
                changed.append(job)
        return alloc, changed


def rounds(placement_name: str, gpus: int, num_rounds: int, seed: int = 0) -> dict:
    per_node, topo_file = SETUPS[placement_name]
    cluster = apply_profile(ClusterSpec.homogeneous(gpus, per_node, 1.7), load_profile("longhorn"), seed)
    topo = read_topo(TOPO / topo_file) if topo_file else None
    built = time.perf_counter()
    placement = create_placement(placement_name, cluster, seed=seed, topology=topo)
    build_s = time.perf_counter() - built
    rng = random.Random(seed)
    queue = Queue(job_pool(), gpus, rng)
    alloc, changed = queue.allocate()
    t0 = time.perf_counter()
    placement.place(Snapshot(0.0, gpus, queue.jobs), changed, alloc)
    cold = time.perf_counter() - t0
    times = []
    for r in range(num_rounds):
        running = [j for j in queue.jobs if j.alloc]
        for job in rng.sample(running, max(1, len(running) // 10)):
            placement.release(job)
            job.alloc = 0
            queue.jobs.remove(job)
        queue.top_up()
        alloc, changed = queue.allocate()
        t0 = time.perf_counter()
        placement.place(Snapshot(float(r + 1), gpus, queue.jobs), changed, alloc)
        times.append(time.perf_counter() - t0)
    ms = np.asarray(times) * 1e3
    running = sum(1 for j in queue.jobs if j.alloc)
    return {"placement": placement_name, "gpus": gpus, "gpus_per_node": per_node, "topology": topo_file,
            "running_jobs": running, "queued_jobs": len(queue.jobs) - running, "rounds": num_rounds,
            "median_ms": round(float(np.median(ms)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "cold_round_ms": round(cold * 1e3, 3), "build_s": round(build_s, 3)}


def matching(topo_file: str, sizes=range(2, 9), trials: int = 300, seed: int = 0) -> dict:
    topo = read_topo(TOPO / topo_file)
    cluster = ClusterSpec.homogeneous(topo.size, topo.size, 1.0)
    placement = create_placement("mapa-preserve", cluster, topology=topo)
    reg = default_regression()
    rng = np.random.default_rng(seed)
    out = {"topology": topo_file, "gpus": topo.size, "per_size": {}}
    for n in sizes:
        t0 = time.perf_counter()
        subset_table(topo, n, "ring", reg)
        table_s = time.perf_counter() - t0
        times = []
        for k in range(trials):
            busy = rng.random(topo.size) < rng.uniform(0.0, 0.5)
            free = ~busy
            if free.sum() < n:
                free[rng.permutation(np.flatnonzero(busy))[: n - int(free.sum())]] = True
            spec = JobSpec(k, 0.0, 1.0, n, linear_speedup(n), min_gpus=n, bw_sensitive=bool(k % 2), pattern="ring")
            job = JobState.new(spec)
            t0 = time.perf_counter()
            placement.select(job, n, free, ())
            times.append(time.perf_counter() - t0)
        ms = np.asarray(times) * 1e3
        out["per_size"][n] = {"median_ms": round(float(np.median(ms)), 4), "p99_ms": round(float(np.percentile(ms, 99)), 4),
                              "table_build_s": round(table_s, 4)}
    out["median_ms_all_sizes"] = round(float(np.median([v["median_ms"] for v in out["per_size"].values()])), 4)
    out["max_median_ms"] = max(v["median_ms"] for v in out["per_size"].values())
    return out


def vf2_matching(topo_file: str, sizes=range(2, 6), trials: int = 10, seed: int = 0) -> dict:
    """The same matching done MAPA's way for comparison: enumerate every embedding of the ring
    in the free part of the hardware graph with networkx's VF2 and score each one."""
    import networkx as nx
    from networkx.algorithms import isomorphism

    from pcs_ray.placement.bandwidth import pattern_edges
    from pcs_ray.cluster.topology import hardware_graph

    topo = read_topo(TOPO / topo_file)
    hw = hardware_graph(topo)
    reg = default_regression()
    rng = np.random.default_rng(seed)
    out = {"topology": topo_file, "per_size": {}}
    for n in sizes:
        pattern = nx.Graph(pattern_edges("ring", n))
        times, embeddings = [], []
        for _ in range(trials):
            free = [v for v in hw.nodes if rng.random() > 0.25]
            if len(free) < n:
                free = list(hw.nodes)
            t0 = time.perf_counter()
            best, count = -np.inf, 0
            matcher = isomorphism.GraphMatcher(hw.subgraph(free), pattern)
            for mapping in matcher.subgraph_monomorphisms_iter():
                inv = {p: h for h, p in mapping.items()}
                kinds = [min(hw[inv[a]][inv[b]]["nvlinks"], 2) for a, b in pattern.edges]
                best = max(best, float(reg.predict(kinds.count(2), kinds.count(1), kinds.count(0))))
                count += 1
            times.append(time.perf_counter() - t0)
            embeddings.append(count)
        out["per_size"][n] = {"median_ms": round(float(np.median(times)) * 1e3, 3),
                              "median_embeddings": int(np.median(embeddings))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--sizes", default="64,256,1024,4096")
    ap.add_argument("--placements", default=",".join(SETUPS))
    args = ap.parse_args()
    started = time.perf_counter()
    report: dict = {"rounds": [], "matching": []}
    for name in args.placements.split(","):
        for gpus in [int(s) for s in args.sizes.split(",")]:
            row = rounds(name, gpus, args.rounds)
            log(f"{name} {gpus} GPUs: median {row['median_ms']} ms, p99 {row['p99_ms']} ms "
                f"({row['running_jobs']} running, cold {row['cold_round_ms']} ms)")
            report["rounds"].append(row)
    for topo_file in ("dgx1-v100.topo", "dgx2.topo"):
        row = matching(topo_file)
        log(f"matching {topo_file}: " + ", ".join(f"{n}: {v['median_ms']} ms" for n, v in row["per_size"].items()))
        report["matching"].append(row)
    row = vf2_matching("dgx1-v100.topo")
    log("networkx VF2 matching dgx1-v100.topo: " + ", ".join(f"{n}: {v['median_ms']} ms" for n, v in row["per_size"].items()))
    report["vf2_matching_for_comparison"] = row
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["note"] = "wall-clock on a shared 2-core machine; concurrent work by others adds noise"
    print(strict_json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
