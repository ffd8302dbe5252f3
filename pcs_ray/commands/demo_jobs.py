"""What ``pcs-ray demo`` submits: the bundled job list ``demo`` (``workloads/joblists/demo.csv``), and the WFQ that schedules them."""

from __future__ import annotations

from dataclasses import replace

from pcs_ray.workloads.joblist import ListedJob, read_joblist

# WFQ(T, W, zeta): three queues by job size (GPU-seconds at one GPU), weights e^(-i W) with W = 1,
# thresholds sized for these short jobs.
DEMO_WFQ = {"class_thresholds": [15.0, 60.0, "inf"], "class_rates": [1.0, 0.3679, 0.1353], "clip_demand_factor": 0.0}


def demo_jobs(n: int) -> list[ListedJob]:
    """``n`` jobs: the list, repeated a minute later with new names and seeds."""
    base = read_joblist("demo")
    out = []
    for k in range(n):
        job = base[k % len(base)]
        rep = k // len(base)
        out.append(replace(job, submit_s=job.submit_s + 60.0 * rep, name=job.name if rep == 0 else f"{job.name}-{rep + 1}",
                           params={**job.params, "seed": k}))
    return out
