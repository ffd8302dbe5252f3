"""How a submission's cost grows with the queue: 10,000, 30,000 and 100,000 jobs queued, in one run.

    PYTHONPATH=. python bench/submission_growth.py [--queued 10000,30000,100000] [--submissions 300]

The coordinator core as the actor builds it (``build_core``: SQLite journal, PCS WFQ ``pcs-bal``,
Packed-Sticky placement, 4 nodes x 64 GPUs), no Ray, no runners, no lock contention: what one
submission costs inside the actor, without the calls and plays that run beside it there
(``bench/coordinator_load.py`` measures through the actor). Each queue is built as
``bench/coordinator_restart.py`` builds it (2,000 jobs through the core, the rest as their journal
records, then replayed), its forecasts refreshed once as the actor's loop does (``begin_play_refresh``
under the lock, the play outside it, ``end_play_refresh``). Then ``--submissions`` submissions of the
load bench's jobs, each timed from ``submit`` to its forecast and bound (``submitted``), with a refresh
play after every ``--refresh-every`` of them (about a second of the actor's submissions), untimed.
Per queue size: submit p50/p99 (ms), how the forecasts were played (branch / fresh), the refresh
play's start under the lock (ms) and its length (s), and the growth exponent of p50 and p99 against the
queue. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from common import log
from coordinator_restart import append_like, load_job
from pcs_ray.api import strict_json
from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator.config import CoordinatorConfig, build_core, cluster_dict


def refresh(core) -> tuple[float, float]:
    """The actor loop's refresh: (ms its start held the lock, s its play took)."""
    t = time.perf_counter()
    play = core.begin_play_refresh()
    began = time.perf_counter() - t
    if play is None:
        core.play_refresh()
        return began * 1000.0, time.perf_counter() - t
    t = time.perf_counter()
    finish = play[1]()
    core.end_play_refresh(play[0], finish)
    return began * 1000.0, time.perf_counter() - t


def one_size(queued: int, args, tmp: Path) -> dict:
    config = CoordinatorConfig(cluster=cluster_dict(ClusterSpec.homogeneous(args.gpus, 64)),
                               state_dir=str(tmp / f"state-{queued}"), policy="pcs-bal", wfq=None,
                               placement="packed-sticky")
    core = build_core(config)
    rng = random.Random(args.seed)
    through = min(2000, queued)
    for i in range(through):
        core.submit(load_job(rng, i), refresh=False)
    core.play_refresh()
    for jid in list(core.jobs):
        core.note_prediction(jid)
    core.journal.close()
    del core
    append_like(Path(config.resolved().journal_path), queued - through)
    t = time.perf_counter()
    core = build_core(config)
    replay_s = time.perf_counter() - t
    core.decide()  # as the actor does once its journal is replayed
    starts, plays = [], []
    begin_ms, play_s = refresh(core)
    starts.append(begin_ms), plays.append(play_s)
    lat, bases = [], []
    for k in range(args.submissions):
        t = time.perf_counter()
        jid, _ = core.submit(load_job(rng, queued + k))
        core.submitted(jid)
        lat.append((time.perf_counter() - t) * 1000.0)
        core.note_prediction(jid)
        bases.append(core.jobs[jid].forecast_basis)
        if (k + 1) % args.refresh_every == 0:
            begin_ms, play_s = refresh(core)
            starts.append(begin_ms), plays.append(play_s)
    log(f"{queued} queued: p50 {np.percentile(lat, 50):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms")
    return {"queued": queued, "replay_s": round(replay_s, 1),
            "submit_ms": {"p50": round(float(np.percentile(lat, 50)), 2), "p99": round(float(np.percentile(lat, 99)), 2)},
            "forecast_basis": {b: bases.count(b) for b in ("branch", "fresh")},
            "fresh_share": round(bases.count("fresh") / len(bases), 3),
            "refresh_start_under_lock_ms": {"median": round(float(np.median(starts)), 1), "max": round(max(starts), 1)},
            "refresh_play_s": {"median": round(float(np.median(plays)), 2), "max": round(max(plays), 2)}}


def exponent(points: list[dict], key: str) -> float | None:
    """The slope of log(cost) against log(queue) from the smallest to the largest queue."""
    a, b = points[0], points[-1]
    if len(points) < 2 or a["submit_ms"][key] <= 0:
        return None
    return round(math.log(b["submit_ms"][key] / a["submit_ms"][key]) / math.log(b["queued"] / a["queued"]), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queued", default="10000,30000,100000")
    ap.add_argument("--submissions", type=int, default=300)
    ap.add_argument("--refresh-every", type=int, default=100)
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.queued.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="pcsray-growth-"))
    try:
        points = [one_size(n, args, tmp) for n in sizes]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(strict_json.dumps({"gpus": args.gpus, "submissions": args.submissions, "refresh_every": args.refresh_every,
                             "sizes": points, "growth_exponent": {"p50": exponent(points, "p50"),
                                                                  "p99": exponent(points, "p99")}}))


if __name__ == "__main__":
    main()
