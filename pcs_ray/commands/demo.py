"""``pcs-ray demo``: the whole live system on one machine, with real training on logical GPUs.

An embedded local Ray gets 2 nodes x 4 logical GPUs (``demo_cluster``: real
topology and measured variability), the coordinator runs PCS's WFQ with queue
thresholds sized for these short jobs, and real PyTorch jobs of mixed sizes
and classes arrive over time (the bundled job list ``demo``, run as
``pcs-ray replay`` runs a list). Each logical GPU emulates an independent
device (``pcs_ray.workloads.device_model``): a step takes the workload's reference
time x its GPUs' slowdown / its scaling, whatever else runs on the machine. At the end: per-job predicted (at submission) vs
actual JCT, preemptions, GPUs (``demo_report``), a JSON report and a PNG
timeline (``demo_plot``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pcs_ray.commands.views import stdout_console, strict_json

DEADLINE_S = 280.0  # stop waiting (and report what finished) well inside five minutes


def run_demo(out: str | Path, num_jobs: int = 8, seed: int = 1, live: bool = True, deadline_s: float = DEADLINE_S) -> dict:
    """Run the demo; returns the report (also written to ``out``, with the timeline)."""
    # Imported here so that `pcs-ray --help` loads neither Ray nor the coordinator.
    from pcs_ray.commands.demo_cluster import demo_cluster
    from pcs_ray.commands.demo_jobs import DEMO_WFQ, demo_jobs
    from pcs_ray.commands.demo_plot import plot_report
    from pcs_ray.commands.demo_ray import demo_coordinator
    from pcs_ray.commands.demo_report import build_report, result_table
    from pcs_ray.commands.replay import run_live

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    err = Console(stderr=True)
    began = time.time()
    cluster, notes = demo_cluster(out, seed)
    err.print(f"[bold]pcs-ray demo[/]: starting Ray with {cluster.num_gpus} logical GPUs on {len(cluster.nodes)} nodes ...")
    with demo_coordinator(cluster, DEMO_WFQ) as client:
        status, submitted, _ = run_live(client, demo_jobs(num_jobs), calibrate=True, deadline_s=deadline_s,
                                        live=live, err=err, title="pcs-ray demo")
        report = build_report(status, submitted, cluster, notes, wall_s=time.time() - began)
    (out / "demo-report.json").write_text(strict_json(report, indent=2))
    plot_report(report, out / "demo-timeline.png")
    stdout_console().print(result_table(report))  # pipes: no truncated names
    return report


def demo_cmd(
    out: Annotated[Path, typer.Option("--out", help="Folder for the report (demo-report.json, demo-timeline.png).")] = Path("pcs-ray-demo"),
    jobs: Annotated[int, typer.Option("--jobs", min=1, max=20, help="How many training jobs to submit.")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the GPU variability sample.")] = 1,
    live: Annotated[bool, typer.Option("--live/--no-live", help="Show the live table while it runs.")] = True,
) -> None:
    """Run the whole system on this machine: local Ray, 2 nodes x 4 logical GPUs, real training.

    Starts an embedded Ray with logical GPUs (DGX-like links, real measured
    variability), the coordinator (PCS WFQ), and submits a mix of real
    PyTorch training jobs over time; shows the live table, then each job's
    predicted vs actual JCT, preemptions and GPUs, and writes a JSON report
    and a PNG timeline. Takes a few minutes.
    """
    report = run_demo(out, num_jobs=jobs, seed=seed, live=live)
    s = report["summary"]
    print(f"average |predicted - actual| JCT error: {s['mean_abs_error_pct']:.1f}% at submission "
          f"({s['mean_abs_error_s']:.1f} s), {s['mean_abs_error_midlife_pct']:.1f}% at mid-life; "
          f"{s['finished']}/{s['jobs']} jobs finished in {s['wall_s']:.0f} s; report in {out}/")
    if s["finished"] < s["jobs"]:
        raise typer.Exit(1)  # the report is written, but a demo that lost jobs must not look green


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)
