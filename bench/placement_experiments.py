"""Placement experiments (PAL and MAPA papers, and the combined policy); prints one JSON object.

* ``sia``: the 7 Sia-Philly traces on 64 GPUs (16 nodes x 4), Longhorn
  profiles sampled with several seeds, FIFO/LAS/SRTF, locality penalty
  1.0..3.0. Average JCT per trace, placement and seed; geomean over traces
  of the seed-mean normalised to Packed-Sticky.
* ``dgx1``: MAPA's DGX-1 V100 experiment: 300 jobs of 1-5 GPUs (uniform),
  ring pattern, a uniform mix of the paper's six networks (AlexNet,
  Inception-v3, VGG-16, ResNet-50 bandwidth-sensitive; CaffeNet, GoogleNet
  not), all queued at the start and dispatched in file order as MAPA's
  simulator does (strict FIFO; also with the project's backfilling FIFO),
  one node, identical GPUs. Effective-bandwidth percentiles of sensitive
  jobs (as the paper: 1-GPU jobs at the regression's no-link value; and
  multi-GPU jobs only) and average JCT.
* ``mixed``: the combined policy's case (designed here): the Sia-Philly
  traces on 8 DGX-1 V100 nodes (64 GPUs, 8 per node) with Longhorn
  variability, locality penalty 1.7, ring patterns; bandwidth-sensitive =
  multi-GPU ResNet-50, VGG-19, BERT, GPT-2 (as the trace reader marks them).
  Both variability and links matter here.

* ``pal``: fidelity to the PAL authors' own simulator (Blox): Sia-Philly
  workload-1 on their simulated 64-GPU cluster (profile ``pal-sim64``: the
  artifact's per-GPU draw and bins), FIFO, locality penalty 1.7, every
  placement of the paper under both semantics (``continuous``, ours, and
  ``blox``, theirs), beside the authors' figures; and over the seven traces
  the geomean of PAL / Packed-Sticky under both, beside the paper's -43 %
  (eight traces there; the eighth is not bundled).

``sia`` also runs under both semantics (``--semantics`` picks one).

Usage: ``python bench/placement_experiments.py [sia|dgx1|mixed|pal|all] [--seeds N] [--quick]``.
Progress goes to stderr. Simulations run without predictions and, unless
``--overhead S`` says otherwise, with no cost for migrations and restarts
(the PAL paper counts checkpointing as negligible).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from pcs_ray.api import strict_json
from pcs_ray.cluster import ClusterSpec
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.data import data_dir
from pcs_ray.placement import create_placement, read_topo
from pcs_ray.placement.bandwidth import EffBWRegression
from pcs_ray.variability.profiles import apply_profile, load_profile
from pcs_ray.placement.stats import PlacementLog
from pcs_ray.placement.configure import configure_placement
from pcs_ray.policies import build_policy
from pcs_ray.policies.fifo import FIFOPolicy
from pcs_ray.sim.semantics import SEMANTICS, StrictPriority, with_semantics
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.traces import read_sia_philly
from common import log

DATA = data_dir()
SIA = [DATA / "pal" / "sia-philly" / f"workload-{k}.csv" for k in range(1, 8)]
DGX1 = DATA / "topology" / "dgx1-v100.topo"
SIA_PLACEMENTS = ["packed-sticky", "packed-nonsticky", "random-sticky", "random-nonsticky", "pm-first", "pal",
                  "mapa-preserve", "combined"]
DGX_PLACEMENTS = ["mapa-baseline", "mapa-topo", "mapa-greedy", "mapa-preserve", "pal", "combined"]
MIXED_PLACEMENTS = ["packed-sticky", "pal", "mapa-preserve", "combined"]
MAPA_MODELS = {"alexnet": True, "inception-v3": True, "vgg16": True, "resnet50": True, "caffenet": False,
               "googlenet": False}


def avg_jct(result) -> float:
    return float(np.mean([r.jct for r in result.records]))


def geomean(xs) -> float:
    return float(math.exp(np.mean(np.log(xs))))


OVERHEAD = 0.0  # seconds a migration or restart costs (--overhead)


def run_one(jobs, cluster, policy: str, placement: str, seed: int, semantics: str = "continuous"):
    place = PlacementLog(create_placement(placement, cluster, seed=seed))
    sched = with_semantics(build_policy(policy), semantics)
    res = simulate(jobs, cluster.num_gpus, sched, placement=place, predict=False, overhead=OVERHEAD)
    return res, place


# -- Sia-Philly ------------------------------------------------------------------


def sia(seeds: int, penalties, policies, placements, semantics=("continuous",)) -> dict:
    profile = load_profile("longhorn")
    traces = {p.stem: read_sia_philly(p) for p in SIA}
    out: dict = {"setup": {"gpus": 64, "gpus_per_node": 4, "profile": "longhorn", "seeds": seeds,
                           "traces": list(traces)}, "runs": []}
    for sem in semantics:
        for policy in policies:
            for penalty in penalties:
                _sia_cell(out, traces, profile, seeds, policy, penalty, placements, sem)
    return out


def _sia_cell(out, traces, profile, seeds, policy, penalty, placements, semantics) -> None:
    """One (semantics, policy, penalty) row of ``sia``: every placement on every trace and seed."""
    table: dict[str, dict[str, list[float]]] = {}
    started = time.perf_counter()
    for seed in range(seeds):
        cluster = apply_profile(ClusterSpec.homogeneous(64, 4, penalty), profile, seed)
        for name, jobs in traces.items():
            for placement in placements:
                res, _ = run_one(jobs, cluster, policy, placement, seed, semantics)
                table.setdefault(placement, {}).setdefault(name, []).append(avg_jct(res))
    per_trace = {pl: {t: float(np.mean(v)) for t, v in d.items()} for pl, d in table.items()}
    base = per_trace["packed-sticky"]
    norm = {pl: {t: v / base[t] for t, v in d.items()} for pl, d in per_trace.items()}
    out["runs"].append({
        "semantics": semantics, "policy": policy, "locality_penalty": penalty,
        "geomean_norm_avg_jct": {pl: geomean(list(d.values())) for pl, d in norm.items()},
        "norm_avg_jct_per_trace": {pl: {t: round(v, 4) for t, v in d.items()} for pl, d in norm.items()},
        "avg_jct_s_per_trace": {pl: {t: round(v, 1) for t, v in d.items()} for pl, d in per_trace.items()},
        "avg_jct_s_per_seed": {pl: {t: [round(x, 1) for x in v] for t, v in d.items()}
                               for pl, d in table.items()},
    })
    log(f"sia [{semantics}] {policy} L={penalty}: " + ", ".join(
        f"{pl} {out['runs'][-1]['geomean_norm_avg_jct'][pl]:.3f}" for pl in placements)
        + f" ({time.perf_counter() - started:.0f} s)")


# -- DGX-1 (MAPA) ------------------------------------------------------------------


def mapa_jobs(seed: int, count: int = 300) -> list[JobSpec]:
    """The MAPA job file: uniform 1..5 GPUs, uniform over six networks, queued in order."""
    rng = np.random.default_rng(seed)
    models = list(MAPA_MODELS)
    jobs = []
    for i in range(count):
        n = int(rng.integers(1, 6))
        model = models[int(rng.integers(len(models)))]
        runtime = float(rng.uniform(200.0, 800.0))  # the paper's jobs ran minutes (p75 ~ 500 s)
        jobs.append(JobSpec(job_id=i, submit_time=float(i) * 1e-3, service=runtime * n, max_gpus=n,
                            speedup=linear_speedup(n), min_gpus=n, model=model, pattern="ring",
                            bw_sensitive=MAPA_MODELS[model] and n > 1))
    return jobs


def JobFileFIFO() -> StrictPriority:
    """MAPA's dispatcher: the head of the job file starts when its GPUs are free; nothing overtakes it
    (strict FIFO at every event, no rounds)."""
    return StrictPriority(FIFOPolicy(), round_s=None)


def dgx1_run(placement: str, seed: int, policy: str = "job-file", topo=None):
    """One DGX-1 run: (result, placement log, jobs)."""
    cluster = ClusterSpec.homogeneous(8, 8, 1.0)
    place = PlacementLog(create_placement(placement, cluster, seed=seed, topology=topo or read_topo(DGX1)))
    jobs = mapa_jobs(seed)
    sched = JobFileFIFO() if policy == "job-file" else build_policy(policy)
    return simulate(jobs, 8, sched, placement=place, predict=False, overhead=OVERHEAD), place, jobs


def dgx1(seeds: int, placements, policy: str = "job-file") -> dict:
    """Sensitive-job effective bandwidth as MAPA reports it (1-GPU jobs at the regression's
    no-link value, 12.34 GB/s) and over multi-GPU jobs only, plus average JCT."""
    topo = read_topo(DGX1)
    one_gpu = float(EffBWRegression.from_json().predict(0, 0, 0))
    out: dict = {"setup": {"node": "dgx1-v100", "jobs": 300, "gpus": "1..5", "pattern": "ring",
                           "policy": policy, "seeds": seeds, "one_gpu_effbw": one_gpu}, "runs": {}}
    for placement in placements:
        jct, multi, every = [], [], []
        for seed in range(seeds):
            res, place, jobs = dgx1_run(placement, seed, policy, topo)
            jct.append(avg_jct(res))
            bw = place.job_bandwidth()
            sens = [bw[j.job_id] for j in jobs if j.bw_sensitive]
            ones = [one_gpu for j in jobs if MAPA_MODELS[j.model] and j.max_gpus == 1]
            multi.append(np.percentile(sens, [0, 25, 50, 75, 100]))
            every.append(np.percentile(sens + ones, [0, 25, 50, 75, 100]))
        keys = ("min", "p25", "p50", "p75", "max")
        out["runs"][placement] = {
            "avg_jct_s": float(np.mean(jct)), "avg_jct_s_per_seed": [round(x, 1) for x in jct],
            "sensitive_effbw_gbps_all": dict(zip(keys, np.mean(every, axis=0).round(2).tolist())),
            "sensitive_effbw_gbps_multi_gpu": dict(zip(keys, np.mean(multi, axis=0).round(2).tolist())),
            "p25_all_per_seed": [round(float(e[1]), 2) for e in every],
        }
        log(f"dgx1[{policy}] {placement}: avg JCT {np.mean(jct):.1f} s, sensitive effbw p25 "
            f"{np.mean([e[1] for e in every]):.2f} (all) / {np.mean([m[1] for m in multi]):.2f} (multi-GPU) GB/s")
    return out


# -- mixed (combined) --------------------------------------------------------------


def mixed(seeds: int, placements, penalty: float = 1.7) -> dict:
    topo = read_topo(DGX1)
    profile = load_profile("longhorn")
    traces = {p.stem: read_sia_philly(p) for p in SIA}
    out: dict = {"setup": {"nodes": "8 x dgx1-v100", "gpus": 64, "profile": "longhorn", "locality_penalty": penalty,
                           "policy": "fifo", "seeds": seeds, "workload": "Sia-Philly traces 1-7, ring patterns"},
                 "runs": {}}
    table: dict[str, dict[str, list[float]]] = {}
    effbw: dict[str, list[float]] = {}
    for seed in range(seeds):
        cluster = apply_profile(ClusterSpec.homogeneous(64, 8, penalty), profile, seed)
        for name, jobs in traces.items():
            for placement in placements:
                place = PlacementLog(create_placement(placement, cluster, seed=seed, topology=topo))
                res = simulate(jobs, 64, build_policy("fifo"), placement=place, predict=False, overhead=OVERHEAD)
                table.setdefault(placement, {}).setdefault(name, []).append(avg_jct(res))
                s = place.summary().get("sensitive_effbw_gbps")
                if s:
                    effbw.setdefault(placement, []).append(s["p25"])
        log(f"mixed seed {seed} done")
    per_trace = {pl: {t: float(np.mean(v)) for t, v in d.items()} for pl, d in table.items()}
    base = per_trace["packed-sticky"]
    for pl, d in per_trace.items():
        out["runs"][pl] = {
            "geomean_norm_avg_jct": geomean([v / base[t] for t, v in d.items()]),
            "avg_jct_s_per_trace": {t: round(v, 1) for t, v in d.items()},
            "sensitive_effbw_p25_gbps": float(np.mean(effbw[pl])) if effbw.get(pl) else None,
        }
        log(f"mixed {pl}: geomean {out['runs'][pl]['geomean_norm_avg_jct']:.3f}")
    return out


# -- fidelity to the PAL authors' simulator ----------------------------------------------

#: The PAL authors' Blox simulator on Sia-Philly workload-1 and the paper's geomeans, with their provenance
AUTHORS = json.loads((data_dir() / "pal" / "reference" / "blox-workload-1.json").read_text())
AUTHORS_WORKLOAD1 = AUTHORS["avg_jct_s"]
PAPER_GEOMEAN_PAL = AUTHORS["paper"]["geomean_pal_over_packed_sticky"]


def pal_fidelity(penalty: float = 1.7) -> dict:
    """Both semantics on the artifact's own cluster, beside the authors' figures and targets."""
    traces = {p.stem: read_sia_philly(p) for p in SIA}
    out: dict = {"setup": {"gpus": 64, "gpus_per_node": 4, "profile": "pal-sim64", "policy": "fifo",
                           "locality_penalty": penalty, "semantics": SEMANTICS, "traces": list(traces)},
                 "authors_workload_1_avg_jct_s": AUTHORS_WORKLOAD1, "runs": {}}
    for semantics in SEMANTICS:
        table: dict[str, dict[str, float]] = {}
        for placement in AUTHORS_WORKLOAD1:
            setup = configure_placement(ClusterSpec.homogeneous(64, 4), placement, profile="pal-sim64",
                                        locality_penalty=penalty)
            for name, jobs in traces.items():
                sched = with_semantics(build_policy("fifo"), semantics)
                res = simulate(jobs, 64, sched, placement=setup.new(), predict=False, overhead=OVERHEAD)
                table.setdefault(placement, {})[name] = avg_jct(res)
        w1 = {pl: round(d["workload-1"], 1) for pl, d in table.items()}
        ratio = {t: table["pal"][t] / table["packed-sticky"][t] for t in traces}
        packed, pal = w1["packed-sticky"], w1["pal"]
        run = {
            "workload_1_avg_jct_s": w1,
            "workload_1_vs_authors": {pl: round(v / AUTHORS_WORKLOAD1[pl], 4) for pl, v in w1.items()},
            "workload_1_pal_over_packed_sticky": round(pal / packed, 4),
            "pal_over_packed_sticky_per_trace": {t: round(v, 4) for t, v in ratio.items()},
            "geomean_pal_over_packed_sticky": round(geomean(list(ratio.values())), 4),
            "geomean_pm_first_over_packed_sticky": round(geomean(
                [table["pm-first"][t] / table["packed-sticky"][t] for t in traces]), 4),
            "avg_jct_s_per_trace": {pl: {t: round(v, 1) for t, v in d.items()} for pl, d in table.items()},
        }
        authors_ratio = AUTHORS_WORKLOAD1["pal"] / AUTHORS_WORKLOAD1["packed-sticky"]
        run["beside_the_authors"] = {
            "packed_sticky_s": {"measured": packed, "authors": AUTHORS_WORKLOAD1["packed-sticky"]},
            "pal_s": {"measured": pal, "authors": AUTHORS_WORKLOAD1["pal"]},
            "pal_over_packed_sticky": {"measured": round(pal / packed, 4), "authors": round(authors_ratio, 4)},
            "tolerance": AUTHORS["tolerance"],
        }
        out["runs"][semantics] = run
        log(f"pal [{semantics}]: workload-1 packed-sticky {packed:.0f} s (authors {AUTHORS_WORKLOAD1['packed-sticky']:.0f}), "
            f"pal {pal:.0f} s (authors {AUTHORS_WORKLOAD1['pal']:.0f}), ratio {pal / packed:.3f} ({authors_ratio:.3f}); "
            f"geomean PAL/Packed-S over 7 traces "
            f"{run['geomean_pal_over_packed_sticky']:.3f} (paper {PAPER_GEOMEAN_PAL:.2f} over 8)")
    out["paper_geomean_pal_over_packed_sticky"] = PAPER_GEOMEAN_PAL
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("which", nargs="?", default="all", choices=["sia", "dgx1", "mixed", "pal", "all"])
    ap.add_argument("--semantics", choices=[*SEMANTICS, "both"], default="both", help="semantics of the sia runs")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="FIFO and penalty 1.7 only for sia")
    ap.add_argument("--overhead", type=float, default=0.0, help="seconds each migration or restart costs")
    args = ap.parse_args()
    global OVERHEAD
    OVERHEAD = args.overhead
    started = time.perf_counter()
    report: dict = {}
    if args.which in ("dgx1", "all"):
        report["dgx1"] = dgx1(args.seeds, DGX_PLACEMENTS)
        report["dgx1_backfill"] = dgx1(args.seeds, DGX_PLACEMENTS, policy="fifo")
    if args.which in ("pal", "all"):
        report["pal"] = pal_fidelity()
    if args.which in ("sia", "all"):
        sems = tuple(SEMANTICS) if args.semantics == "both" else (args.semantics,)
        if args.quick:
            report["sia"] = sia(args.seeds, [1.7], ["fifo"], SIA_PLACEMENTS, sems)
        else:
            report["sia"] = sia(args.seeds, [1.7], ["fifo", "las", "srtf"], SIA_PLACEMENTS, sems)
            report["sia_penalty_sweep"] = sia(args.seeds, [1.0, 1.5, 2.0, 2.5, 3.0], ["fifo"],
                                              ["packed-sticky", "pm-first", "pal"], sems)
    if args.which in ("mixed", "all"):
        report["mixed"] = mixed(args.seeds, MIXED_PLACEMENTS)
    report["overhead_s"] = OVERHEAD
    report["wall_s"] = round(time.perf_counter() - started, 1)
    print(strict_json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
