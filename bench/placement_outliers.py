"""Why variability-aware placement can lose to Packed-Sticky under PCS on themis1; prints one JSON object.

PCS (pcs-bal) on themis1 (500 jobs, 64 GPUs, 16 nodes x 4, linear speedups,
no locality penalty) with Longhorn variability: every placement, on several
profile draws (``--profile-seed``), measured side by side:

* average JCT (and its ratio to Packed-Sticky), average and p99 prediction
  error (the first ``--predict-seeds`` draws; the others run without
  predictions);
* migrations per job (same count, other GPUs), the GPU-time-weighted
  slowdown jobs ran at, and the share of GPU-time lost to slowdowns;
* the worst GPU: the share of the run it was busy, the mean size of the job
  holding it (time-weighted), and the share of the GPU-time lost by jobs
  slower than the median GPU that jobs holding it lost. A synchronous job runs at its slowest GPU's pace, so one
  bad GPU costs as many GPU-seconds as its job has GPUs;
* the same draw with the worst GPU's score capped at the second worst
  (``capped_seed0``, without predictions): what the placements do without that one GPU.

``philly``: the same placements on a Philly VC (``--philly``, per-model
speedups, 64 GPUs; its first ``--philly-jobs``) with predictions, profile draw 0 (the
variability-aware placements without energy: forward plays that re-place every running job at every
event are slow on a long backlog). ``sia``: the seven
Sia-Philly traces (FIFO, penalty 1.7, two draws) under both semantics, where
PAL's paper evaluates: geomean average JCT over Packed-Sticky, to show what
the ``-sized`` order costs where jobs are small and rigid.

Usage: ``python bench/placement_outliers.py [themis1|philly|sia|all] [--seeds N] [--predict-seeds N]
[--philly NAME] [--philly-jobs N]``.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from pcs_ray.api import strict_json
from pcs_ray.cluster import ClusterSpec, NodeSpec
from pcs_ray.data import data_dir, resolve
from pcs_ray.sim.metrics import summarize
from pcs_ray.placement import create_placement
from pcs_ray.variability.profiles import apply_profile, load_profile
from pcs_ray.policies import build_policy
from pcs_ray.power.profile import load_power_profile
from pcs_ray.sim.semantics import with_semantics
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.generator import generate_workload
from pcs_ray.workloads.traces import read_sia_philly, read_trace
from common import log

PLACEMENTS = ["packed-sticky", "packed-nonsticky", "pm-first", "pal", "combined", "energy", "combined-sized",
              "energy-sized"]
PHILLY_PLACEMENTS = ["packed-sticky", "pm-first", "combined", "combined-sized"]
SIA_PLACEMENTS = ["packed-sticky", "pal", "combined", "combined-sized"]


class Ledger:
    """Wraps a placement; integrates, per placed interval, GPUs x time, slowdown, and who holds ``worst``."""

    def __init__(self, inner, worst: int) -> None:
        self.inner, self.worst = inner, worst
        self.open: dict[int, tuple[float, tuple[int, ...], float]] = {}
        self.gpu_time = self.lost = self.slowed = self.slowed_on_worst = self.worst_time = self.worst_size_time = 0.0
        self.moves = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _close(self, jid: int, now: float) -> None:
        held = self.open.pop(jid, None)
        if held is None:
            return
        t0, gpus, slowdown = held
        dt, n = max(0.0, now - t0), len(gpus)
        lost = n * dt * (1.0 - 1.0 / slowdown)  # negative on GPUs faster than the median
        self.gpu_time += n * dt
        self.lost += lost
        self.slowed += max(lost, 0.0)
        if self.worst in gpus:
            self.worst_time += dt
            self.worst_size_time += n * dt
            self.slowed_on_worst += max(lost, 0.0)

    def place(self, snap, changed, alloc=None, settle=None):
        touched = self.inner.place(snap, changed, alloc, settle)
        for job in touched:
            jid = job.spec.job_id
            before = self.open.get(jid)
            if before and job.gpus and len(before[1]) == len(job.gpus) and set(before[1]) != set(job.gpus):
                self.moves += 1
            self._close(jid, snap.now)
            if job.gpus:
                self.open[jid] = (snap.now, tuple(job.gpus), job.slowdown)
        return touched

    def release(self, job) -> None:
        self._close(job.spec.job_id, job.anchor)
        self.inner.release(job)

    def fork(self):
        return self.inner.fork()


def capped(cluster: ClusterSpec, job_class: str, cap: float) -> ClusterSpec:
    """``cluster`` with every ``job_class`` score above ``cap`` lowered to it."""
    nodes = [NodeSpec(name=n.name, topology=n.topology, gpus=[
        g.model_copy(update={"scores": {c: min(v, cap) if c == job_class else v for c, v in g.scores.items()}})
        for g in n.gpus]) for n in cluster.nodes]
    return ClusterSpec(nodes=nodes, locality_penalty=cluster.locality_penalty)


def cluster_for(seed: int, penalty: float = 1.0) -> ClusterSpec:
    spec = apply_profile(ClusterSpec.homogeneous(64, 4, penalty), load_profile("longhorn"), seed)
    return load_power_profile("longhorn").sample(spec, seed).onto(spec)  # power only steers energy placements


def run_placements(jobs, cluster: ClusterSpec, seed: int, predict: bool, placements) -> dict:
    job_class = jobs[0].job_class
    raw = create_placement("packed-sticky", cluster).raw_scores(job_class)
    worst = int(np.argmax(raw))
    rows = {}
    for name in placements:
        ledger = Ledger(create_placement(name, cluster, seed=seed), worst)
        started = time.perf_counter()
        result = simulate(jobs, cluster.num_gpus, build_policy("pcs-bal"), placement=ledger, predict=predict)
        s = summarize(result)
        end = max(r.finish for r in result.records)
        rows[name] = {
            "avg_jct_s": s["avg_jct"], "avg_pred_err": s["avg_pred_err"], "p99_pred_err": s["p99_pred_err"],
            "utilization": s["utilization"], "migrations_per_job": ledger.moves / len(jobs),
            "gpu_time_weighted_slowdown": ledger.gpu_time / max(ledger.gpu_time - ledger.lost, 1e-9),
            "gpu_time_lost_share": ledger.lost / ledger.gpu_time,  # net of jobs on faster-than-median GPUs
            "worst_gpu_busy_share": ledger.worst_time / end,
            "worst_gpu_mean_job_size": ledger.worst_size_time / max(ledger.worst_time, 1e-9),
            "slowed_share_on_worst_gpu_jobs": ledger.slowed_on_worst / max(ledger.slowed, 1e-9),
            "wall_s": time.perf_counter() - started,
        }
        log(f"  {name}: avg JCT {s['avg_jct']:.0f} s, pred err {s['avg_pred_err']}, "
            f"worst GPU in jobs of {rows[name]['worst_gpu_mean_job_size']:.1f} GPUs ({rows[name]['wall_s']:.0f} s)")
    base = rows["packed-sticky"]["avg_jct_s"]
    for row in rows.values():
        row["avg_jct_vs_packed_sticky"] = row["avg_jct_s"] / base
    top = np.sort(raw)[::-1]
    return {"worst_gpu": worst, "worst_score": float(top[0]), "second_worst_score": float(top[1]), "placements": rows}


def themis1(seeds: int, predict_seeds: int) -> dict:
    jobs = generate_workload("themis1", 500, 64, load=0.9, seed=4567)
    out: dict = {"setup": {"workload": "themis1", "jobs": 500, "load": 0.9, "seed": 4567, "gpus": 64, "gpus_per_node": 4,
                           "policy": "pcs-bal", "profile": "longhorn", "locality_penalty": 1.0, "overhead_s": 0.0,
                           "job_classes": sorted({j.job_class for j in jobs})},
                 "per_profile_seed": {}}
    for seed in range(seeds):
        log(f"themis1, profile seed {seed}")
        cluster = cluster_for(seed)
        draw = out["per_profile_seed"][seed] = run_placements(jobs, cluster, seed, seed < predict_seeds, PLACEMENTS)
        if seed == 0:
            log("themis1, profile seed 0, worst GPU capped at the second worst")
            out["capped_seed0"] = run_placements(jobs, capped(cluster, "A", draw["second_worst_score"]), 0, False,
                                                 PLACEMENTS)
    out["geomean_avg_jct_vs_packed_sticky"] = {name: math.exp(np.mean([
        math.log(d["placements"][name]["avg_jct_vs_packed_sticky"]) for d in out["per_profile_seed"].values()]))
        for name in PLACEMENTS}
    return out


def philly(trace: str, first: int | None) -> dict:
    jobs = read_trace(resolve("trace", trace), speedup="model")
    jobs = jobs[:first] if first else jobs  # forward plays of non-sticky placements over a long backlog are slow
    log(f"philly {trace}: {len(jobs)} jobs")
    return {"setup": {"trace": trace, "jobs": len(jobs), "first_jobs_only": bool(first), "gpus": 64, "gpus_per_node": 4, "policy": "pcs-bal",
                      "profile": "longhorn", "profile_seed": 0, "speedup": "model",
                      "job_classes": sorted({j.job_class for j in jobs})},
            **run_placements(jobs, cluster_for(0), 0, True, PHILLY_PLACEMENTS)}


def sia() -> dict:
    traces = {k: read_sia_philly(data_dir() / "pal" / "sia-philly" / f"workload-{k}.csv") for k in range(1, 8)}
    out = {"setup": {"traces": 7, "gpus": 64, "gpus_per_node": 4, "policy": "fifo", "locality_penalty": 1.7,
                     "profile_seeds": [0, 1]}, "geomean_avg_jct_vs_packed_sticky": {}}
    for semantics in ("continuous", "blox"):
        acc: dict[str, dict[int, list[float]]] = {}
        for seed in range(2):
            cluster = apply_profile(ClusterSpec.homogeneous(64, 4, 1.7), load_profile("longhorn"), seed)
            for k, jobs in traces.items():
                for name in SIA_PLACEMENTS:
                    result = simulate(jobs, 64, with_semantics(build_policy("fifo"), semantics),
                                      placement=create_placement(name, cluster, seed=seed), predict=False)
                    acc.setdefault(name, {}).setdefault(k, []).append(float(np.mean([r.jct for r in result.records])))
        base = {k: np.mean(v) for k, v in acc["packed-sticky"].items()}
        out["geomean_avg_jct_vs_packed_sticky"][semantics] = {
            name: math.exp(np.mean([math.log(np.mean(v) / base[k]) for k, v in d.items()])) for name, d in acc.items()}
        log(f"sia [{semantics}]: {out['geomean_avg_jct_vs_packed_sticky'][semantics]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="all", choices=["themis1", "philly", "sia", "all"])
    ap.add_argument("--seeds", type=int, default=6, help="profile draws on themis1")
    ap.add_argument("--predict-seeds", type=int, default=1, help="of which the first N run with predictions")
    ap.add_argument("--philly", default="philly/0e4a51", help="the Philly VC trace")
    ap.add_argument("--philly-jobs", type=int, default=600, help="its first N jobs (0: all)")
    args = ap.parse_args()
    out: dict = {}
    if args.what in ("themis1", "all"):
        out["themis1"] = themis1(args.seeds, args.predict_seeds)
    if args.what in ("philly", "all"):
        out["philly"] = philly(args.philly, args.philly_jobs)
    if args.what in ("sia", "all"):
        out["sia"] = sia()
    print(strict_json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
