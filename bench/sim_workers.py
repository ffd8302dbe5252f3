"""``simulate --workers N`` with a placement (issue 41): the forward plays spread over N processes, each
replaying the schedule on its own copy of the placement, against one process, side by side.

Each run is ``bench/sim_scale.py``'s point (``themis1`` jobs, load 0.9, seed 4567, ``pcs-bal``, 8 GPUs per node,
``mapa-*`` on DGX-1 V100 nodes) with predictions, in a child process of its own; one process and N processes
alternate ``--repeat`` times, so drift of this machine's speed falls on both. Per placement: each run's wall
time, the median of each, their ratio (one process over N), and whether every job's record (start, finish,
predictions, preemptions) is the same bit for bit. The live schedule is replayed by every process, so the
ratio is bounded by (schedule + plays) / (schedule + plays / N).

Usage: ``python bench/sim_workers.py [--gpus 2000] [--jobs-per-gpu 8] [--placements pal,combined]
[--workers 2] [--repeat 2]``. Prints one JSON object; progress on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

from common import log
from sim_scale import PLACEMENTS, setup


def run(num_jobs: int, gpus: int, placement: str, workers: int) -> dict:
    """One run in this process (the child's side): wall seconds and a digest of the records."""
    from pcs_ray.sim.run import simulate

    jobs, policy, place = setup(num_jobs, gpus, placement)
    started = time.perf_counter()
    result = simulate(jobs, gpus, policy, predict=True, placement=place, workers=workers)
    wall = time.perf_counter() - started
    digest = hashlib.sha256(repr([(r.job_id, r.start, r.finish, r.first_pred, r.last_pred, r.refreshes,
                                   r.preemptions) for r in result.records]).encode()).hexdigest()[:16]
    return {"wall_s": round(wall, 2), "records_sha256": digest, "forward_plays": result.predictions}


def child(num_jobs: int, gpus: int, placement: str, workers: int) -> dict:
    cmd = [sys.executable, __file__, "--child", json.dumps([num_jobs, gpus, placement, workers])]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"error: {placement} with {workers} worker(s) failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2000, help="cluster size (mapa-* rounds down to whole nodes)")
    parser.add_argument("--jobs-per-gpu", type=int, default=8)
    parser.add_argument("--placements", default="pal,combined", help=f"comma-separated, of {', '.join(PLACEMENTS)}")
    parser.add_argument("--workers", type=int, default=2, help="processes for the forward plays (>= 2)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, alternated")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(*json.loads(args.child))))
        return
    if args.workers < 2 or args.repeat < 1 or args.gpus < 8:
        raise SystemExit("error: --workers must be >= 2, --repeat >= 1 and --gpus >= 8")
    placements = [p.strip() for p in args.placements.split(",")]
    unknown = [p for p in placements if p not in PLACEMENTS]
    if unknown:
        raise SystemExit(f"error: unknown placement(s) {', '.join(unknown)}; choose from {', '.join(PLACEMENTS)}")
    series = []
    for placement in placements:
        gpus = args.gpus - args.gpus % 8 if placement.startswith("mapa") else args.gpus
        num_jobs = args.jobs_per_gpu * gpus
        runs = {1: [], args.workers: []}
        for i in range(args.repeat):
            for workers in ((1, args.workers) if i % 2 == 0 else (args.workers, 1)):
                log(f"{placement}: {num_jobs} jobs on {gpus} GPUs, {workers} process(es) ...")
                runs[workers].append(child(num_jobs, gpus, placement, workers))
                log(f"  {json.dumps(runs[workers][-1])}")
        one, many = ([r["wall_s"] for r in runs[w]] for w in (1, args.workers))
        digests = {r["records_sha256"] for w in runs for r in runs[w]}
        series.append({"placement": placement, "jobs": num_jobs, "gpus": gpus, "workers": args.workers,
                       "wall_s_1": one, f"wall_s_{args.workers}": many,
                       "median_wall_s_1": statistics.median(one), f"median_wall_s_{args.workers}": statistics.median(many),
                       "speedup": round(statistics.median(one) / statistics.median(many), 2),
                       "identical_records": len(digests) == 1})
    print(json.dumps({"workload": "themis1", "load": 0.9, "seed": 4567, "policy": "pcs-bal", "predict": True,
                      "cpus": os.cpu_count(), "series": series}, indent=1))


if __name__ == "__main__":
    main()
