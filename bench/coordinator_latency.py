"""Coordinator latency at scale (issue 5, item 7b): 1,000 queued jobs on 256 logical GPUs.

The coordinator core as the live actor runs it: the real SQLite journal
(committed before acting), the PCS WFQ policy (themis1 balanced config) and
Packed-Sticky placement on 32 nodes x 8 GPUs, runners replaced by nothing
(actions are returned, not launched). Measured:

- decision latency: a runner reports its job finished -> the start/stop
  actions that follow (journal writes, model sync, policy + placement, diff);
- submit -> prediction: a submission -> its predicted completion and bound
  (validation, journal, decision, forward play of the whole cluster), in wall
  time and in this process's CPU time.

Each sample is taken with ~1,000 jobs queued behind 256 busy GPUs (a job is
submitted after each completion to keep the queue full). Between samples the
whole queue's forecast is refreshed as the actor's loop does it (at most once
a second, by a play a submission's forecast can branch from), 1.5 s of the
coordinator's clock before the next submission; it is timed apart.
``--compare``: each submission's forecast is also played fresh from the same
state, and the relative differences of the predicted JCTs are printed. Prints JSON.
Timings are wall-clock on a shared machine: other work running at the same
time inflates them.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from common import percentile, summary
from pcs_ray.api import strict_json
from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator import Coordinator, Journal, StartRun
from pcs_ray.policies import build_policy
from pcs_ray.placement import create_placement

TARGET_DECISION_P99_MS = 50.0
TARGET_PREDICTION_P99_MS = 100.0


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def latency(ms: list[float]) -> dict:
    return summary(ms, ("n", "p50", "p99", "max", "mean"), unit="ms")


def random_job(rng: random.Random) -> dict:
    gpus = rng.choice([1, 1, 1, 2, 2, 4, 8])
    return {
        "workload": rng.choice(["resnet18", "vgg11", "mobilenet_v2", "transformer"]),
        "steps": int(rng.lognormvariate(7.5, 1.2)) + 10, "gpus": gpus,
        "min_gpus": rng.choice([1, gpus]), "class": rng.choice("ABCD"), "step_time": rng.uniform(0.05, 0.5),
    }


def variable_cluster(nodes: int, per_node: int, seed: int) -> ClusterSpec:
    """``nodes`` x ``per_node`` GPUs with PAL's measured per-class scores (drawn with repetition) and a locality penalty."""
    from pcs_ray.cluster import GPUSpec, NodeSpec

    plain = ClusterSpec(nodes=[NodeSpec(name=f"node{n}", gpus=[GPUSpec(index=i, uuid=f"GPU-bench-{n}-{i}")
                                                                for i in range(per_node)]) for n in range(nodes)])
    return with_measured_variability(plain, seed)


def with_measured_variability(cluster: ClusterSpec, seed: int, locality_penalty: float = 1.2) -> ClusterSpec:
    """``cluster`` (same nodes, GPUs and UUIDs) with PAL's measured per-class scores drawn, with repetition,
    GPU by GPU in node order, and a locality penalty (``bench/coordinator_load.py --variability`` uses it too)."""
    import csv

    from pcs_ray.data import data_dir

    with (data_dir() / "pal" / "variability" / "32gpu-variability.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    pick = random.Random(seed)
    nodes = []
    for node in cluster.nodes:
        gpus = []
        for gpu in node.gpus:
            row = pick.choice(rows)
            gpus.append(gpu.model_copy(update={"scores": {c: float(row[f"PerfVar_class{c}"]) for c in "ABCD"}}))
        nodes.append(node.model_copy(update={"gpus": gpus}))
    return ClusterSpec(nodes=nodes, locality_penalty=locality_penalty)


def run(cluster: ClusterSpec, args) -> dict:
    rng = random.Random(args.seed)
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        core = Coordinator(
            cluster, build_policy(args.policy), Journal(Path(tmp) / "journal.sqlite"), checkpoint_root=tmp,
            placement=create_placement("packed-sticky", cluster, cache=args.cache_now), clock=clock,
            workloads=("resnet18", "vgg11", "mobilenet_v2", "transformer"), progress_journal_every=5.0,
        )
        running: list[tuple[int, int]] = []  # (job id, attempt)

        def note(actions) -> None:
            for a in actions:
                if isinstance(a, StartRun):
                    running.append((a.job_id, a.request.attempt))

        t_fill = time.perf_counter()
        while sum(1 for j in core.active.values() if j.state == "queued") < args.queued:
            clock.t += 0.01
            _, actions = core.submit(random_job(rng), refresh=False)
            note(actions)
        core.play_refresh()
        fill_s = time.perf_counter() - t_fill
        # Every busy GPU reports progress once, as runners do.
        for jid, _ in running:
            job = core.jobs[jid]
            core.progress(jid, step=1, step_time=job.t1)

        # How many jobs each submission's forecast had to play to their finish before its own: the
        # play stops at the new job's finish (a branched one plays from its branch point).
        played: list[int] = []
        play_ahead = core.model.play_ahead

        def counted(until=None):
            finish = play_ahead(until=until)
            if until is not None:
                played.append(len(finish))
            return finish

        core.model.play_ahead = counted
        play_branch = core.model.play_branch

        def counted_branch(*args):
            finish = play_branch(*args)
            if finish is not None:
                played.append(len(finish))
            return finish

        core.model.play_branch = counted_branch
        forecast_ms: list[float] = []  # the submission's forecast alone (Coordinator.play_submission), inside submit
        forecast = core.play_submission

        def timed_forecast(jid):
            t0 = time.perf_counter()
            forecast(jid)
            forecast_ms.append(1000 * (time.perf_counter() - t0))

        core.play_submission = timed_forecast

        decision_ms: list[float] = []
        prediction_ms: list[float] = []
        prediction_cpu_ms: list[float] = []  # this process's CPU time: what other work on the machine cannot inflate
        refresh_ms: list[float] = []
        queue_sizes: list[int] = []
        bases: list[str] = []
        gaps: list[float] = []  # (branched - fresh) / fresh predicted JCT, for --compare
        for _ in range(args.samples):
            clock.t += 1.0
            live = [(j, a) for j, a in running if core.jobs[j].state == "running" and core.jobs[j].attempt == a]
            jid, attempt = live[rng.randrange(len(live))]
            running.remove((jid, attempt))
            t0 = time.perf_counter()
            actions = core.run_ended(jid, attempt, "finished", step=core.jobs[jid].spec.steps)
            decision_ms.append(1000 * (time.perf_counter() - t0))
            note(actions)
            for a in actions:  # stops complete at once here
                if not isinstance(a, StartRun):
                    note(core.run_ended(a.job_id, a.attempt, "preempted", step=core.jobs[a.job_id].steps))
            clock.t += 0.5
            t0, c0 = time.perf_counter(), time.process_time()
            new_id, actions = core.submit(random_job(rng))
            reply = core.prediction(new_id)
            prediction_ms.append(1000 * (time.perf_counter() - t0))
            prediction_cpu_ms.append(1000 * (time.process_time() - c0))
            assert reply["predicted_completion"] is not None
            bases.append(reply.get("basis") or "fresh")
            if args.compare:
                job = core.jobs[new_id]
                fresh = play_ahead(until=new_id)[new_id]  # the same state, played whole
                gaps.append((job.first_predicted - fresh) / (fresh - job.submit))
            note(actions)
            t0 = time.perf_counter()
            refresh(core)
            refresh_ms.append(1000 * (time.perf_counter() - t0))
            queue_sizes.append(sum(1 for j in core.active.values() if j.state == "queued"))
        core.journal.close()

    decision, prediction = latency(decision_ms), latency(prediction_ms)
    return {
        "setup": {
            "gpus": cluster.num_gpus, "nodes": len(cluster.nodes), "policy": args.policy, "placement": "packed-sticky",
            "placement_decisions_reused": args.cache_now,
            "placement_in_forward_play": core.model.placement_matters,
            "journal": "sqlite (WAL, committed per event)", "queued_min": min(queue_sizes),
            "queued_max": max(queue_sizes), "active_jobs": len(core.active), "fill_s": fill_s,
        },
        "decision_latency": {**decision, "target_p99_ms": TARGET_DECISION_P99_MS,
                             "met": decision["p99_ms"] <= TARGET_DECISION_P99_MS},
        "submit_to_prediction": {**prediction, "target_p99_ms": TARGET_PREDICTION_P99_MS,
                                 "met": prediction["p99_ms"] <= TARGET_PREDICTION_P99_MS,
                                 "cpu": latency(prediction_cpu_ms),
                                 "jobs_played_per_forecast": {"p50": percentile(played, 50), "max": max(played, default=0)},
                                 "basis": {b: bases.count(b) for b in sorted(set(bases))},
                                 "forecast_alone": latency(forecast_ms)},
        "refresh_between_samples": latency(refresh_ms),
        **({"branched_vs_fresh": gap_summary(gaps, bases)} if args.compare else {}),
    }


def refresh(core: Coordinator) -> None:
    """The whole queue's forecast, as the actor's loop makes it (a detached play, else under the lock)."""
    began = core.begin_play_refresh()
    if began is None:
        core.play_refresh()
    else:
        core.end_play_refresh(began[0], began[1]())


def gap_summary(gaps: list[float], bases: list[str]) -> dict:
    """Relative differences of the predicted JCT, branched against fresh (only branched forecasts can differ)."""
    branched = [abs(g) for g, b in zip(gaps, bases) if b == "branch"]
    return {
        "metric": "(branched - fresh) / fresh, predicted JCT of the submitted job, same state",
        "n": len(gaps), "branched": len(branched), "identical": sum(g == 0.0 for g in gaps),
        "abs_p50": percentile(branched, 50), "abs_p90": percentile(branched, 90), "abs_p99": percentile(branched, 99),
        "abs_max": max(branched, default=float("nan")), "signed_mean": float(np.mean(gaps)) if gaps else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queued", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--policy", default="pcs-bal")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compare", action="store_true",
                    help="also play each submission's forecast fresh and print the branched-vs-fresh differences")
    ap.add_argument("--scenario", choices=["uniform", "variable", "both"], default="both")
    ap.add_argument("--cache", choices=["on", "off", "both"], default="both",
                    help="reuse placement decisions whose inputs come back (Placement cache); both: off, then on, "
                         "side by side in one run ('_no_cache' results are the decisions computed afresh)")
    args = ap.parse_args()
    results = {}
    modes = {"on": [True], "off": [False], "both": [False, True]}[args.cache]
    load = [os.getloadavg()[0]]
    for scenario in ("uniform", "variable"):
        if args.scenario not in (scenario, "both"):
            continue
        for cache in modes:
            args.cache_now = cache
            if scenario == "uniform":
                # Identical GPUs: which GPUs a job gets cannot change its speed, so forward plays skip placement.
                cluster = ClusterSpec.homogeneous(args.nodes * args.gpus_per_node, args.gpus_per_node)
            else:
                # Measured variability + locality penalty: placement runs inside every forward play.
                cluster = variable_cluster(args.nodes, args.gpus_per_node, args.seed)
            results[f"{scenario}_gpus" + ("" if cache else "_no_cache")] = run(cluster, args)
            load.append(os.getloadavg()[0])
        if len(modes) == 2:
            off, on = results[f"{scenario}_gpus_no_cache"], results[f"{scenario}_gpus"]
            stp_on, stp_off = on["submit_to_prediction"], off["submit_to_prediction"]
            results[f"{scenario}_cache_vs_no_cache"] = {
                **{f"wall_{q}": stp_on[f"{q}_ms"] / stp_off[f"{q}_ms"] for q in ("p50", "p99")},
                **{f"cpu_{q}": stp_on["cpu"][f"{q}_ms"] / stp_off["cpu"][f"{q}_ms"] for q in ("p50", "p99")},
            }
    print(strict_json.dumps({
        "benchmark": "coordinator_latency", **results, "load_average_1min_at_end": os.getloadavg()[0],
        "load_average_1min_after_each_run": load,
        "note": "wall-clock on a shared 2-core machine; concurrent work inflates the tail",
    }, indent=2))


if __name__ == "__main__":
    main()
