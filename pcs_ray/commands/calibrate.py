"""``pcs-ray calibrate``: run each workload briefly so the coordinator's speed model starts from measurements.

Submits one short job per workload shape (the workload and the parameters
that change a step's cost) and GPU count to the running coordinator, waits
for them, and prints what its speed model learned: seconds per step per
shape and GPU count, and each workload's start-up cost. The coordinator keeps
it in its state folder (``speeds.json``), so every later forecast, and a
restarted or new coordinator on the same state folder, starts from it.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pcs_ray.commands.inputs import UsageError
from pcs_ray.contract import TERMINAL
from pcs_ray.commands.views import print_json

CALIBRATION_STEPS = 6  # enough for a start-up and a few step times; short on every emulated device


CALIBRATION_S = 3.0  # on the emulated device at least: steps measured after the first one (reports come each second)


def calibration_steps(workload: str, params: dict, gpus: int, steps: int) -> int:
    """``steps``, or more for a fast workload: enough for reports after its first step (which is warm-up)."""
    from pcs_ray.workloads.device_model import emulated_step_s

    try:
        return max(steps, math.ceil(CALIBRATION_S / emulated_step_s(workload, params, gpus)))
    except (KeyError, ValueError):
        return steps


def calibration_jobs(shapes: list[tuple[str, dict, int]], steps: int = CALIBRATION_STEPS) -> list[dict]:
    """One short job per (workload, params, GPU count), rigid at that count, class D (it yields to everything)."""
    jobs = []
    for k, (workload, params, gpus) in enumerate(shapes):
        jobs.append({"name": f"calibrate-{workload}-{gpus}gpu-{k}", "workload": workload,
                     "steps": calibration_steps(workload, params, gpus, steps),
                     "gpus": gpus, "min_gpus": gpus, "class": "D", "params": dict(params)})
    return jobs


def shapes_of(joblist: str | Path | None, workloads: list[str] | None, gpus: list[int]) -> list[tuple[str, dict, int]]:
    """What to calibrate: every shape of a job list at the counts its jobs ask for (and 1), else the named
    (default: all registered) workloads with their default parameters at ``gpus``."""
    from pcs_ray.workloads.catalog import registered_workloads

    if joblist is not None:
        from pcs_ray.workloads.joblist import read_joblist

        return shapes_of_jobs(read_joblist(joblist))
    out: dict[tuple[str, int], tuple[str, dict, int]] = {}
    catalog = registered_workloads()
    for name in workloads or sorted(catalog):
        if name not in catalog:
            raise UsageError(f"--workloads: unknown workload {name!r}; known: {', '.join(sorted(catalog))}")
        for n in gpus:
            out[(name, n)] = (name, {}, n)
    return list(out.values())


def shapes_of_jobs(jobs) -> list[tuple[str, dict, int]]:
    """Every shape of a job list at 1 GPU and at the most GPUs its jobs ask for."""
    from pcs_ray.coordinator.speed import shape_key

    out: dict[tuple[str, int], tuple[str, dict, int]] = {}
    for job in jobs:
        for n in sorted({1, job.gpus}):
            out.setdefault((shape_key(job.workload, job.params), n), (job.workload, job.params, n))
    return list(out.values())


def run_calibration(client, jobs: list[dict], timeout_s: float, err: Console | None = None) -> list[dict]:
    """Submit ``jobs`` one start at a time and wait for them (``timeout_s`` in all); their final views.

    Each job is submitted once the previous one has reported its first step, so runs overlap but their
    start-ups do not: a dozen runners importing and building models at once on a small machine's shared
    cores would make every start, and the emulated steps beside it, look slower than they are, and the
    speed model would charge that to every forecast until later runs outweighed it."""
    if err is not None:
        err.print(f"calibrating: {len(jobs)} short run(s), starts one at a time (step times, start-up) ...")
    deadline = time.monotonic() + timeout_s
    handles = []
    for spec in jobs:
        handles.append(client.submit(spec))
        _wait_started(client, handles[-1].id, deadline)
    views = []
    for handle in handles:
        try:
            views.append(client.wait(handle.id, timeout=max(1.0, deadline - time.monotonic())))
        except TimeoutError:
            views.append(client.job(handle.id))
    return views


def _wait_started(client, job_id: int, deadline: float, poll_s: float = 0.25) -> None:
    """Until the job has reported a step or ended (or the deadline)."""
    while time.monotonic() < deadline:
        view = client.job(job_id)
        if view["state"] in TERMINAL or (view.get("steps") or 0) > 0:
            return
        time.sleep(poll_s)


def speeds_table(speeds: dict) -> Table:
    table = Table(title="learned speeds (seconds per step at slowdown 1)", title_justify="left")
    for col in ("shape", "GPUs", "step s", "runs"):
        table.add_column(col)
    for shape, by_n in sorted(speeds.get("steps", {}).items()):
        for n, stat in sorted(by_n.items(), key=lambda kv: int(kv[0])):
            table.add_row(shape, str(n), f"{stat['mean']:.4f}", str(len(stat.get("samples", []))))
    costs = Table(title="costs (seconds)", title_justify="left")
    for col in ("workload", "start", "resume", "stop"):
        costs.add_column(col)
    for workload, by_kind in sorted(speeds.get("costs", {}).items()):
        costs.add_row(workload, *[f"{by_kind[k]['mean']:.2f}" if k in by_kind else "-" for k in ("start", "resume", "stop")])
    outer = Table.grid()
    outer.add_row(table)
    outer.add_row(costs)
    return outer


def calibrate_cmd(
    trace: Annotated[str | None, typer.Option("--trace", help="Calibrate the shapes of this job list (a bundled name, e.g. demo, or a CSV as `pcs-ray replay` reads).")] = None,
    workloads: Annotated[str | None, typer.Option("--workloads", help="Comma-separated workloads (default: every registered one), with default parameters.")] = None,
    gpus: Annotated[str, typer.Option("--gpus", help="Comma-separated GPU counts to calibrate each workload at (without --trace).")] = "1",
    steps: Annotated[int, typer.Option("--steps", min=3, max=1000, help="Steps per calibration run.")] = CALIBRATION_STEPS,
    timeout: Annotated[float, typer.Option("--timeout", min=1.0, help="Seconds to wait for all runs.")] = 600.0,
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster address (default: $RAY_ADDRESS, else the running local cluster).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the learned speeds as one JSON object.")] = False,
) -> None:
    """Seed the running coordinator's speed model: a short run of each workload shape at each GPU count.

    Runs start one at a time (each once the previous one has reported a step), so their start-ups do not
    crowd the machine's cores and inflate what is measured.

    Forecasts use measured step times (per workload shape and GPU count) and
    measured start/stop costs; before a workload has run, they use the
    emulated device's reference times (logical GPUs) or the job's own
    step_time estimate. The coordinator keeps what it learns in its state
    folder (speeds.json).
    """
    try:
        counts = sorted({int(x) for x in gpus.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"--gpus: expected comma-separated whole numbers, got {gpus!r}") from None
    if not counts or min(counts) < 1:
        raise UsageError(f"--gpus: GPU counts must be >= 1, got {gpus!r}")
    names = [w.strip() for w in workloads.split(",") if w.strip()] if workloads else None
    from pcs_ray.workloads.joblist import JobListError

    try:
        shapes = shapes_of(trace, names, counts)
    except JobListError as e:
        raise UsageError(str(e)) from None
    from pcs_ray.client import Client

    client = Client(address)
    capacity = client.status()["gpus"]
    too_big = [s for s in shapes if s[2] > capacity]
    if too_big:
        raise UsageError(f"--gpus: the cluster has {capacity} GPUs; cannot calibrate at {too_big[0][2]}")
    views = run_calibration(client, calibration_jobs(shapes, steps), timeout, Console(stderr=True))
    speeds = client.status()["speeds"]
    unfinished = [v["name"] for v in views if v["state"] != "finished"]
    if as_json:
        print_json({"runs": len(views), "unfinished": unfinished, "speeds": speeds})
    else:
        Console().print(speeds_table(speeds))
    if unfinished:
        raise UsageError(f"{len(unfinished)} calibration run(s) did not finish: {', '.join(unfinished)}")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
