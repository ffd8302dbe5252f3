"""A sweep whose driver is killed right after its submission gives its GPUs back within the lease, and the
next sweep finishes: `pcs-ray up --local`, one node with 2 logical GPUs, as the issue's user ran it.

Prints the figures (``-s``): how long the dead sweep held the GPUs after its driver died, and how long the
next sweep waited for them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pcs_ray.commands import local_cluster as lc

pytestmark = [pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the local launcher reads /proc"),
              pytest.mark.slow]  # a local Ray cluster through the CLI, and two Tune drivers

ROOT = Path(__file__).resolve().parent.parent
LEASE_S = 5.0

DRIVER = textwrap.dedent("""
    import json, os, signal, sys, tempfile, time
    from ray import tune
    from pcs_ray.executors.tune import PCSTuner
    from pcs_ray.client import Client

    def trainable(config):
        start = 0
        checkpoint = tune.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as d:
                start = json.load(open(os.path.join(d, "state.json")))["i"]
        for i in range(start, 3):
            time.sleep(0.5)
            with tempfile.TemporaryDirectory() as d:
                json.dump({"i": i + 1}, open(os.path.join(d, "state.json"), "w"))
                tune.report({"loss": config["lr"] / (i + 1)}, checkpoint=tune.Checkpoint.from_directory(d))

    tuner = PCSTuner(trainable, param_space={"lr": tune.grid_search([0.1, 0.2])}, iterations=3, client=Client(),
                     iteration_time=0.5, metric="loss", mode="min", storage_path=sys.argv[2])
    print(json.dumps({"job": tuner.job_id, "submitted": time.time()}), flush=True)
    if sys.argv[1] == "die":
        os.kill(os.getpid(), signal.SIGKILL)  # killed right after its submission, before it ever reached Ray
    tuner.fit()
    print("fit done", flush=True)
""")


def _cli(env, *args, timeout=180):
    proc = subprocess.run([sys.executable, "-m", "pcs_ray.cli", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"pcs-ray {args[0]} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _json(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))


def test_a_sweep_whose_driver_was_killed_frees_its_gpus_within_the_lease_and_the_next_sweep_finishes(tmp_path):
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS")}
    env.update(RAY_AUTH_TOKEN_PATH=str(token), PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0")
    state = tmp_path / "state"
    try:
        up = _cli(env, "up", "--local", "--nodes", 1, "--gpus-per-node", 2, "--state-dir", state,
                  "--limit", f"external_lease_s={LEASE_S:g}", "--json", timeout=300)
        env["RAY_ADDRESS"] = _json(up.stdout)["address"]
        driver = tmp_path / "driver.py"
        driver.write_text(DRIVER)

        dead = subprocess.run([sys.executable, str(driver), "die", str(tmp_path / "tune-dead")], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        killed_at = time.time()
        assert dead.returncode == -signal.SIGKILL, dead.stderr[-3000:]
        dead_job = _json(dead.stdout)["job"]

        live = subprocess.run([sys.executable, str(driver), "live", str(tmp_path / "tune-live")],
                              env={**env, "RAY_AUTH_MODE": "token"}, cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert live.returncode == 0 and "fit done" in live.stdout, live.stdout[-2000:] + live.stderr[-4000:]
        live_job = _json(live.stdout)["job"]

        jobs = {j["id"]: j for j in _json(_cli(env, "status", "--json").stdout)["jobs"]}
        gone, done = jobs[dead_job], jobs[live_job]
        assert gone["state"] == "failed" and gone["end_reason"]["code"] == "driver-lost", gone
        assert gone["steps"] == 0 and gone["gpus"] == []
        assert done["state"] == "finished" and done["steps"] == 2 * 3, done
        held_after_death = gone["segments"][-1]["end"] - killed_at
        waited = done["segments"][0]["start"] - killed_at
        print(json.dumps({"lease_s": LEASE_S, "gpus_held_after_driver_death_s": round(held_after_death, 2),
                          "next_sweep_waited_after_death_s": round(waited, 2),
                          "next_sweep_jct_s": round(done["finish"] - done["submit"], 2)}))
        assert held_after_death <= LEASE_S + 3.0  # the lease, the coordinator's loop and the clocks' reading
        assert done["segments"][0]["start"] >= gone["segments"][-1]["end"]
    finally:
        if (state / lc.STATE_FILE).exists():
            lc.down(state)
