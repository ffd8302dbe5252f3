"""Energy experiments (VAHRM paper and issue 14's targets); prints one JSON object.

* ``models``: TSMVA vs single-stage power models on the Longhorn records,
  MAPE (mean over applications) on held-out runs and held-out GPUs
  (``pcs_ray.power.tsmva.evaluate``), beside the paper's Table VI / Fig. 5.
* ``mixes``: the nine workloads of ``pcs_ray.workloads.energy`` (Philly VC 0e4a51,
  2,465 jobs, SR 1) on 96 Longhorn-like GPUs (24 nodes x 4: the trace's
  nominal load is 59 GPUs, 0.61 of 96, before variability slowdowns; variability
  profile and power profile ``longhorn`` sampled with the same seed, PCR 1:
  budget = summed TDP). Policies: VU/CVA/CGVA-FCFS with and without EASY
  backfilling (each on the placement the paper pairs it with), VAHRM+TSMVA
  (GPUs and priorities from the held-out TSMVA predictions), VAHRM+IDEAL
  (from the true power) and VAHRM with E in kWh (``vahrm-kwh``,
  ``energy_unit="kWh"``: the paper's beta then weighs waiting time almost
  alone; the paper does not give E's unit). Energy efficiency = jobs per kWh
  (system energy: busy GPUs at their job's true power, idle GPUs at 60 W, over
  the run). Each run also gives its utilisation and the share of its jobs that
  waited longer than VAHRM's one-week cap (``waited_over_cap_share``: the
  paper's §III-B premise is that none do), and ``setup.power_seed0`` the power
  spread per class on the cluster and how well TSMVA's predictions rank the
  GPUs (correlation of predicted and true power). Figures sit beside the
  paper's (+4.5 % jobs/kWh over VU-FCFS; -21.2 % turnaround against the FCFS
  baselines without backfilling, -11.9 % against those with it, §VI-C).
* ``philly``: the same policies and cluster on the Philly VC itself (the
  trace's own jobs and classes, no mix).
* ``pcs``: PCS (themis1's balanced configuration) with the energy placement
  (deciding on TSMVA's held-out predictions, and on the true power:
  ``energy+ideal``) against PCS with packed placement, on the themis1 workload
  (500 jobs, load 0.9, seed 4567), 64 GPUs (16 x 4), Longhorn power profile;
  with and without the Longhorn variability profile; each run's utilisation,
  the share of its busy GPU-time with every GPU busy (placement has no choice
  then), and the power spread and prediction quality per class.
* ``decision``: VAHRM's allocate (Steps 1-9 on per-GPU predictions) + its placement with 2,000 queued
  jobs on 2,160 GPUs (540 nodes x 4, the paper's system), 95 % busy, per
  decision (a later decision on the same queue; the first one, which also
  computes every job's predicted energy once, is reported beside it).
* ``errors``: the one-line CLI errors for an unknown power profile, a
  negative power budget and a malformed power CSV.

Usage: ``python bench/energy_experiments.py [models|mixes|philly|pcs|decision|errors|all] [--seeds N] [--pcr X] [--sr X]``.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pcs_ray.api import strict_json
from pcs_ray.cluster import ClusterSpec
from pcs_ray.data import locate
from pcs_ray.sim.metrics import summarize
from pcs_ray.placement import create_placement
from pcs_ray.variability.profiles import apply_profile, load_profile
from pcs_ray.policies import build_policy
from pcs_ray.power.meter import EnergyMeter
from pcs_ray.policies.power_aware import WEEK
from pcs_ray.power.profile import load_power_profile
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.energy import MIXES, energy_mix
from pcs_ray.workloads.traces import read_trace
from common import log

BASELINES = ("vu-fcfs", "vu-fcfs-b", "cva-fcfs", "cva-fcfs-b", "cgva-fcfs", "cgva-fcfs-b")


def cluster(gpus: int, per_node: int, seed: int, variability: bool = True):
    """The cluster with variability scores (seeded) and its sampled power (same seed)."""
    spec = ClusterSpec.homogeneous(gpus, per_node)
    if variability:
        spec = apply_profile(spec, load_profile("longhorn"), seed)
    power = load_power_profile("longhorn").sample(spec, seed)
    return spec, power


def run_models(seed: int) -> dict:
    from pcs_ray.power.records import from_longhorn
    from pcs_ray.power.tsmva import PAPER_MAPE, evaluate

    started = time.perf_counter()
    out = evaluate(from_longhorn(), seed)
    table = {split: {m: round(v["mean"], 2) for m, v in res.items() if isinstance(v, dict) and "mean" in v}
             for split, res in out.items()}
    return {
        "mape_mean_over_apps": table, "detail": out, "paper": PAPER_MAPE,
        "wall_s": time.perf_counter() - started,
    }


def one_run(jobs, name: str, spec, power, seed: int, pcr: float, ideal: bool = False, **extra) -> dict:
    gp = power.ideal() if ideal else power
    decided = gp.onto(spec)
    class_w = {c: float(np.mean(v)) for c, v in gp.predicted.items()}
    kw = {"gpu_power": gp.predicted, "idle_w": gp.idle_w, **({"seed": seed} if name == "vahrm" else {})}
    policy = build_policy(name, power=class_w, tdp_w=gp.tdp_w, budget_w=pcr * gp.summed_tdp_w(), **kw, **extra)
    placement = create_placement(policy.placement, decided, seed=seed)
    meter = EnergyMeter(power, spec.num_gpus)  # charged at the true power, whatever was predicted
    result = simulate(jobs, spec.num_gpus, policy, predict=False, placement=placement, energy=meter)
    s = summarize(result)
    e = result.extra["energy"]
    return {"avg_turnaround": s["avg_jct"], "makespan": s["makespan"], "throughput_jobs_per_h": len(jobs) / s["makespan"] * 3600,
            "kwh": e["kwh"], "jobs_per_kwh": e["jobs_per_kwh"], "avg_kw": e["avg_kw"], "peak_kw": e["peak_kw"],
            "utilization": s["utilization"], "waited_over_cap_share": waited_over(result, WEEK), "wall_s": result.wall_s}


def waited_over(result, cap: float) -> float:
    """The share of jobs that waited longer than ``cap`` seconds before they started."""
    return sum(1 for r in result.records if r.start - r.submit > cap) / len(result.records)


def power_facts(power) -> dict:
    """Per class on the simulated cluster: the true power's spread (CV) and how well the predictions rank it."""
    return {c: {"mean_w": float(v.mean()), "cv": float(v.std() / v.mean()),
                "corr_predicted_true": float(np.corrcoef(v, power.predicted[c])[0, 1])} for c, v in power.true.items()}


RUNS = [*BASELINES, "vahrm", "vahrm+ideal", "vahrm-kwh"]
#: the paper's figures for VAHRM+TSMVA (§VI-C, PCR 1, SR 1): jobs/kWh over VU-FCFS, and turnaround against the
#: FCFS baselines without and with backfilling
PAPER = {"efficiency_gain_vs_vu_fcfs_pct_avg": 4.5, "turnaround_change_vs_no_backfill_pct_avg": -21.2,
         "turnaround_change_vs_backfill_pct_avg": -11.9}


def runs_on(jobs, spec, power, seed: int, pcr: float) -> dict[str, dict]:
    """Every policy of ``RUNS`` on one workload."""
    out = {}
    for r in RUNS:
        if r == "vahrm-kwh":
            out[r] = one_run(jobs, "vahrm", spec, power, seed, pcr, energy_unit="kWh")
            continue
        out[r] = one_run(jobs, r.split("+")[0], spec, power, seed, pcr, r.endswith("+ideal"))
    return out


def versus(mean: dict[str, dict]) -> dict:
    """VAHRM against each baseline: jobs/kWh and average turnaround, % change."""
    v = mean["vahrm"]
    return {b: {"jobs_per_kwh_change_pct": 100 * (v["jobs_per_kwh"] / mean[b]["jobs_per_kwh"] - 1),
                "turnaround_change_pct": 100 * (v["avg_turnaround"] / mean[b]["avg_turnaround"] - 1)} for b in BASELINES}


def run_philly(pcr: float, trace: str, gpus: int) -> dict:
    jobs = read_trace(locate("trace", trace))
    spec, power = cluster(gpus, 4, 0)
    res = runs_on(jobs, spec, power, 0, pcr)
    log("philly: " + ", ".join(f"{r} {m['jobs_per_kwh']:.4f} jobs/kWh {m['avg_turnaround']:.0f} s" for r, m in res.items()))
    return {"setup": {"trace": trace, "jobs": len(jobs), "gpus": gpus, "gpus_per_node": 4, "pcr": pcr,
                      "classes": sorted({j.job_class for j in jobs})},
            "runs": res, "vahrm_vs": versus(res), "paper": PAPER,
            "waited_over_cap_share": {r: m["waited_over_cap_share"] for r, m in res.items()}}


def run_mixes(seeds: int, pcr: float, sr: float, trace: str, gpus: int) -> dict:
    base = read_trace(locate("trace", trace))
    runs = RUNS
    per_mix = {}
    for mix in sorted(MIXES):
        res: dict[str, list[dict]] = {r: [] for r in runs}
        for seed in range(seeds):
            spec, power = cluster(gpus, 4, seed)
            jobs = energy_mix(base, mix, sr=sr, seed=seed)
            for r, m in runs_on(jobs, spec, power, seed, pcr).items():
                res[r].append(m)
            log(f"mix {mix} seed {seed}: " + ", ".join(f"{r} {res[r][-1]['jobs_per_kwh']:.3f}" for r in runs))
        mean = {r: {k: float(np.mean([x[k] for x in v])) for k in v[0]} for r, v in res.items()}
        vu, vub = mean["vu-fcfs"], mean["vu-fcfs-b"]
        per_mix[mix] = {
            "mix": {"ratio_resnet_to_level": list(MIXES[mix][0]), "level": MIXES[mix][1]},
            "runs": mean,
            "efficiency_gain_vs_vu_fcfs_pct": {r: 100 * (m["jobs_per_kwh"] / vu["jobs_per_kwh"] - 1) for r, m in mean.items()},
            "turnaround_vs_vu_fcfs_b": {r: m["avg_turnaround"] / vub["avg_turnaround"] for r, m in mean.items()},
            "turnaround_vs_vu_fcfs": {r: m["avg_turnaround"] / vu["avg_turnaround"] for r, m in mean.items()},
            "throughput_vs_vu_fcfs": {r: m["throughput_jobs_per_h"] / vu["throughput_jobs_per_h"] for r, m in mean.items()},
            "vahrm_vs": versus(mean),
        }
    avg = lambda key, r: float(np.mean([m[key][r] for m in per_mix.values()]))  # noqa: E731
    summary = {r: {"efficiency_gain_vs_vu_fcfs_pct_avg": avg("efficiency_gain_vs_vu_fcfs_pct", r),
                   "efficiency_gain_vs_vu_fcfs_pct_max": float(max(m["efficiency_gain_vs_vu_fcfs_pct"][r] for m in per_mix.values())),
                   "turnaround_vs_vu_fcfs_b_avg": avg("turnaround_vs_vu_fcfs_b", r),
                   "turnaround_vs_vu_fcfs_avg": avg("turnaround_vs_vu_fcfs", r),
                   "throughput_vs_vu_fcfs_avg": avg("throughput_vs_vu_fcfs", r)} for r in runs}
    v = summary["vahrm"]
    vs = {b: {k: float(np.mean([m["vahrm_vs"][b][k] for m in per_mix.values()])) for k in
              ("jobs_per_kwh_change_pct", "turnaround_change_pct")} for b in BASELINES}
    strict, easy = [b for b in BASELINES if not b.endswith("-b")], [b for b in BASELINES if b.endswith("-b")]
    return {
        "setup": {"trace": trace, "jobs": len(base), "gpus": gpus, "gpus_per_node": 4, "seeds": seeds, "sr": sr, "pcr": pcr,
                  "profiles": "longhorn (variability and power)", "idle_w": 60, "tdp_w": 300,
                  "power_seed0": power_facts(cluster(gpus, 4, 0)[1])},
        "summary": summary,
        "vahrm_vs_avg_over_mixes": vs,
        "vahrm_beside_paper": {
            "measured": {"efficiency_gain_vs_vu_fcfs_pct_avg": v["efficiency_gain_vs_vu_fcfs_pct_avg"],
                         "turnaround_change_vs_no_backfill_pct_avg": float(np.mean([vs[b]["turnaround_change_pct"] for b in strict])),
                         "turnaround_change_vs_backfill_pct_avg": float(np.mean([vs[b]["turnaround_change_pct"] for b in easy]))},
            "paper": PAPER},
        "waited_over_cap_share_avg": {r: avg_run(per_mix, r, "waited_over_cap_share") for r in runs},
        "per_mix": per_mix,
    }


def avg_run(per_mix: dict, run: str, key: str) -> float:
    return float(np.mean([m["runs"][run][key] for m in per_mix.values()]))


def run_pcs(seed: int, per_node: int = 4) -> dict:
    from pcs_ray.workloads.generator import generate_workload

    jobs = generate_workload("themis1", 500, 64, load=0.9, seed=4567)
    classes = sorted({j.job_class for j in jobs})
    out = {}
    for variability in (False, True):
        spec, power = cluster(64, per_node, seed, variability)
        res = {}
        for placement in ("packed-sticky", "energy", "energy+ideal", "energy-sized"):
            meter = EnergyMeter(power, 64)
            decided = (power.ideal() if placement.endswith("+ideal") else power).onto(spec)
            placed = create_placement(placement.split("+")[0], decided, seed=seed)
            result = simulate(jobs, 64, build_policy("pcs-bal"), predict=True, placement=placed, energy=meter)
            s = summarize(result)
            res[placement] = {"avg_jct": s["avg_jct"], "avg_pred_err": s["avg_pred_err"], "kwh": result.extra["energy"]["kwh"],
                              "jobs_per_kwh": result.extra["energy"]["jobs_per_kwh"], "utilization": s["utilization"],
                              "busy_share_with_every_gpu_busy": full_share(result), "wall_s": result.wall_s}
            log(f"pcs variability={variability} {placement}: {res[placement]}")
        p = res["packed-sticky"]
        out["with_variability" if variability else "power_only"] = {"runs": res, "power": power_facts(power), **{
            f"{name} vs packed-sticky": {
                "energy_saved_pct": 100 * (1 - e["kwh"] / p["kwh"]),
                "avg_jct_ratio": e["avg_jct"] / p["avg_jct"],
                "avg_pred_err_diff_points": e["avg_pred_err"] - p["avg_pred_err"],
                "target": {"avg_jct_ratio_max_distance_from_1": 0.01, "avg_pred_err_diff_points_max_abs": 1.0},
            } for name, e in res.items() if name != "packed-sticky"}}
    return {"setup": {"workload": "themis1", "jobs": 500, "load": 0.9, "seed": 4567, "gpus": 64, "gpus_per_node": per_node,
                      "policy": "pcs-bal", "power_profile": "longhorn", "profile_seed": seed, "job_classes": classes}, **out}


def full_share(result) -> float:
    """The share of busy GPU-time spent with every GPU busy: placement has no choice then."""
    tl, end = result.utilization_timeline, max(r.finish for r in result.records)
    busy = full = 0.0
    for (t0, n), (t1, _) in zip(tl, tl[1:] + [(end, 0)]):
        d = max(0.0, min(t1, end) - t0)
        busy += n * d
        full += n * d if n >= result.capacity else 0.0
    return full / busy if busy > 0 else 0.0


def run_decision(queued: int = 2000, repeats: int = 30) -> dict:
    from pcs_ray.jobs.spec import JobSpec, linear_speedup
    from pcs_ray.jobs.state import JobState, Snapshot

    spec, power = cluster(2160, 4, 0, variability=False)
    decided = power.onto(spec)
    rng = np.random.default_rng(0)
    classes = ["A", "B", "C", "D"]
    times_alloc, times_total, cold, cpu, cpu_total = [], [], [], [], []
    for r in range(repeats):
        policy = build_policy("vahrm", power={c: float(np.mean(v)) for c, v in power.predicted.items()},
                              gpu_power=power.predicted, idle_w=power.idle_w, seed=r)
        placement = create_placement(policy.placement, decided, seed=r)
        jobs, used = [], 0
        # the cluster nearly full: running jobs hold all but ~5 % of the GPUs
        jid = 0
        while used < 2052:
            n = int(min(rng.choice([1, 2, 4, 8]), 2052 - used))
            j = JobState.new(JobSpec(jid, 0.0, 3600.0 * n, n, linear_speedup(n), n, "m" + classes[jid % 4], classes[jid % 4]))
            j.alloc, j.start_time = n, 0.0
            jobs.append(j)
            used += n
            jid += 1
        placement.place(Snapshot(0.0, 2160, jobs), jobs)
        for k in range(queued):
            n = int(rng.choice([1, 2, 4, 8, 16]))
            jobs.append(JobState.new(JobSpec(jid, float(rng.uniform(0, 3600)), float(rng.uniform(600, 86400)) * n, n,
                                             linear_speedup(n), n, "m" + classes[k % 4], classes[k % 4])))
            jid += 1
        snap = Snapshot(7200.0, 2160, jobs)
        t0 = time.perf_counter()
        policy.allocate(snap)  # the first decision that sees these jobs fills the policy's per-job cache
        cold.append((time.perf_counter() - t0) * 1e3)
        c0 = time.process_time()
        for _ in range(10):
            policy.allocate(snap)
        cpu.append((time.process_time() - c0) * 1e2)  # ms per decision (10 decisions)
        t0, c0 = time.perf_counter(), time.process_time()
        alloc = policy.allocate(snap)  # a later decision: the queue is the same jobs, as between events
        t1 = time.perf_counter()
        started = [j for j in jobs if not j.alloc and alloc.get(j.spec.job_id)]
        for j in started:
            j.alloc = alloc[j.spec.job_id]
        placement.place(snap, started, alloc)
        t2 = time.perf_counter()
        cpu_total.append((time.process_time() - c0) * 1e3)
        times_alloc.append((t1 - t0) * 1e3)
        times_total.append((t2 - t0) * 1e3)
    return {"queued": queued, "gpus": 2160, "free_gpus": 108, "repeats": repeats,
            "first_allocate_ms_median": statistics.median(cold),
            "allocate_cpu_ms_median": statistics.median(cpu),
            "allocate_and_place_cpu_ms_median": statistics.median(cpu_total),
            "allocate_ms_median": statistics.median(times_alloc), "allocate_ms_p90": float(np.percentile(times_alloc, 90)),
            "allocate_and_place_ms_median": statistics.median(times_total),
            "allocate_and_place_ms_p90": float(np.percentile(times_total, 90)),
            "target_ms": 3.0, "paper_ms": 30.0,
            "load_average": os.getloadavg()[0]}


def run_errors() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "telemetry.csv"
        bad.write_text("app,device,power_w\nresnet,gpu0,180\nresnet,gpu1,hot\n")
        cases = {
            "unknown_power_profile": ["simulate", "--power", "nosuch", "--policy", "vahrm", "--num-jobs", "5"],
            "negative_budget": ["simulate", "--power", "longhorn", "--power-budget-kw", "-1", "--num-jobs", "5"],
            "malformed_csv": ["power", "fit", "--data", str(bad), "--out", str(Path(tmp) / "m.json")],
        }
        for name, args in cases.items():
            p = subprocess.run([sys.executable, "-m", "pcs_ray.cli", *args], capture_output=True, text=True)
            out[name] = {"exit": p.returncode, "stderr": p.stderr.strip(), "one_line": len(p.stderr.strip().splitlines()) == 1}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="all", choices=("models", "mixes", "philly", "pcs", "decision", "errors", "all"))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--pcr", type=float, default=1.0)
    ap.add_argument("--sr", type=float, default=1.0)
    ap.add_argument("--trace", default="philly/0e4a51")
    ap.add_argument("--gpus", type=int, default=96, help="GPUs of the mixes' cluster (4 per node)")
    args = ap.parse_args()
    out: dict = {}
    if args.what in ("errors", "all"):
        out["errors"] = run_errors()
    if args.what in ("decision", "all"):
        out["decision"] = run_decision()
    if args.what in ("models", "all"):
        out["models"] = run_models(0)
    if args.what in ("mixes", "all"):
        out["mixes"] = run_mixes(args.seeds, args.pcr, args.sr, args.trace, args.gpus)
    if args.what in ("philly", "all"):
        out["philly"] = run_philly(args.pcr, args.trace, args.gpus)
    if args.what in ("pcs", "all"):
        out["pcs"] = run_pcs(0)
    print(strict_json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
