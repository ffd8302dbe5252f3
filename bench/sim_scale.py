"""Simulation at the scale of a large cluster (issue 41): time, memory and placement work against its size.

Each point is ``simulate`` of ``themis1`` apps (load 0.9, seed 4567) under ``pcs-bal`` on ``gpus`` GPUs,
with a placement or none, predictions on or off, run in a child process of its own so that its peak RSS
is its own. Nodes have 8 GPUs; ``mapa-*`` placements run on DGX-1 V100 nodes (``--topology dgx1-v100``,
as ``bench/results_hashes.py`` runs the placements that read links; sizes round down to whole nodes).
Per point: wall and CPU seconds, peak RSS, engine events, forward plays, and the placement work
(``pcs_ray.placement.framework.COUNTERS``): placement calls (every job placed: decided, looked up again,
or kept where it was), decisions computed and the cluster GPUs they read, per call; placement rounds (the
live schedule's and the forward plays', ``Placement.place`` calls or a queue play's own) and the GPUs they
touched. A GPU is *touched* each time its holder changes: a job gains or loses it in a round, or gives it
back when it finishes; a job kept where it was touches nothing, however much work a round spends to find
that out. ``gpus_touched_per_round`` is what an event asks of placement, whatever the cluster's size;
``rounds_per_app`` and ``gpus_touched_per_app`` (rounds, and GPUs touched, over the whole run divided by
its apps) say whether a larger cluster asks for more rounds per app; ``jobs_per_round`` (placement calls per
round) is how many jobs a round walks, kept ones included. A point that runs past ``--cap``
seconds is reported as such. Each point also gives the 1-minute load average before and after it.

Per (placement, predictions) series: the growth exponent of wall time, and of CPU time (the figure to read
on a shared machine), against three measures of work: apps x GPUs; apps x GPUs touched per round; and the
total GPUs touched (apps x GPUs touched per app = rounds x GPUs touched per round). Each is the least-squares
slope of log time on log work over the points that finished; 1 = linear, and time that follows what changed
grows with exponent <= 1 against the GPUs touched. The per-round measure takes every app to ask for as many
rounds on any cluster; the total one counts the rounds each app really asked for, live and in its forward
plays (fewer per app on a larger cluster of this workload, so it is the stricter of the two). ``cpu_us_per_round``
splits the CPU time per round into a fixed part and a part per job the round walks (a least-squares line over the
points; for a placement that re-places every running job): the second is the work that follows the cluster's size
rather than what changed. With the ``none`` series in the same run, a placement's series also gives
``placement_cpu_time_exponent_vs_apps_x_gpus_touched``: the exponent of the CPU time placement added (the ``none``
run's CPU time at the same size subtracted; ``mapa-*``'s whole-node sizes match only where they equal the others').
Three figures read the exponents against the GPUs touched. ``constant_event_cost_exponent_vs_apps_x_gpus_touched``
is the exponent a run whose every event cost the same would show on the per-round measure (its ``events`` in
place of its time): above 1 where rounds touch fewer GPUs on a larger cluster, which no fixed cost per event can
follow. ``constant_round_cost_exponent_vs_total_gpus_touched`` is the same for a fixed cost per placement round
on the total measure. ``cpu_per_event_exponent_vs_gpus`` is the slope of log CPU time per event on log GPUs (0: an
event costs the same on any cluster; per point, ``cpu_us_per_event``).

Usage: ``python bench/sim_scale.py [--gpus 500,2000] [--apps-per-gpu 8] [--placements none,pal]
[--predict on|off|both] [--cap 600]``. Prints one JSON object; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

from common import log

PLACEMENTS = ("none", "pal", "combined", "mapa-preserve")
DGX1 = "dgx1-v100"  # placements that read links run on these nodes


def setup(apps: int, gpus: int, placement: str):
    """A point's jobs, policy and placement (None for ``none``): ``themis1`` at load 0.9, seed 4567, ``pcs-bal``."""
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.data import locate, pcs_config
    from pcs_ray.placement.configure import configure_placement
    from pcs_ray.policies import WFQConfig, WFQPolicy
    from pcs_ray.workloads.generator import generate_workload

    spec = ClusterSpec.homogeneous(gpus, 8)
    place = None
    if placement != "none":
        topology = str(locate("topology", DGX1)) if placement.startswith("mapa") else None
        place = configure_placement(spec, placement, topology=topology).new()
    jobs = generate_workload("themis1", apps, gpus, load=0.9, seed=4567)
    return jobs, WFQPolicy(WFQConfig.load(pcs_config("themis1", "bal"))), place


def run_point(apps: int, gpus: int, placement: str, predict: bool) -> dict:
    """One simulation in this process (the child's side)."""
    from pcs_ray.placement.framework import COUNTERS
    from pcs_ray.sim.run import simulate

    jobs, policy, place = setup(apps, gpus, placement)
    COUNTERS.reset()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(jobs, gpus, policy, predict=predict, placement=place)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    work = COUNTERS.as_dict()
    calls = work["decisions"] + work["reused"] + work["kept"]
    rounds = work["rounds"]
    return {
        "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "events": result.events, "forward_plays": result.predictions,
        "cpu_us_per_event": round(1e6 * cpu / result.events, 1) if result.events else 0.0,
        "placement_calls": calls, **work,
        "gpus_read_per_call": round(work["gpus_read"] / calls, 1) if calls else 0.0,
        "gpus_read_per_decision": round(work["gpus_read"] / work["decisions"], 1) if work["decisions"] else 0.0,
        "gpus_touched_per_round": round(work["gpus_touched"] / rounds, 2) if rounds else 0.0,
        "jobs_per_round": round(calls / rounds, 2) if rounds else 0.0,
        "rounds_per_app": round(rounds / apps, 3),
        "gpus_touched_per_app": round(work["gpus_touched"] / apps, 2),
    }


def point(apps: int, gpus: int, placement: str, predict: bool, cap: float) -> dict:
    """One point in a child process, stopped after ``cap`` seconds."""
    about = {"apps": apps, "gpus": gpus, "placement": placement, "predict": predict,
             "nodes": "dgx1-v100 x8" if placement.startswith("mapa") else "8 GPUs, no topology"}
    cmd = [sys.executable, __file__, "--child", json.dumps([apps, gpus, placement, predict])]
    load = os.getloadavg()[0]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=cap, check=False)
    except subprocess.TimeoutExpired:
        return {**about, "finished": False, "cap_s": cap, "load_avg_1m": round(load, 2)}
    if proc.returncode != 0:
        return {**about, "finished": False, "error": proc.stderr.strip().splitlines()[-1:]}
    return {**about, "finished": True, **json.loads(proc.stdout), "load_avg_1m": round(load, 2),
            "load_avg_1m_after": round(os.getloadavg()[0], 2)}


def line(xy: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares ``(slope, intercept)`` of y on x over ``(x, y)`` pairs; None with fewer than two distinct x."""
    if len({x for x, _ in xy}) < 2:
        return None
    return statistics.linear_regression([x for x, _ in xy], [y for _, y in xy])


def slope(xy: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log y on log x over ``(x, y)`` pairs, rounded; None with fewer than two distinct x."""
    fit = line([(math.log(x), math.log(y)) for x, y in xy])
    return None if fit is None else round(fit[0], 3)


def exponent(points: list[dict], time: str = "wall_s", per_app: str = "gpus") -> float | None:
    """Least-squares slope of log ``time`` (``wall_s``, ``cpu_s``; ``events`` or ``rounds`` for a run whose every
    event or round costs the same) on log (apps x ``per_app``: ``gpus``, ``gpus_touched_per_round`` or
    ``gpus_touched_per_app``) over the finished points."""
    return slope([(p["apps"] * p[per_app], p[time]) for p in points if p.get("finished") and p.get(per_app)])


def event_cost_exponent(points: list[dict]) -> float | None:
    """Least-squares slope of log CPU time per event on log GPUs over the finished points: 0 where an event costs
    the same on any cluster, above 0 where its cost grows with the cluster's size."""
    return slope([(p["gpus"], p["cpu_s"] / p["events"]) for p in points if p.get("finished") and p.get("events")])


def placement_share(points: list[dict], bare: list[dict]) -> list[dict]:
    """``points`` with ``cpu_s`` replaced by what placement added: the CPU seconds of the run without placement at
    the same size (``bare``, the ``none`` series with the same predictions) subtracted. Points without such a run,
    or where placement added nothing measurable, are left out."""
    none_cpu = {p["gpus"]: p["cpu_s"] for p in bare if p.get("finished")}
    return [{**p, "cpu_s": p["cpu_s"] - none_cpu[p["gpus"]]} for p in points
            if p.get("finished") and p["gpus"] in none_cpu and p["cpu_s"] > none_cpu[p["gpus"]]]


def round_cost(points: list[dict]) -> dict | None:
    """CPU microseconds per placement round, fitted as ``fixed + per_job x jobs_per_round`` over the finished points
    (least squares): what a round costs whatever the cluster, and what each job it walks adds. Only for a placement
    that re-places every running job (it keeps some: ``kept``); a sticky one's calls are only the jobs it places."""
    xy = [(p["jobs_per_round"], 1e6 * p["cpu_s"] / p["rounds"]) for p in points
          if p.get("finished") and p.get("rounds") and p.get("kept")]
    fit = line(xy)
    if fit is None:
        return None
    per_job, fixed = fit
    return {"fixed_us": round(fixed, 1), "per_job_us": round(per_job, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="500,1000,2000,4000,8000", help="comma-separated cluster sizes")
    parser.add_argument("--apps-per-gpu", type=int, default=8, help="apps = this x GPUs (8: 4,000 apps on 500)")
    parser.add_argument("--placements", default=",".join(PLACEMENTS), help=f"comma-separated, of {', '.join(PLACEMENTS)}")
    parser.add_argument("--predict", choices=("on", "off", "both"), default="on")
    parser.add_argument("--cap", type=float, default=600.0, help="seconds a point may run")
    parser.add_argument("--skip-after-cap", action="store_true",
                        help="skip a series' larger points once one ran past the cap")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_point(*json.loads(args.child))))
        return
    sizes = [int(g) for g in args.gpus.split(",")]
    placements = [p.strip() for p in args.placements.split(",")]
    unknown = [p for p in placements if p not in PLACEMENTS]
    if unknown:
        raise SystemExit(f"error: unknown placement(s) {', '.join(unknown)}; choose from {', '.join(PLACEMENTS)}")
    predicts = {"on": [True], "off": [False], "both": [False, True]}[args.predict]
    points, series, runs = [], [], {}
    for placement in placements:
        for predict in predicts:
            mine = []
            for gpus in sorted(sizes):
                if placement.startswith("mapa"):
                    gpus -= gpus % 8  # whole DGX-1 nodes (500 -> 496)
                apps = args.apps_per_gpu * gpus
                if args.skip_after_cap and any(not p.get("finished") for p in mine):
                    mine.append({"apps": apps, "gpus": gpus, "placement": placement, "predict": predict,
                                 "finished": False, "skipped": "a smaller point ran past the cap"})
                    continue
                log(f"{placement} predict={predict}: {apps} apps on {gpus} GPUs ...")
                p = point(apps, gpus, placement, predict, args.cap)
                log(f"  {json.dumps(p)}")
                mine.append(p)
            points += mine
            runs[placement, predict] = mine
            series.append({"placement": placement, "predict": predict, "points": len(mine),
                           "time_exponent_vs_apps_x_gpus": exponent(mine),
                           "cpu_time_exponent_vs_apps_x_gpus": exponent(mine, "cpu_s"),
                           "time_exponent_vs_apps_x_gpus_touched": exponent(mine, "wall_s", "gpus_touched_per_round"),
                           "cpu_time_exponent_vs_apps_x_gpus_touched": exponent(mine, "cpu_s", "gpus_touched_per_round"),
                           "time_exponent_vs_total_gpus_touched": exponent(mine, "wall_s", "gpus_touched_per_app"),
                           "cpu_time_exponent_vs_total_gpus_touched": exponent(mine, "cpu_s", "gpus_touched_per_app"),
                           "constant_event_cost_exponent_vs_apps_x_gpus_touched":
                               exponent(mine, "events", "gpus_touched_per_round"),
                           "constant_round_cost_exponent_vs_total_gpus_touched":
                               exponent(mine, "rounds", "gpus_touched_per_app"),
                           "cpu_per_event_exponent_vs_gpus": event_cost_exponent(mine),
                           "cpu_us_per_round": round_cost(mine)})
    for entry in series:
        bare = runs.get(("none", entry["predict"]))
        if entry["placement"] != "none" and bare:
            added = placement_share(runs[entry["placement"], entry["predict"]], bare)
            entry["placement_cpu_time_exponent_vs_apps_x_gpus_touched"] = exponent(added, "cpu_s", "gpus_touched_per_round")
    print(json.dumps({"workload": "themis1", "load": 0.9, "seed": 4567, "policy": "pcs-bal",
                      "cpus": os.cpu_count(), "points": points, "series": series}, indent=1))


if __name__ == "__main__":
    main()
