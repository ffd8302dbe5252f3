"""How long a run of the user's own code takes to start on a node that has run its runtime env before.

Issue 29's target: a median of at most 2 s from the launch call to the loop's first report, on a
warm node. Each run is a fresh rank process with the job's runtime_env (``pcs_ray.executors.user_run``), so
the figure is Ray's worker start + the runtime env's setup (cached after the first run) + the
imports (torch) + the user module's import + one step, less what a pre-started spare process of
that runtime env already did (``pcs_ray.executors.user_spares``; ``user_runner_kinds`` counts the runs that
found one). Measured side by side in one run: the
built-in workloads' cold start (a fresh ``pcs_ray.executors.runner.Runner``, the anchor that pays a process
start and imports too) on the same logical GPU.

Prints one JSON object (stdout); progress goes to stderr. A private local Ray (token auth off for
it alone) with one logical GPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from common import start_ray, summary
from pcs_ray.api import strict_json

LOOP = '''
import torch
from pcs_ray.api import strict_json
import pcs_ray.train as train

def loop(config):
    w = torch.zeros(8)
    for step in range(1, train.get_context().total_steps + 1):
        w += 1
        train.report({"w": float(w[0])}, step=step)
'''


def starts(xs: list[float]) -> dict:
    out = summary(xs, ("median", "p90", "min", "max", "n"), unit="s", digits=3)
    out["runs"] = out.pop("n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=8, help="timed runs of each kind (after one untimed warm-up run)")
    args = ap.parse_args(argv)
    from pcs_ray.executors.launch import launch
    from pcs_ray.contract import GPUSlot, RunRequest

    work = Path(tempfile.mkdtemp(prefix="pcs-ray-user-start-"))
    (work / "code").mkdir()
    (work / "code" / "loop.py").write_text(LOOP)
    ray = start_ray(1, cpus=2, num_gpus=None)  # one logical GPU's resource; Ray's own GPU count as it finds it
    slot = (GPUSlot("node0", 0),)

    def user(k: int) -> RunRequest:
        return RunRequest(f"u{k}", "user:loop.py:loop", 3, slot, str(work / "ckpt" / f"u{k}"),
                          code={"entrypoint": "loop.py:loop", "working_dir": str(work / "code"), "config": {}},
                          log_dir=str(work / "logs" / f"u{k}"))

    def builtin(k: int) -> RunRequest:
        return RunRequest(f"b{k}", "tiny_cnn", 1, slot, str(work / "ckpt" / f"b{k}"), params={"num_samples": 64})

    kinds: dict[str, int] = {}  # user runs by the process they got: "spare" (pre-started) or "cold"
    figures: dict[str, list[float]] = {"user_first_report": [], "user_imported": [], "builtin_cold_first_step": []}
    for k in range(args.runs + 1):
        for kind, make in (("user", user), ("builtin", builtin)):
            handle = launch(make(k))
            outcome = handle.outcome(timeout=300)
            if outcome.status != "finished":
                print(strict_json.dumps({"error": f"{kind} run {k} {outcome.status}: {outcome.error}"}))
                return 1
            t = outcome.timings
            if k == 0:
                continue  # the first run installs the runtime env on the node: not a warm node yet
            if kind == "user":
                figures["user_first_report"].append(t["first_step"] - t["launched"])
                kinds[handle.runner] = kinds.get(handle.runner, 0) + 1
                figures["user_imported"].append(t["imported"] - t["launched"])
            else:
                figures["builtin_cold_first_step"].append(t["first_step"] - t["launched"])
        print(f"run {k}/{args.runs} done", file=sys.stderr, flush=True)
    ray.shutdown()
    out = {name: starts(xs) for name, xs in figures.items()}
    out["user_runner_kinds"] = kinds
    out["target_user_first_report_median_s"] = 2.0
    out["user_over_builtin_cold_median"] = round(out["user_first_report"]["median_s"] / out["builtin_cold_first_step"]["median_s"], 3)
    print(strict_json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
