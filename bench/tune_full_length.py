"""One of Ray Tune's own examples at full length on a 2-node cluster beside other jobs: its trials preempted and resumed.

    PYTHONPATH=. python bench/tune_full_length.py [--example custom_func_checkpointing.py] [--jobs 8] [--policy srsf]

Starts `pcs-ray up --local` (2 nodes x 1 logical GPU, ``--gpus-per-node``) in a temporary state folder,
sets the ``srsf`` policy (shortest remaining service first: a short job arriving takes a GPU from the
longer sweep at once; under ``fair`` an arrival waits once every job holds its share, and the sweep
gives a GPU up mostly as a trial ends), copies the example from the installed Ray wheel with only its
tuner lines changed (``tests/tune_examples.py``: the test suite's port) and runs it WITHOUT
``--smoke-test`` as a user would. Rigid one-GPU ``tiny_cnn`` jobs (``--jobs`` of them, ``--steps``
each) arrive while a trial runs on each of the sweep's GPUs, at most one every ``--every`` seconds: each
takes a GPU from the sweep, whose trial on it is paused with a checkpoint and resumed once a GPU is
back.

What it reads afterwards, from Tune's own files (each trial's ``result.json``, one row per report, and its
checkpoints): a row with ``iterations_since_restore == 1`` past the trial's first iteration is a resume;
the step the loop ran first after it (the example's ``iterations`` metric) against the step saved in the
trial's last checkpoint before it (``checkpoint.json``, written by the example): a resume loses no work
when it runs the step right after its checkpoint's.

Prints one JSON object: trials finished, the sweep's preemptions (pcs-ray's count) and the trial resumes,
each resume's first step against its last checkpoint (``trials``), the steps lost beyond checkpoints (must be 0)
and those run and checkpointed whose rows Tune never logged (a trial paused while its loop ran ahead), the
other jobs and how they ended, ``status`` polls whose sweep forecast was earlier than ``now`` (must be 0),
wall times and the load average. The sweep's ``preemptions`` count every hand-over it acknowledged, also
those where it gave up a GPU no trial was running on (its trials ending shrink it too). Progress lines go to stderr. The cluster is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import ROOT, Cli, cli_env, log, private_token, up_local

sys.path.insert(0, str(ROOT / "tests"))
from tune_examples import (  # the test suite's port of an example
    EXAMPLES,
    changed_lines,
    port,
)

from pcs_ray.api import strict_json

OTHER = "name: other\nworkload: tiny_cnn\nsteps: {steps}\ngpus: 1\ncheckpoint_every: 20\nparams: {{num_samples: 256, seed: 1}}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="custom_func_checkpointing.py", help="a function example that checkpoints")
    ap.add_argument("--every", type=float, default=1.5, help="fewest seconds between the other jobs' arrivals")
    ap.add_argument("--jobs", type=int, default=8, help="how many other jobs arrive")
    ap.add_argument("--at-row", type=int, default=5, help="an arrival comes while trials have reported at most this many rows")
    ap.add_argument("--gpus-per-node", type=int, default=1, help="logical GPUs of each of the 2 nodes")
    ap.add_argument("--policy", default="srsf", help="the cluster's policy (srsf: a shorter job takes a longer one's GPUs)")
    ap.add_argument("--steps", type=int, default=60, help="each other job's steps")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds the driver may run")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pcs-tune-full-"))
    token = private_token(work)
    (work / "other.yaml").write_text(OTHER.format(steps=args.steps))
    original = (EXAMPLES / args.example).read_text()
    script = work / args.example
    script.write_text(port(original))
    removed, added = changed_lines(original, script.read_text())
    out: dict = {"example": args.example, "smoke_test": False, "nodes": 2, "gpus": 2 * args.gpus_per_node, "policy": args.policy,
                 "tuner_lines_changed": {"removed": removed, "added": added}}
    began = time.time()
    out["load_avg_before"] = [round(x, 2) for x in os.getloadavg()]
    with up_local(Cli(cli_env(token)), work / "state", "--nodes", 2, "--gpus-per-node", args.gpus_per_node) as cluster:
        env = cli_env(token, RAY_ADDRESS=cluster.up["address"], PCS_RAY_API=cluster.up["api"])
        cli = Cli(env)
        cli("config", "set", "--policy", args.policy)
        out["cluster_up_s"] = round(time.time() - began, 1)
        record = json.loads((cluster.state_dir / "cluster.json").read_text())
        head_temp = Path(next(node["temp_dir"] for node in record["nodes"] if node["head"]))
        play(cli, env, work, script, head_temp, args, out)
    out["down"] = cluster.down
    out["bench_wall_s"] = round(time.time() - began, 1)
    out["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(strict_json.dumps(out, indent=1))


def play(cli: Cli, env: dict, work: Path, script: Path, head_temp: Path, args, out: dict) -> None:
    """The driver runs the example; the other jobs arrive while its sweep runs; then what happened is read.
    Status and submissions go through HTTP clients (a CLI process per poll would load the machine)."""
    from pcs_ray.client import Client

    os.environ["RAY_AUTH_TOKEN_PATH"] = env["RAY_AUTH_TOKEN_PATH"]
    os.environ.pop("RAY_AUTH_TOKEN", None)
    api = Client(api=env["PCS_RAY_API"])
    home = work / "home"  # Tune writes its results under ~/ray_results
    home.mkdir()
    before = {j["id"] for j in api.status()["jobs"]}
    driver_env = {**env, "RAY_AUTH_MODE": "token", "HOME": str(home)}
    driver_env.pop("PCS_RAY_API")
    started = time.time()
    driver = subprocess.Popen([sys.executable, str(script)], env=driver_env, cwd=work, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    polls = {"n": 0, "sweep_forecast_in_past": [], "sweep_states": []}
    sweep_id: list[int] = []
    others: list[int] = []
    arrivals: list[dict] = []
    sweep_gpus = [1]  # how many GPUs the sweep holds, as the latest poll saw
    done = threading.Event()

    def watch() -> None:
        """Polls status as users do: the sweep's states, and any forecast of it earlier than ``now``."""
        viewer = Client(api=env["PCS_RAY_API"])
        while not done.is_set():
            view = viewer.status()
            polls["n"] += 1
            now = view["now"]
            sweep = next((j for j in view["jobs"] if j["id"] not in before and j["name"] != "other"), None)
            if sweep is not None:
                sweep_id[:1] = [sweep["id"]]
                sweep_gpus[0] = max(1, len(sweep["gpus"]))
                if not polls["sweep_states"] or polls["sweep_states"][-1] != sweep["state"]:
                    polls["sweep_states"].append(sweep["state"])
                predicted = sweep["predicted_completion"]
                if sweep["state"] in ("queued", "running", "stopping") and predicted is not None and predicted < now:
                    polls["sweep_forecast_in_past"].append(round(now - predicted, 2))
            done.wait(0.5)

    def arrive() -> None:
        """An other job arrives while a trial runs on each of the sweep's GPUs (its ``result.json`` has some of
        its rows, the last fresh), at most every ``--every`` seconds: the GPU it takes then has a trial to
        pause. A trial's run is short (the example's ten 0.1 s steps) beside its actor's start, so arrivals on
        a clock alone mostly take a GPU whose trial has not started or has ended. Tune's
        driver writes the rows in its session's artifacts (on the head node), and copies them to
        ``~/ray_results`` later."""
        last = -float("inf")
        grew: dict[Path, tuple[int, float]] = {}  # per trial: its rows, and when their count last grew
        while not done.is_set() and len(others) < args.jobs:
            now = time.time()
            mid = []
            for r in head_temp.glob("session_*/artifacts/*/*/driver_artifacts/*/result.json"):
                with contextlib.suppress(FileNotFoundError):  # Tune moves a trial's files when it ends
                    rows = len(r.read_text().splitlines())
                    if r not in grew or grew[r][0] != rows:
                        grew[r] = (rows, now)
                    if now - grew[r][1] < 0.3 and 1 <= rows <= args.at_row:
                        mid.append((r, rows))
            if sweep_id and mid and len(mid) >= sweep_gpus[0] and now - last >= args.every:
                last = now
                others.append(api.submit(work / "other.yaml").id)
                arrivals.append({"trial_rows": mid[0][1], "submit_s": round(time.time() - now, 3)})
                log(f"other job {others[-1]} submitted ({len(others)}/{args.jobs}) in {arrivals[-1]['submit_s']} s "
                    f"while {mid[0][0].parent.name[:40]} runs ({mid[0][1]} rows)")
            done.wait(0.05)

    threads = [threading.Thread(target=watch, daemon=True), threading.Thread(target=arrive, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        stdout, stderr = driver.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        driver.kill()
        stdout, stderr = driver.communicate()
    out["driver"] = {"exit": driver.returncode, "wall_s": round(time.time() - started, 1),
                     "best": next((line for line in stdout.splitlines() if line.startswith("Best hyperparameters")), None)}
    if driver.returncode:
        out["driver"]["stderr_tail"] = stderr[-2000:]
    log(f"driver exited {driver.returncode} after {out['driver']['wall_s']} s")
    done.set()
    for thread in threads:
        thread.join()
    deadline = time.time() + 300
    while True:  # the other jobs end on their own
        jobs = {j["id"]: j for j in api.status()["jobs"]}
        if all(jobs[j]["state"] in ("finished", "failed", "cancelled", "timed_out") for j in others) or time.time() > deadline:
            break
        time.sleep(2)
    sweep = jobs.get(sweep_id[0]) if sweep_id else None
    out["sweep"] = None if sweep is None else {
        "id": sweep["id"], "name": sweep["name"], "state": sweep["state"], "steps": sweep["steps"],
        "preemptions": sweep["preemptions"], "attempts": sweep["attempts"], "lost_steps": sweep["lost_steps"],
        "gpu_counts": [len(s["gpus"]) for s in sweep["segments"]],
        "jct_s": round(sweep["finish"] - sweep["submit"], 1) if sweep["finish"] else None}
    out["status_polls"] = polls["n"]
    out["sweep_states_seen"] = polls["sweep_states"]
    out["sweep_forecast_in_past_s"] = polls["sweep_forecast_in_past"]  # how far behind now, per poll that saw one
    out["other_jobs"] = {"submitted": len(others), "arrivals": arrivals, "states": sorted(jobs[j]["state"] for j in others),
                         "preemptions": sum(jobs[j]["preemptions"] for j in others),
                         "jct_s": [round(jobs[j]["finish"] - jobs[j]["submit"], 1) for j in others if jobs[j]["finish"]]}
    out["trials"] = trials(home / "ray_results")


def trials(results: Path) -> dict:
    """Each trial's reports and resumes, from Tune's files.

    A resume's checkpoint is the newest one the trial saved before it (``checkpoint_<index>``: Tune numbers
    a trial's checkpoints in order, and keeps them all here), read from its ``checkpoint.json``. It can be
    newer than the last row: a trial paused while its loop ran ahead is saved with the newest checkpoint
    its loop reported, whose rows Tune then never logs (``steps_unlogged``: run and kept, not lost)."""
    per_trial, resumes = {}, []
    for result in sorted(results.glob("*/*/result.json")):
        rows = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        trial = result.parent
        name = rows[0]["trial_id"] if rows else trial.name
        saved = {int(c.name.rsplit("_", 1)[1]): json.loads((c / "checkpoint.json").read_text())["step"]
                 for c in trial.glob("checkpoint_*") if (c / "checkpoint.json").exists()}
        for prev, row in zip([None, *rows], rows):
            if prev is None or row.get("iterations_since_restore") != 1:
                continue
            after = int(row["checkpoint_dir_name"].rsplit("_", 1)[1]) if row.get("checkpoint_dir_name") else None
            before = [i for i in saved if after is None or i < after]
            ckpt = saved[max(before)] if before else None
            expected = 0 if ckpt is None else ckpt + 1  # the step after its newest checkpoint
            resumes.append({"trial": name, "at_iteration": row["training_iteration"],
                            "first_step_after": row["iterations"], "last_checkpoint_step": ckpt,
                            "last_step_logged_before": prev["iterations"],
                            "steps_lost": abs(row["iterations"] - expected),  # skipped, or redone before it
                            "steps_unlogged": max(0, expected - 1 - prev["iterations"])})
        per_trial[name] = {"reports": len(rows), "done": bool(rows and rows[-1].get("done")),
                           "last_iteration": rows[-1]["training_iteration"] if rows else 0,
                           "checkpoints": len(saved), "steps_seen": [r["iterations"] for r in rows]}
    return {"n": len(per_trial), "finished": sum(t["done"] for t in per_trial.values()),
            "resumed_trials": len({r["trial"] for r in resumes}), "resumes": resumes,
            "steps_lost_beyond_checkpoint": sum(r["steps_lost"] for r in resumes),
            "steps_unlogged": sum(r["steps_unlogged"] for r in resumes),
            "steps_repeated": sum(len(t["steps_seen"]) - len(set(t["steps_seen"])) for t in per_trial.values()),
            "per_trial": per_trial}


if __name__ == "__main__":
    main()
