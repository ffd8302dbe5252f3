"""`ray job submit -- pcs-ray submit job.yaml --wait` against a real `ray start --head` on loopback;
then `pcs-ray start` without --policy (the solver's written configuration) and `pcs-ray config`.

The head is started with the arguments `pcs-ray node-resources` prints (its
per-GPU resources), on unique ports and its own temp dir, with token auth off
for this private instance, and stopped by the PIDs this test started.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real `ray start --head`

VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args, env, timeout=180, check=True):
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args[:3]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture
def ray_head(tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    spec = tmp_path / "cluster.yaml"
    spec.write_text("nodes:\n  - {name: loop0, gpus: 2}\n")
    node_args = _run([str(VENV_BIN / "pcs-ray"), "node-resources", "--cluster-spec", str(spec), "--node-name", "loop0"], env).stdout
    port, dash = _free_port(), _free_port()
    temp_dir = tempfile.mkdtemp(prefix="pcsray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    head = subprocess.Popen(
        [str(VENV_BIN / "ray"), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--temp-dir={temp_dir}", "--num-cpus=2", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dash}", "--disable-usage-stats", *shlex.split(node_args),
         # Unique agent ports too: another Ray on this machine may hold the defaults (52365, ...).
         f"--dashboard-agent-listen-port={_free_port()}", f"--dashboard-agent-grpc-port={_free_port()}",
         f"--runtime-env-agent-port={_free_port()}", f"--metrics-export-port={_free_port()}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # the job API answers once the dashboard is up
            probe = subprocess.run([str(VENV_BIN / "ray"), "job", "list", "--address", f"http://127.0.0.1:{dash}"],
                                   env=env, capture_output=True, text=True)
            if probe.returncode == 0:
                break
            if head.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"ray head did not come up: {probe.stderr[-2000:]}")
            time.sleep(2)
        yield {"env": env, "gcs": f"127.0.0.1:{port}", "dashboard": f"http://127.0.0.1:{dash}", "spec": spec,
               "state": tmp_path / "state"}
    finally:
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops the processes it started
        try:
            head.wait(timeout=15)
        except subprocess.TimeoutExpired:
            head.kill()
        try:
            os.killpg(head.pid, signal.SIGKILL)  # anything of ours left in its session
        except ProcessLookupError:
            pass


def ray_job_submit(ray_head, entrypoint: list[str]):
    """``ray job submit -- ENTRYPOINT`` to the loopback head (options before a ``--`` in ``entrypoint`` go to
    ``ray job submit``), retried while its job agent comes up."""
    options, entrypoint = (entrypoint[:entrypoint.index("--")], entrypoint[entrypoint.index("--") + 1:]) if "--" in entrypoint else ([], entrypoint)
    submit = [str(VENV_BIN / "ray"), "job", "submit", "--address", ray_head["dashboard"], *options, "--", *entrypoint]
    deadline = time.monotonic() + 90
    while True:  # the head's job agent comes up a little after its dashboard
        submitted = _run(submit, ray_head["env"], timeout=240, check=False)
        if "No available agent" not in submitted.stderr + submitted.stdout or time.monotonic() > deadline:
            return submitted
        time.sleep(3)


def test_ray_job_submit_runs_pcs_ray_submit_wait(ray_head, tmp_path):
    env = ray_head["env"]
    start = _run([str(VENV_BIN / "pcs-ray"), "start", "--address", ray_head["gcs"], "--cluster-spec",
                  str(ray_head["spec"]), "--policy", "fifo", "--state-dir", str(ray_head["state"])], env)
    assert "coordinator running" in start.stdout
    job = tmp_path / "job.yaml"
    job.write_text("workload: tiny_cnn\nsteps: 15\ngpus: 2\nstep_time: 0.02\nparams: {num_samples: 256}\n")
    submitted = ray_job_submit(ray_head, ["pcs-ray", "submit", str(job), "--wait"])
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    out = submitted.stdout
    assert "job 1 submitted: predicted completion" in out
    assert "job 1 finished at" in out and "JCT" in out

    # The user's own code from a driver: `ray job submit --working-dir examples/user-code -- python driver.py`.
    examples = Path(__file__).resolve().parent.parent / "examples" / "user-code"
    driver = ray_job_submit(ray_head, ["--working-dir", str(examples), "--", "python", "driver.py", "--steps", "30", "--gpus", "2"])
    assert driver.returncode == 0, driver.stdout[-3000:] + driver.stderr[-3000:]
    assert "job 2: predicted completion in" in driver.stdout and "job 2 finished: metrics {\"loss\":" in driver.stdout

    status = _run([str(VENV_BIN / "pcs-ray"), "status", "--json", "--address", ray_head["gcs"]], env)
    import json

    final, user = json.loads(status.stdout)["jobs"]
    assert user["workload"].startswith("user:train_mlp.py:train_loop@") and (user["steps"], user["state"]) == (30, "finished")
    logs = _run([str(VENV_BIN / "pcs-ray"), "logs", "2", "--address", ray_head["gcs"]], env)
    assert "done at step 30" in logs.stdout
    assert final["state"] == "finished" and final["steps"] == 15 and final["segments"][0]["gpus"] == ["loop0:0", "loop0:1"]
    stopped = _run([str(VENV_BIN / "pcs-ray"), "stop", "--address", ray_head["gcs"]], env)
    assert "coordinator stopped" in stopped.stdout
    assert (ray_head["state"] / "journal.sqlite").is_file()
    assert (ray_head["state"] / "history.jsonl").is_file()

    # Started again without --policy: the WFQ configuration `pcs-ray solve --set` wrote; then swapped.
    import math

    from pcs_ray.policies import WFQConfig
    from solver.preference import write_wfq_config

    chosen = WFQConfig.from_params((100.0, math.inf), W=1.0, zeta_min=0.0)
    env = {**env, "PCS_RAY_WFQ_CONFIG": str(write_wfq_config(chosen, tmp_path / "solver" / "wfq.json"))}
    pcs_ray = [str(VENV_BIN / "pcs-ray")]
    start = _run(pcs_ray + ["start", "--address", ray_head["gcs"], "--cluster-spec", str(ray_head["spec"]),
                            "--state-dir", str(ray_head["state"])], env)
    assert "policy pcs" in start.stdout and "written by `pcs-ray solve --set`" in start.stderr
    shown = json.loads(_run(pcs_ray + ["config", "show", "--json", "--address", ray_head["gcs"]], env).stdout)
    assert shown["source"] == "start" and shown["policy"]["class_thresholds"] == [100.0, "inf"]
    swapped = _run(pcs_ray + ["config", "set", "--policy", "srsf", "--address", ray_head["gcs"]], env)
    assert swapped.stdout.startswith("policy srsf (set with `pcs-ray config set`")
    _run(pcs_ray + ["stop", "--address", ray_head["gcs"]], env)
