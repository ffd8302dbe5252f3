"""What jobs that give no total steps cost the other jobs' predictions, on a mixed stream.

    PYTHONPATH=. python bench/unknown_total.py [--jobs 40] [--unknown 0.3] [--seeds 3] [--policy pcs-bal]

The coordinator's core runs in this process on a simulated clock (2 nodes x 4 GPUs); a small
executor here plays each run exactly as the core's model expects it (linear scaling, the declared
step time, the core's start cost), so the only error left in a prediction is what the policy could
not know: later arrivals, and the sizes of jobs that gave none. The same stream (Poisson arrivals,
1 to 4 GPUs, 5 minutes to 3 hours of one GPU's work) is played twice: every job giving its
``steps``, then a fraction ``--unknown`` of them leaving ``steps`` out (their loops still stop at the
same step). Printed: the relative error of the prediction each job got at submission
(|predicted JCT - JCT| / JCT), for the jobs that gave their total, in both plays, and for the
jobs that gave none.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
from pathlib import Path

from pcs_ray.cluster import ClusterSpec
from pcs_ray.contract import StartRun, StopRun
from pcs_ray.coordinator import Coordinator, Journal
from pcs_ray.policies import build_policy

TICK_S = 30.0  # the executor's progress reports, and the core's review ticks
START_S = 3.0  # a run's start-up before its first step (the core's restart_overhead)


def stream(seed: int, jobs: int, unknown: float) -> list[dict]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(jobs):
        t += rng.expovariate(1 / 240.0)
        step_time = rng.choice([0.05, 0.2, 1.0])
        service = math.exp(rng.uniform(math.log(300), math.log(3 * 3600)))
        gpus = rng.choice([1, 1, 2, 4])
        out.append({"t": t, "i": i, "steps": max(1, round(service / step_time)), "step_time": step_time,
                    "gpus": gpus, "min_gpus": rng.choice([1, gpus]), "unknown": rng.random() < unknown})
    return out


def play(arrivals: list[dict], hide: bool, policy: str, code: Path) -> dict[int, dict]:
    now = [0.0]
    core = Coordinator(ClusterSpec.homogeneous(8, 4), build_policy(policy), Journal(":memory:"),
                       checkpoint_root=Path(tempfile.mkdtemp()) / "checkpoints", clock=lambda: now[0],
                       restart_overhead=START_S)
    running: dict[int, dict] = {}
    truth: dict[int, dict] = {}
    out: dict[int, dict] = {}

    def step_of(jid: int) -> int:
        run = running[jid]
        return min(truth[jid]["steps"], run["from"] + int(max(0.0, now[0] - run["begin"]) / run["pace"]))

    def apply(actions: list) -> None:
        queue = list(actions)
        while queue:
            action = queue.pop(0)
            if isinstance(action, StopRun) and action.job_id in running:
                step = step_of(action.job_id)
                run = running.pop(action.job_id)
                queue += core.run_ended(action.job_id, run["attempt"], "preempted", step)
            elif isinstance(action, StartRun):
                job = truth[action.job_id]
                n = len(action.request.gpus)
                running[action.job_id] = {"attempt": action.request.attempt, "begin": now[0] + START_S,
                                          "from": core.jobs[action.job_id].steps, "pace": job["step_time"] / n}

    pending = sorted(arrivals, key=lambda a: a["t"])
    next_tick = TICK_S
    while pending or running:
        finishes = {jid: run["begin"] + (truth[jid]["steps"] - run["from"]) * run["pace"] for jid, run in running.items()}
        candidates = [next_tick] + ([pending[0]["t"]] if pending else []) + list(finishes.values())
        now[0] = max(now[0], min(candidates))
        for jid, at in finishes.items():
            if at <= now[0] and jid in running:
                run = running.pop(jid)
                apply(core.run_ended(jid, run["attempt"], "finished", truth[jid]["steps"], run["pace"]))
                out[jid]["finish"] = now[0]
        while pending and pending[0]["t"] <= now[0]:
            a = pending.pop(0)
            spec = {"entrypoint": f"loop_{a['i']}.py:loop", "working_dir": str(code), "gpus": a["gpus"],
                    "min_gpus": a["min_gpus"], "step_time": a["step_time"], "scaling": "linear"}
            if not (hide and a["unknown"]):
                spec["steps"] = a["steps"]
            jid = core.next_id
            truth[jid] = a
            got, actions = core.submit(spec)
            assert got == jid
            out[jid] = {"submit": now[0], "predicted": core.prediction(jid)["predicted_completion"] - core.epoch,
                        "unknown": a["unknown"]}
            apply(actions)
        if now[0] >= next_tick:
            next_tick += TICK_S
            for jid, run in running.items():
                if now[0] >= run["begin"]:
                    core.progress(jid, step_of(jid), run["pace"])
            apply(core.tick())
    return out


def errors(result: dict[int, dict], unknown: bool) -> list[float]:
    return [abs((r["predicted"] - r["submit"]) - (r["finish"] - r["submit"])) / (r["finish"] - r["submit"])
            for r in result.values() if r["unknown"] == unknown]


def summary(values: list[float]) -> dict:
    return {"n": len(values), "mean_pct": round(100 * statistics.fmean(values), 1) if values else None,
            "median_pct": round(100 * statistics.median(values), 1) if values else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--unknown", type=float, default=0.3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--policy", default="pcs-bal")
    args = parser.parse_args()
    code = Path(tempfile.mkdtemp()) / "code"
    code.mkdir()
    for i in range(args.jobs):
        (code / f"loop_{i}.py").write_text("def loop(config):\n    pass\n")
    known_all, known_mixed, unknown_mixed, unknown_if_given = [], [], [], []
    for seed in range(args.seeds):
        arrivals = stream(seed, args.jobs, args.unknown)
        given = play(arrivals, hide=False, policy=args.policy, code=code)
        mixed = play(arrivals, hide=True, policy=args.policy, code=code)
        known_all += errors(given, False)
        known_mixed += errors(mixed, False)
        unknown_mixed += errors(mixed, True)
        unknown_if_given += errors(given, True)
    print(json.dumps({
        "jobs": args.jobs, "seeds": args.seeds, "unknown_fraction": args.unknown, "policy": args.policy,
        "cluster": "2 nodes x 4 GPUs",
        "known_jobs_all_totals_given": summary(known_all),
        "known_jobs_beside_unknown_totals": summary(known_mixed),
        "unknown_jobs_own_prediction": summary(unknown_mixed),
        "same_jobs_had_they_given_steps": summary(unknown_if_given),
    }))


if __name__ == "__main__":
    main()
