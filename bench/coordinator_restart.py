"""A coordinator restarted with 100,000 jobs queued: its journal's size, its replay, and how soon it answers.

    PYTHONPATH=. python bench/coordinator_restart.py [--jobs 100000] [--nodes 4] [--gpus-per-node 64]

The coordinator core as the actor builds it (``build_core``: the SQLite journal in a state folder, PCS
WFQ ``pcs-bal``, Packed-Sticky placement), no Ray, no runners. ``--through-core`` jobs are submitted (as
the load bench's: 1-8 GPUs, 200-20,000 steps), every forecast refreshed once and each job's forecast at
submission journaled, as the actor does; the rest of ``--jobs`` join the journal as the same records
(a submission and its forecast, the specs of those submitted through the core, named anew), in one
transaction: a submission through the core costs about 20 ms here (its decision syncs every running
job), 35 minutes for 100,000. Then the core is dropped, as a killed coordinator is, and a new one is
built on the same folder. Prints one JSON object: the journal's bytes (in all and per job),
its events by kind, the replay (``build_core`` until it returns), the time until a host on it answers
``status`` (replay included: what a restarted coordinator's callers wait), the jobs and each state's count
before and after (nothing lost), and the process's peak RSS. Target here: ``status`` within 30 s.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from common import log
from pcs_ray.api import strict_json
from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator.config import CoordinatorConfig, build_core, cluster_dict
from pcs_ray.coordinator.host import CoordinatorHost

TARGET_STATUS_S = 30.0


def load_job(rng: random.Random, i: int) -> dict:
    """One of ``bench/coordinator_load.py``'s submissions."""
    gpus = rng.choice([1, 1, 1, 2, 2, 4, 8])
    return {"workload": "tiny_cnn", "steps": rng.randint(200, 20_000), "gpus": gpus, "min_gpus": max(1, gpus // 2),
            "step_time": 0.05, "checkpoint_every": 100, "class": rng.choice("ABCD"), "name": f"load-{i}"}


def append_like(journal: Path, count: int) -> int:
    """``count`` more jobs in the journal, in one transaction: each a copy of a job submitted through the
    core (its submission and its forecast at submission), with the next id and a name of its own."""
    with sqlite3.connect(journal) as db:
        (seq, t, last), = db.execute("SELECT MAX(seq), MAX(t), MAX(job_id) FROM events").fetchall()
        submits = {jid: json.loads(data) for jid, data in db.execute("SELECT job_id, data FROM events WHERE kind = 'submit'")}
        predicted = {jid: json.loads(data) for jid, data in db.execute("SELECT job_id, data FROM events WHERE kind = 'predicted'")}
        models = [jid for jid in submits if jid in predicted]
        rows = []
        for k in range(count):
            jid, like = last + 1 + k, models[k % len(models)]
            data = dict(submits[like], spec={**submits[like]["spec"], "name": f"load-{jid}"})
            rows.append((seq + 1 + 2 * k, t, "submit", jid, json.dumps(data, separators=(",", ":"))))
            rows.append((seq + 2 + 2 * k, t, "predicted", jid, json.dumps(predicted[like], separators=(",", ":"))))
        db.executemany("INSERT INTO events (seq, t, kind, job_id, data) VALUES (?, ?, ?, ?, ?)", rows)
    return len(rows)


class Restarted(CoordinatorHost):
    """The host the actor is, less Ray: its ``status`` reads the forecasts the background loop left
    (a replayed journal's, until the loop's first refresh play), it plays none itself."""

    def _execute(self, actions) -> None:
        pass


def states(host: CoordinatorHost) -> dict[str, int]:
    out: dict[str, int] = {}
    for job in host.core.jobs.values():
        out[job.state.value] = out.get(job.state.value, 0) + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=64)
    ap.add_argument("--through-core", type=int, default=2000,
                    help="jobs submitted through the core (decisions, starts, stops); the rest are journal records")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pcsray-restart-"))
    try:
        config = CoordinatorConfig(cluster=cluster_dict(ClusterSpec.homogeneous(args.nodes * args.gpus_per_node, args.gpus_per_node)),
                                   state_dir=str(tmp / "state"), policy="pcs-bal", wfq=None, placement="packed-sticky")
        core = build_core(config)
        rng = random.Random(args.seed)
        began = time.perf_counter()
        through = min(args.through_core, args.jobs)
        for i in range(through):
            core.submit(load_job(rng, i), refresh=False)
            if i and i % 1000 == 0:
                log(f"{i} submitted, {time.perf_counter() - began:.0f} s")
        core.play_refresh()
        for jid in list(core.jobs):
            core.note_prediction(jid)
        filled_s = time.perf_counter() - began
        journal = Path(config.resolved().journal_path)
        core.journal.close()
        del core  # killed: nothing more is written
        appended = append_like(journal, args.jobs - through)
        with sqlite3.connect(journal) as db:
            before = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'submit'").fetchone()[0]
        size = sum(p.stat().st_size for p in journal.parent.glob(journal.name + "*"))
        with sqlite3.connect(journal) as db:
            kinds = dict(db.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind").fetchall())
        t = time.perf_counter()
        core = build_core(config)
        replay_s = time.perf_counter() - t
        host = Restarted(core)
        with host.lock:
            host.core.decide()  # as the actor does once its journal is replayed: runs lost start again
        status = host.status()
        status_s = time.perf_counter() - t
        after = states(host)
        out = {
            "jobs": args.jobs, "through_core": through, "journal_records_appended": appended,
            "gpus": args.nodes * args.gpus_per_node, "fill_s": round(filled_s, 1),
            "journal_bytes": size, "journal_bytes_per_job": round(size / args.jobs, 1), "journal_events": kinds,
            "replay_s": round(replay_s, 2), "status_after_restart_s": round(status_s, 2),
            "status_jobs": len(status["jobs"]), "target_status_s": TARGET_STATUS_S,
            "journal_jobs_before": before, "jobs_after_restart": after,
            "nothing_lost": before == args.jobs == len(status["jobs"]) == sum(after.values()),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        print(strict_json.dumps(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
