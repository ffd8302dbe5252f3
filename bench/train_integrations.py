"""What pcs-ray costs a Ray Train script: the same script's ``fit()`` wall time under Ray Train alone and under
pcs-ray, side by side on one ``pcs-ray up --local`` cluster (issue 54; target: pcs-ray ≤ Ray Train + 5 %,
without preemptions).

Each script in ``bench/train_scripts/`` is written once; ``config["framework"]`` picks its imports (``ray`` or
``pcs_ray``), the only difference a ported script has. Ray Train's workers take one CPU each (``use_gpu=False``:
the cluster's GPUs are logical); pcs-ray's ranks hold one logical GPU each and run on the CPU too. Runs
alternate (Ray Train, pcs-ray, pcs-ray, Ray Train, ...) so that drift on this shared machine falls on both.
Prints one JSON object; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Cli, cli_env, log, private_token, up_local  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent / "train_scripts"
#: script → its loop's config: sized for about 20-40 s of training with 2 workers on a 2-core machine.
CONFIGS = {
    "plain": {"samples": 8192, "epochs": 6},
    "ray_data": {"rows": 8192, "epochs": 6, "batch": 16},
    "lightning_script": {"samples": 8192, "epochs": 6, "batch": 16},
    "transformers_script": {"samples": 1024, "epochs": 2, "batch": 8},
}


def run_once(env: dict, framework: str, script: str, config: dict, storage: Path) -> dict:
    config = {**config, "storage": str(storage)}
    proc = subprocess.run([sys.executable, str(SCRIPTS / "drive.py"), framework, script, json.dumps(config)],
                          env=env, cwd=SCRIPTS, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode:
        lines = [line for line in proc.stderr.splitlines() if "Error" in line and "Traceback" not in line]
        return {"error": (lines or proc.stderr.strip().splitlines() or ["no output"])[-1][:400]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", nargs="+", default=[s for s in CONFIGS if (SCRIPTS / f"{s}.py").exists()],
                        help="which scripts of bench/train_scripts/ (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each script under each framework")
    parser.add_argument("--workers", type=int, default=2, help="ranks per job (the cluster has as many GPUs)")
    args = parser.parse_args()
    out: dict = {"workers": args.workers, "repeats": args.repeats, "scripts": {}}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        cli = Cli(cli_env(private_token(tmp)))
        with up_local(cli, tmp / "state", "--nodes", 1, "--gpus-per-node", args.workers) as cluster:
            env = {**cli.env, "RAY_ADDRESS": cluster.up["address"], "PCS_RAY_API": cluster.up.get("api", ""),
                   "RAY_AUTH_MODE": "token", "PYTHONPATH": os.pathsep.join([str(SCRIPTS), cli.env["PYTHONPATH"]])}
            for script in args.scripts:
                config = {**CONFIGS[script], "workers": args.workers}
                times: dict[str, list[float]] = {"ray": [], "pcs_ray": []}
                loops: dict[str, list[float]] = {"ray": [], "pcs_ray": []}  # the loop's own time, where it says
                errors = []
                for rep in range(args.repeats):
                    for framework in (("ray", "pcs_ray") if rep % 2 == 0 else ("pcs_ray", "ray")):
                        got = run_once(env, framework, script, config, tmp / "ray-results")
                        log(f"{script} {framework} run {rep + 1}: {got.get('wall_s', got.get('error'))} "
                            f"{json.dumps(got.get('metrics', {}))}")  # the metrics show both did the same work
                        if "error" in got:
                            errors.append(f"{framework}: {got['error']}")
                        else:
                            times[framework].append(got["wall_s"])
                            if "loop_s" in got.get("metrics", {}):
                                loops[framework].append(got["metrics"]["loop_s"])
                row: dict = {"config": CONFIGS[script], "errors": errors}
                if times["ray"] and times["pcs_ray"]:
                    ray_s, ours = statistics.median(times["ray"]), statistics.median(times["pcs_ray"])
                    row.update(ray_train_s=times["ray"], pcs_ray_s=times["pcs_ray"], ray_train_median_s=ray_s,
                               pcs_ray_median_s=ours, ratio=round(ours / ray_s, 3),
                               within_target=ours / ray_s <= 1.05)
                if loops["ray"] and loops["pcs_ray"]:  # fit() less the loop: each framework's start and end
                    row.update(ray_train_loop_s=loops["ray"], pcs_ray_loop_s=loops["pcs_ray"],
                               loop_ratio=round(statistics.median(loops["pcs_ray"]) / statistics.median(loops["ray"]), 3))
                out["scripts"][script] = row
    out["target_ratio"] = 1.05
    print(json.dumps(out))


if __name__ == "__main__":
    main()
