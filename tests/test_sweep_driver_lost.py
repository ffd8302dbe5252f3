"""Sweeps whose driver is gone, on `pcs-ray up --local` (one node, 2 logical GPUs, a 5 s lease), as the
issue's user ran them: two drivers killed right after their submissions, the second's arrival asking the
first (dead) for a GPU and the second stopped by `cancel` while dead; both give their GPUs back within the
lease, each ends with the reason in `status`. A driver that cannot join Ray (authentication off, as the
issue's first run) fails with one line and submits nothing. A driver stuck for three leases (its main thread
asleep before `fit`) keeps its GPUs, since it lives, then its sweep finishes on them.

Prints the figures (``-s``): how long each dead sweep held GPUs after its driver died, and how long the
stuck driver's sweep waited for them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from builders import wait_until
from local_up import ROOT, cli, one_json, private_env

from pcs_ray.commands import local_cluster as lc

pytestmark = [pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the local launcher reads /proc"),
              pytest.mark.slow]  # a local Ray cluster through the CLI, and two Tune drivers

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
        os.kill(os.getpid(), signal.SIGKILL)  # killed right after its submission, before its first trial
    if sys.argv[1] == "stuck":
        time.sleep(float(sys.argv[3]))  # alive, but its main thread does nothing: its lease thread renews
    print(json.dumps({"fit": time.time()}), flush=True)
    tuner.fit()
    print("fit done", flush=True)
""")


def _driver(env, driver, mode, storage, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(driver), mode, str(storage), *map(str, extra)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sweeps_whose_driver_is_gone_free_their_gpus_within_the_lease_and_a_live_stuck_driver_keeps_them(
        tmp_path, monkeypatch):
    from pcs_ray.client import Client

    env = private_env(tmp_path)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", env["RAY_AUTH_TOKEN_PATH"])
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    state = tmp_path / "state"
    try:
        up = cli(env, "up", "--local", "--nodes", 1, "--gpus-per-node", 2, "--state-dir", state,
                 "--limit", f"external_lease_s={LEASE_S:g}", "--json", timeout=300)
        info = one_json(up.stdout)
        env["RAY_ADDRESS"] = info["address"]
        cli({**env, "PCS_RAY_API": info["api"]}, "config", "set", "--policy", "fair")  # an arrival takes a share
        api = Client(api=info["api"])
        driver = tmp_path / "driver.py"
        driver.write_text(DRIVER)

        # (b) Authentication off, as the first run: one line, and no sweep submitted.
        before = {j["id"] for j in api.status()["jobs"]}
        began = time.monotonic()
        refused = subprocess.run([sys.executable, str(driver), "live", str(tmp_path / "tune-refused")],
                                 env={**env, "RAY_AUTH_MODE": "disabled", "PCS_RAY_API": info["api"]}, cwd=ROOT,
                                 capture_output=True, text=True, timeout=180, check=False)
        refused_s = time.monotonic() - began
        assert refused.returncode != 0 and "the sweep was not submitted" in refused.stderr.strip().splitlines()[-1]
        assert {j["id"] for j in api.status()["jobs"]} == before

        # (a) Two drivers killed right after their submissions; the later arrival asks the earlier for a GPU.
        dead = [_driver(env, driver, "die", tmp_path / f"tune-dead{i}") for i in range(2)]
        died_at = {}  # each driver printed its job and then killed itself at once
        for proc in dead:
            line = one_json(proc.stdout.readline())
            died_at[line["job"]] = line["submitted"]
        first, second = sorted(died_at)
        seen: dict[int, list[str]] = {first: [], second: []}

        def states() -> dict[int, str]:
            now = {j["id"]: j["state"] for j in api.status()["jobs"] if j["id"] in seen}
            for jid, state_now in now.items():
                if state_now not in seen[jid]:
                    seen[jid].append(state_now)
            return now

        wait_until(lambda: states()[first] != "running", timeout=30, what="the second sweep's arrival to reach the first")
        handed_over = seen[first][-1] == "stopping"  # (c) a hand-over asked of a dead driver's sweep ...
        if handed_over:
            api.cancel(first)  # ... and a stop addressed to it: both complete when its lease lapses
        wait_until(lambda: all(s in ("failed", "cancelled") for s in states().values()), timeout=60,
                   what="both dead sweeps to end")
        assert all(proc.wait() == -signal.SIGKILL for proc in dead)

        # (d) A driver stuck for three leases keeps its GPUs (it lives), then its sweep finishes on them.
        stuck = _driver({**env, "RAY_AUTH_MODE": "token"}, driver, "stuck", tmp_path / "tune-stuck", 3 * LEASE_S)
        live_job = one_json(stuck.stdout.readline())["job"]
        woke = one_json(stuck.stdout.readline())["fit"]
        held = api.job(live_job)
        out, err = stuck.communicate(timeout=300)
        assert stuck.returncode == 0 and "fit done" in out, out[-2000:] + err[-4000:]

        jobs_now = {j["id"]: j for j in one_json(cli(env, "status", "--json").stdout)["jobs"]}
        one, two, done = jobs_now[first], jobs_now[second], jobs_now[live_job]
        assert handed_over, seen  # the first dead sweep was asked for a GPU while it held both
        assert one["state"] == "cancelled" and one["end_reason"]["code"] == "driver-lost", one
        assert two["state"] == "failed" and two["end_reason"]["code"] == "driver-lost", two
        for gone in (one, two):
            assert "lease" in gone["end_reason"]["text"] and gone["steps"] == 0 and gone["gpus"] == []
        assert held["state"] == "running" and held["gpus"] and woke - held["submit"] >= 3 * LEASE_S
        assert done["state"] == "finished" and done["steps"] == 2 * 3 and done["end_reason"] is None, done
        held_after_death = {jid: jobs_now[jid]["segments"][-1]["end"] - died_at[jid] for jid in died_at
                            if jobs_now[jid]["segments"]}
        print(json.dumps({"lease_s": LEASE_S, "states_seen": seen, "refused_driver_s": round(refused_s, 1),
                          "gpus_held_after_driver_death_s": {k: round(v, 2) for k, v in held_after_death.items()},
                          "next_sweep_waited_after_last_death_s": round(
                              done["segments"][0]["start"] - max(died_at.values()), 2),
                          "stuck_driver_kept_gpus_s": round(woke - done["segments"][0]["start"], 2),
                          "next_sweep_jct_s": round(done["finish"] - done["submit"], 2)}))
        assert held_after_death and all(v <= LEASE_S + 3.0 for v in held_after_death.values())
        assert done["segments"][0]["start"] >= max(jobs_now[j]["segments"][-1]["end"] for j in held_after_death)
    finally:
        if (state / lc.STATE_FILE).exists():
            lc.down(state)
