"""``pcs-ray replay --trace FILE --live``: a job list run live and in the simulator, side by side.

Live: real runners, on an embedded local Ray with the demo's logical GPUs
(2 nodes x 4, half-DGX-1 links, PAL's measured variability) or, with
``--address``, on a running cluster through its coordinator. The shapes the
list uses are calibrated first (``pcs-ray calibrate``), then every job is
submitted at its ``submit_s`` and followed to the end. The simulator then
plays the same jobs on the same cluster with the same policy and placement,
each job sized and costed by what the live run measured. The gap between the
two (``avg_jct_gap_pct``) is what the live system pays that its model does
not know; the prediction errors say how far each side's forecasts at
submission were from what happened.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pcs_ray.commands.inputs import UsageError
from pcs_ray.commands.views import print_json, stdout_console, strict_json

DEADLINE_S = 900.0


def checkpoint_extra(steps: int) -> dict:
    """Periodic checkpoints as the demo takes them (about four per job)."""
    return {"checkpoint_every": max(10, steps // 4)}


def arrivals(jobs) -> list[tuple[float, dict]]:
    return [(job.submit_s, job.spec(**checkpoint_extra(job.steps))) for job in jobs]


def run_live(client, jobs, *, calibrate: bool, deadline_s: float, live: bool, err: Console,
             title: str = "pcs-ray replay") -> tuple[dict, dict, float]:
    """Calibrate the list's shapes, submit its jobs on schedule, follow them; (status, submitted, began)."""
    from pcs_ray.commands.calibrate import calibration_jobs, run_calibration, shapes_of_jobs
    from pcs_ray.commands.demo_poll import follow

    began = time.time()
    wait_for_warm_runners(client, timeout_s=min(180.0, deadline_s / 3), err=err)
    if calibrate:
        run_calibration(client, calibration_jobs(shapes_of_jobs(jobs)), deadline_s / 2, err)
    status, submitted = follow(client, arrivals(jobs), began, deadline_s, live, err, title=title)
    return status, submitted, began


def wait_for_warm_runners(client, timeout_s: float, err: Console) -> bool:
    """Wait until the coordinator's warm runners have started (a fresh cluster starts them one at a time),
    so calibration measures the start-up the jobs will pay, not that of a runner still importing torch."""
    deadline = time.monotonic() + timeout_s
    shown = False
    while True:
        runners = [r for r in client.status().get("runners") or [] if r.get("kind") == "warm"]
        waiting = [r for r in runners if r.get("state") != "ready"]
        if not waiting:
            return True
        if time.monotonic() > deadline:
            err.print(f"[yellow]{len(waiting)} warm runner(s) still starting after {timeout_s:.0f} s; going on[/]")
            return False
        if not shown:
            err.print(f"waiting for {len(waiting)} of {len(runners)} warm runners to start ...")
            shown = True
        time.sleep(1.0)


def summary(live: dict | None, sim: dict[str, dict], overruns: int, wall_s: float, late_steps: int = 0) -> dict:
    """The figures ``--json`` prints (see the issue's schema); ``live`` is ``demo_report.build_report``'s."""
    sim_jcts = [s["jct_s"] for s in sim.values()]
    sim_errs = [100.0 * abs(s["jct_s"] - s["predicted_jct_s"]) / s["predicted_jct_s"]
                for s in sim.values() if s["predicted_jct_s"]]
    out = {"sim": {"jobs": len(sim), "avg_jct_s": _mean(sim_jcts), "mean_abs_error_pct": _mean(sim_errs)},
           "emulation_overruns": overruns, "emulation_late_steps": late_steps, "wall_s": wall_s}
    if live is not None:
        s = live["summary"]
        out["live"] = {"jobs": s["jobs"], "finished": s["finished"], "avg_jct_s": s["avg_jct_s"],
                       "mean_abs_error_pct": s["mean_abs_error_pct"],
                       "mean_abs_error_midlife_pct": s["mean_abs_error_midlife_pct"],
                       "mean_abs_error_tenth_pct": s.get("mean_abs_error_tenth_pct"),
                       "preemptions": s["preemptions"]}
        gap = None
        if s["avg_jct_s"] is not None and out["sim"]["avg_jct_s"]:
            gap = 100.0 * (s["avg_jct_s"] - out["sim"]["avg_jct_s"]) / out["sim"]["avg_jct_s"]
        out["avg_jct_gap_pct"] = gap
        out["jobs"] = [{**{k: j.get(k) for k in ("name", "workload", "state", "jct_s", "predicted_jct_s", "error_pct",
                                                  "midlife_error_pct", "tenth_error_pct", "preemptions",
                                                  "overruns", "late_steps")},
                        "sim_jct_s": sim.get(j["name"], {}).get("jct_s"),
                        "sim_predicted_jct_s": sim.get(j["name"], {}).get("predicted_jct_s")}
                       for j in live["jobs"]]
    return out


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def side_by_side(report: dict) -> Table:
    table = Table(title="pcs-ray replay: live vs simulated (JCT and the prediction at submission)", title_justify="left")
    for col in ("job", "state", "live JCT", "predicted", "error", "mid-life", "sim JCT", "sim predicted", "preempt", "overruns"):
        table.add_column(col)
    fmt = lambda v, unit=" s": "-" if v is None else f"{v:.1f}{unit}"  # noqa: E731
    for j in report.get("jobs", []):
        table.add_row(j["name"], j["state"], fmt(j["jct_s"]), fmt(j["predicted_jct_s"]), fmt(j["error_pct"], "%"),
                      fmt(j["midlife_error_pct"], "%"), fmt(j["sim_jct_s"]), fmt(j["sim_predicted_jct_s"]),
                      str(j["preemptions"]), str(j["overruns"]))
    live, sim = report.get("live", {}), report["sim"]
    table.caption = (
        f"live: {live.get('finished')}/{live.get('jobs')} finished, avg JCT {fmt(live.get('avg_jct_s'))}, "
        f"|error| {fmt(live.get('mean_abs_error_pct'), '%')} at submission, "
        f"{fmt(live.get('mean_abs_error_midlife_pct'), '%')} at mid-life; "
        f"sim: avg JCT {fmt(sim['avg_jct_s'])}, |error| {fmt(sim['mean_abs_error_pct'], '%')}; "
        f"gap {fmt(report.get('avg_jct_gap_pct'), '%')}; emulation overruns {report['emulation_overruns']} "
        f"({report.get('emulation_late_steps', 0)} late step(s) caught up); "
        f"wall {report['wall_s']:.0f} s")
    return table


def replay(trace: str, *, live: bool, address: str | None, calibrate: bool, deadline_s: float, seed: int,
           show_live: bool, out: Path | None = None) -> dict:
    """Run ``trace`` live (and/or) in the simulator; the report ``--json`` prints."""
    from pcs_ray.commands.demo_cluster import demo_cluster
    from pcs_ray.commands.demo_jobs import DEMO_WFQ
    from pcs_ray.commands.replay_sim import simulate_joblist
    from pcs_ray.workloads.joblist import JobListError, read_joblist

    err = Console(stderr=True)
    began = time.time()
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="pcs-ray-replay-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        jobs = read_joblist(trace)
    except JobListError as e:
        raise UsageError(str(e)) from None
    if not live:
        cluster, _ = demo_cluster(folder, seed)
        _check_capacity(jobs, cluster.num_gpus)
        sim = simulate_joblist(jobs, cluster, {"policy": "pcs", **DEMO_WFQ}, "packed-sticky", None,
                               extra=None)
        return summary(None, sim, 0, time.time() - began)
    if address is None:
        from pcs_ray.commands.demo_ray import demo_coordinator

        cluster, notes = demo_cluster(folder, seed)
        _check_capacity(jobs, cluster.num_gpus)
        err.print(f"[bold]pcs-ray replay[/]: {len(jobs)} jobs on an embedded Ray with {cluster.num_gpus} logical GPUs ...")
        with demo_coordinator(cluster, DEMO_WFQ) as client:
            report, speeds, config = _run(client, jobs, cluster, notes, calibrate, deadline_s, show_live, err)
    else:
        from pcs_ray.client import Client
        from pcs_ray.cluster import cluster_spec_from_dict

        client = Client(address)
        config = client.config()
        cluster = cluster_spec_from_dict(config["cluster"], "the coordinator's cluster")
        _check_capacity(jobs, cluster.num_gpus)
        report, speeds, config = _run(client, jobs, cluster, [], calibrate, deadline_s, show_live, err)
    sim = simulate_joblist(jobs, cluster, config["policy"], config["placement"]["placement"], speeds,
                           extra=None)
    overruns = sum(j.get("overruns") or 0 for j in report["jobs"])
    late = sum(j.get("late_steps") or 0 for j in report["jobs"])
    result = summary(report, sim, overruns, time.time() - began, late)
    (folder / "replay-report.json").write_text(strict_json({**result, "live_report": report}, indent=2))
    return result


def _run(client, jobs, cluster, notes, calibrate, deadline_s, show_live, err):
    from pcs_ray.commands.demo_report import build_report

    status, submitted, began = run_live(client, jobs, calibrate=calibrate, deadline_s=deadline_s, live=show_live,
                                        err=err)
    report = build_report(status, submitted, cluster, notes, wall_s=time.time() - began)
    return report, status["speeds"], client.config()


def _check_capacity(jobs, capacity: int) -> None:
    for job in jobs:
        if job.min_gpus > capacity:
            raise UsageError(f"job {job.name} needs {job.min_gpus} GPUs; the cluster has {capacity}")


def replay_cmd(
    trace: Annotated[str, typer.Option("--trace", help="Job list: a CSV with the header submit_s,name,workload,steps,gpus,min_gpus,class[,params] (params: a JSON object), or a bundled list (demo, mixed-20).")],
    live: Annotated[bool, typer.Option("--live/--sim-only", help="Run the jobs live (real runners) as well as in the simulator.")] = True,
    address: Annotated[str | None, typer.Option("--address", help="Replay on this running cluster's coordinator (default: an embedded local Ray with the demo's 8 logical GPUs).")] = None,
    calibrate: Annotated[bool, typer.Option("--calibrate/--no-calibrate", help="Run each shape the list uses briefly first (as `pcs-ray calibrate --trace`).")] = True,
    deadline: Annotated[float, typer.Option("--deadline", min=10.0, help="Stop following the jobs after this many seconds (report what finished).")] = DEADLINE_S,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the embedded cluster's GPU variability sample.")] = 1,
    out: Annotated[Path | None, typer.Option("--out", help="Folder for replay-report.json (default: a temporary folder).")] = None,
    show_live: Annotated[bool, typer.Option("--show-live", help="Show the live status table while it runs.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object with the figures.")] = False,
) -> None:
    """Replay a job list live and in the simulator; print each job's live and simulated JCT and predictions.

    The simulator plays the same jobs on the same cluster with the same
    policy and placement, each job sized and costed by the step times and
    start/stop costs the live run measured. avg_jct_gap_pct = 100 (live - sim) / sim.
    """
    result = replay(trace, live=live, address=address, calibrate=calibrate, deadline_s=deadline, seed=seed,
                    show_live=show_live, out=out)
    if as_json:
        print_json(result)
    elif live:
        stdout_console().print(side_by_side(result))
    else:
        print(f"simulated: {result['sim']['jobs']} jobs, avg JCT {result['sim']['avg_jct_s']:.1f} s, "
              f"mean |error| at submission {result['sim']['mean_abs_error_pct']:.1f}%")
    live_part = result.get("live")
    if live_part is not None and live_part["finished"] < live_part["jobs"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_cmd)
