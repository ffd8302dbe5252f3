"""Live-vs-simulation fidelity: the bundled job lists replayed live and in the simulator, side by side.

Scenarios, each on a fresh embedded Ray with the demo's 8 logical GPUs
(2 nodes x 4, half-DGX-1 links, PAL's measured variability, emulated
devices), the built-in lists exactly as ``pcs-ray replay --trace NAME --live --json`` runs them:

* ``demo``: the demo's 8 jobs;
* ``mixed-20``: 20 jobs of mixed workloads and sizes over about 4 minutes;
* ``lone``: one 2-GPU ``tiny_cnn`` job on the idle cluster, after its
  workload has run (the calibration run): its prediction at submission
  against its JCT;
* ``user``: user code the cluster has never run (:data:`USER_JOBS`:
  ``examples/user-code/train_mlp.py:train_loop`` in three configs, on 1 and
  2 GPUs, one elastic; no ``step_time`` or a wrong one; no calibration).
  Its steps are real CPU work on the shared cores, not an emulated device,
  so its jobs run one after another unless ``--user-overlap``.

Targets (issue 12): mixed-20 |avg_jct_gap_pct| <= 10, live mean error at
submission <= the simulator's + 10 points, 0 emulation overruns; the lone
job's prediction within 10 % of its JCT. Issue 29 (``user``): every job's
forecast within 10 % once it has reported 10 % of its steps. Every list
reports the error (PCS's: ``|actual - predicted| / predicted`` of the JCT)
at submission, at a tenth of the steps and at mid-life. An emulation overrun is a step
that left its run more than one step behind its emulated device's schedule
(``pcs_ray.executors.emulation``); ``emulation_late_steps`` counts the steps that
ran over their own budget and were caught up on the schedule, shown beside
it. Prints one JSON object (stdout);
progress goes to stderr. Wall-clock on a shared 2-core machine: say what
else ran (the load average is printed with the figures).

Usage: ``python bench/live_fidelity.py [--lists demo,mixed-20,lone,user] [--deadline S] [--user-overlap]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

from common import ROOT
from pcs_ray.api import strict_json

LONE = "submit_s,name,workload,steps,gpus,min_gpus,class\n0,lone-tinycnn,tiny_cnn,300,2,2,A\n"
USER_CODE = ROOT / "examples" / "user-code"
WIDE = {"dim": 128, "hidden": 1024, "batch_size": 256}
NARROW = {"dim": 64, "hidden": 512, "batch_size": 128}
MID = {"dim": 96, "hidden": 768, "batch_size": 192}
#: (submit_s, name, config, steps, gpus, min_gpus, step_time): a first job with nothing to go on, a wrong
#: guess (tens of times too slow), a config first seen on 2 GPUs, an elastic job with a wrong guess, and a shape
#: seen before. About 30-50 s of steps each on an idle core: a tenth of them is several 1-s reports in
#: (at 15-25 s, the forecast in force at a tenth still rested on the report from 5 %: forecasts follow reports
#: by up to a second).
#: ``submit_s`` applies with ``--user-overlap``; by default each job is submitted once the one before
#: it ended, because these steps are real CPU work on the shared cores: overlapping jobs slow each other,
#: which jobs on GPUs of their own do not (an overlapped run on 2026-11-26 saw its steps slow 2-3x
#: mid-job as the next jobs started, at load average 7 to 54).
USER_JOBS = [
    (0, "u-wide", WIDE, 8000, 1, 1, None),
    (20, "u-narrow-guess", NARROW, 32000, 1, 1, 0.05),
    (50, "u-wide-ddp", WIDE, 6000, 2, 2, None),
    (80, "u-mid-elastic", MID, 7000, 2, 1, 0.5),
    (120, "u-wide-again", WIDE, 6000, 1, 1, None),
]


def user_arrivals() -> list[tuple[float, dict]]:
    """:data:`USER_JOBS` as job specs (``train_mlp.train_loop``, checkpointing four times)."""
    out = []
    for submit_s, name, config, steps, gpus, min_gpus, step_time in USER_JOBS:
        spec = {"name": name, "entrypoint": "train_mlp.py:train_loop", "working_dir": str(USER_CODE),
                "config": {**config, "checkpoint_every": steps // 4}, "steps": steps, "gpus": gpus,
                "min_gpus": min_gpus, "class": "B"}
        out.append((submit_s, spec if step_time is None else {**spec, "step_time": step_time}))
    return out


class _Recording:
    """The client, keeping what each submission's forecast still estimated (``estimated_from``)."""

    def __init__(self, client) -> None:
        self.client, self.estimated = client, {}

    def submit(self, spec):
        handle = self.client.submit(spec)
        self.estimated[handle.id] = self.client.predict(handle.id).get("estimated_from")
        return handle

    def status(self):
        return self.client.status()


def follow_user(client, arrivals: list, overlap: bool, deadline_s: float, err) -> tuple[dict, dict]:
    """``demo_poll.follow`` over the list: on schedule (``overlap``), else each job once the one before it ended."""
    import time

    from pcs_ray.commands.demo_poll import follow

    if overlap:
        return follow(client, arrivals, time.time(), deadline_s, False, err, title="user list")
    began, jobs, submitted, status = time.time(), [], {}, {}
    for _, spec in arrivals:
        left = deadline_s - (time.time() - began)
        if left <= 0:
            break
        status, one = follow(client, [(0.0, spec)], time.time(), left, False, err, title=spec["name"])
        jobs += status["jobs"]
        submitted.update(one)
    return {**status, "jobs": jobs}, submitted


def _forecasts(submit: float, sub: dict) -> list[list[float]]:
    """The job's forecast history as [seconds since submission, forecast JCT, steps reported], one entry per change."""
    out, last = [], None
    for when, predicted, *steps in sub.get("history", []):
        if (predicted, steps) != last:
            out.append([round(when - submit, 2), round(predicted - submit, 2), *steps])
            last = (predicted, steps)
    return out


def run_user(deadline_s: float, overlap: bool = False) -> dict:
    """The ``user`` list live on the demo's cluster, without calibration; errors as the report computes them."""
    import time

    from rich.console import Console

    from pcs_ray.commands.demo_cluster import demo_cluster
    from pcs_ray.commands.demo_jobs import DEMO_WFQ
    from pcs_ray.commands.demo_ray import demo_coordinator
    from pcs_ray.commands.demo_report import build_report
    from pcs_ray.commands.replay import wait_for_warm_runners

    err = Console(stderr=True)
    cluster, notes = demo_cluster(Path(tempfile.mkdtemp(prefix="pcs-ray-user-")), seed=1)
    with demo_coordinator(cluster, DEMO_WFQ) as client:
        began = time.time()
        wait_for_warm_runners(client, 180.0, err)  # their start-up would otherwise load the first jobs' cores
        recording = _Recording(client)
        status, submitted = follow_user(recording, user_arrivals(), overlap, deadline_s, err)
        report = build_report(status, submitted, cluster, notes, wall_s=time.time() - began)
    submits = {j["id"]: j["submit"] for j in status["jobs"]}
    keys = ("name", "state", "steps", "total_steps", "demand", "jct_s", "predicted_jct_s", "error_pct",
            "tenth_predicted_jct_s", "tenth_error_pct", "midlife_error_pct", "preemptions")
    jobs = [{**{k: j.get(k) for k in keys}, "estimated_at_submission": recording.estimated.get(j["id"]),
             "forecasts": _forecasts(submits[j["id"]], submitted.get(j["id"], {}))} for j in report["jobs"]]
    s = report["summary"]
    tenth = [j["tenth_error_pct"] for j in jobs]
    return {
        "jobs": jobs, "finished": s["finished"], "overlap": overlap,
        "mean_abs_error_pct": s["mean_abs_error_pct"], "mean_abs_error_tenth_pct": s["mean_abs_error_tenth_pct"],
        "mean_abs_error_midlife_pct": s["mean_abs_error_midlife_pct"],
        "learned_step_s": {k: {n: round(v["mean"], 5) for n, v in by_n.items()}
                           for k, by_n in status["speeds"]["steps"].items() if k.startswith("user:")},
        "targets_met": {"tenth_within_10pct": bool(tenth) and all(e is not None and e <= 10 for e in tenth)},
        "load_average": os.getloadavg(), "wall_s": s["wall_s"],
    }


def run(name: str) -> dict:
    from pcs_ray.commands.replay import replay

    trace = name
    if name == "lone":
        trace = str(Path(tempfile.mkdtemp(prefix="pcs-ray-lone-")) / "lone.csv")
        Path(trace).write_text(LONE)
    result = replay(trace, live=True, address=None, calibrate=True, deadline_s=900.0, seed=1, show_live=False)
    result["load_average"] = os.getloadavg()
    live, sim = result["live"], result["sim"]
    targets = {}
    if name == "mixed-20":
        targets = {
            "abs_avg_jct_gap_pct_le_10": result["avg_jct_gap_pct"] is not None and abs(result["avg_jct_gap_pct"]) <= 10,
            "live_error_le_sim_plus_10": live["mean_abs_error_pct"] is not None
            and live["mean_abs_error_pct"] <= (sim["mean_abs_error_pct"] or 0.0) + 10,
            "no_overruns": result["emulation_overruns"] == 0,
        }
    elif name == "lone":
        targets = {"prediction_within_10pct": live["mean_abs_error_pct"] is not None and live["mean_abs_error_pct"] <= 10}
    result["targets_met"] = targets
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lists", default="demo,mixed-20,lone", help="comma-separated: demo, mixed-20, lone, user")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds to follow the user list")
    parser.add_argument("--user-overlap", action="store_true", help="submit the user list on its schedule (see USER_JOBS)")
    args = parser.parse_args()
    out = {}
    # Ray's log monitor prints its runners' and raylets' lines to stdout: keep stdout for the one JSON object.
    with contextlib.redirect_stdout(sys.stderr):
        for name in [n.strip() for n in args.lists.split(",") if n.strip()]:
            print(f"replaying {name} ...", file=sys.stderr)
            if name == "user":
                out[name] = run_user(args.deadline, args.user_overlap)
                continue
            result = run(name)
            if name != "lone":
                jobs = result.pop("jobs", None) or []
                # where emulation fell behind: the jobs that overran or ran late, not every job's row
                result["jobs_behind"] = [{k: j.get(k) for k in ("name", "workload", "overruns", "late_steps")}
                                         for j in jobs if j.get("overruns") or j.get("late_steps")]
            out[name] = result
    print(strict_json.dumps(out))


if __name__ == "__main__":
    main()
