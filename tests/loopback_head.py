"""A real `ray start --head` on loopback, for the tests that submit through Ray's job API: the ``ray_head``
fixture (registered in conftest.py), the commands run against it and ``ray job submit`` to it.

The head is started with the arguments `pcs-ray node-resources` prints (its per-GPU resources), on unique
ports and its own temp dir, with token auth off for this private instance, and stopped by the PIDs it started.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_command(args, env, timeout=180, check=True):
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args[:3]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _start_head(env, node_args: str):
    """`ray start --head --block` on fresh ports and its own temp dir: (process, dashboard URL, GCS address, temp dir)."""
    port, dash = free_port(), free_port()
    temp_dir = tempfile.mkdtemp(prefix="pcsray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    head = subprocess.Popen(
        [str(VENV_BIN / "ray"), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--temp-dir={temp_dir}", "--num-cpus=2", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dash}", "--disable-usage-stats", *shlex.split(node_args),
         # Unique agent ports too: another Ray on this machine may hold the defaults (52365, ...).
         f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
         f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    return head, f"http://127.0.0.1:{dash}", f"127.0.0.1:{port}", temp_dir


def _stop_head(head) -> None:
    head.send_signal(signal.SIGTERM)  # `ray start --block` stops the processes it started
    try:
        head.wait(timeout=15)
    except subprocess.TimeoutExpired:
        head.kill()
    try:
        os.killpg(head.pid, signal.SIGKILL)  # anything of ours left in its session
    except ProcessLookupError:
        pass


def _job_agent_answers(head, dashboard: str, env, within: float) -> str | None:
    """None once the head takes a job (a `--no-wait` job that does nothing), else why not.

    The dashboard answers before the head's job agent has registered, and an agent that failed to start
    (a port taken between `free_port` and Ray binding it) never does: Ray then answers every submission
    with "No available agent to submit job"."""
    deadline = time.monotonic() + within
    while True:
        probe = subprocess.run([str(VENV_BIN / "ray"), "job", "submit", "--address", dashboard, "--no-wait",
                                "--submission-id", f"pcsray-probe-{uuid.uuid4().hex[:8]}", "--", "true"],
                               env=env, capture_output=True, text=True, timeout=120)
        if probe.returncode == 0:
            return None
        if head.poll() is not None or time.monotonic() > deadline:
            return (probe.stderr or probe.stdout)[-1500:]
        time.sleep(2)


def _agent_log_tail(temp_dir: str) -> str:
    logs = sorted(Path(temp_dir).glob("session_*/logs/dashboard_agent.log"))
    return logs[-1].read_text(errors="replace")[-1500:] if logs else "(no dashboard_agent.log)"


@pytest.fixture
def ray_head(tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    spec = tmp_path / "cluster.yaml"
    spec.write_text("nodes:\n  - {name: loop0, gpus: 2}\n")
    node_args = run_command([str(VENV_BIN / "pcs-ray"), "node-resources", "--cluster-spec", str(spec), "--node-name", "loop0"], env).stdout
    failures = []
    for _attempt in range(3):  # a head whose job agent never comes up is started again on other ports
        head, dashboard, gcs, temp_dir = _start_head(env, node_args)
        why = _job_agent_answers(head, dashboard, env, within=90)
        if why is None:
            break
        failures.append(f"{why}\n--- dashboard_agent.log ---\n{_agent_log_tail(temp_dir)}")
        _stop_head(head)
    else:
        raise AssertionError("ray head's job agent did not come up in 3 tries:\n" + "\n=====\n".join(failures))
    try:
        yield {"env": env, "gcs": gcs, "dashboard": dashboard, "spec": spec, "state": tmp_path / "state"}
    finally:
        _stop_head(head)


def ray_job_submit(ray_head, entrypoint: list[str]):
    """``ray job submit -- ENTRYPOINT`` to the loopback head (options before a ``--`` in ``entrypoint`` go to
    ``ray job submit``); the ``ray_head`` fixture has already seen its job agent take a job.

    Ray's CLI follows the job's output over a WebSocket, and it exits 1 when that connection drops
    (close code 1006: a loaded machine) even though the job goes on. The job's outcome and output are then
    read from Ray's job API, as a user would (``followed_up``)."""
    options, entrypoint = (entrypoint[:entrypoint.index("--")], entrypoint[entrypoint.index("--") + 1:]) if "--" in entrypoint else ([], entrypoint)
    submission = f"pcsray-test-{uuid.uuid4().hex[:12]}"
    submit = [str(VENV_BIN / "ray"), "job", "submit", "--address", ray_head["dashboard"], "--submission-id",
              submission, *options, "--", *entrypoint]
    submitted = run_command(submit, ray_head["env"], timeout=240, check=False)
    if any(drop in submitted.stderr for drop in TAIL_DROPPED):
        return followed_up(ray_head, submission, submitted)
    return submitted


#: What Ray's CLI prints when its WebSocket to the job's output drops while the job runs.
TAIL_DROPPED = ("WebSocket connection closed unexpectedly", "WebSocket error while tailing logs")


def followed_up(ray_head, submission: str, submitted: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """The outcome of a job whose output stream dropped: its status once terminal, and its whole output
    (Ray's job SDK, in a process with the CLI's environment)."""
    probe = (
        "import json, sys, time\n"
        "from ray.job_submission import JobSubmissionClient\n"
        "client = JobSubmissionClient(sys.argv[1])\n"
        "deadline = time.monotonic() + 240\n"
        "while not client.get_job_status(sys.argv[2]).is_terminal() and time.monotonic() < deadline:\n"
        "    time.sleep(1)\n"
        "status = client.get_job_status(sys.argv[2])\n"
        "print(json.dumps({'status': status.value, 'logs': client.get_job_logs(sys.argv[2])}))\n"
    )
    asked = run_command([sys.executable, "-c", probe, ray_head["dashboard"], submission], ray_head["env"], timeout=300,
                        check=False)
    try:
        found = json.loads(asked.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        found = {"status": f"unknown ({asked.stderr.strip()[-500:]})", "logs": ""}
    note = f"\n[ray job submit's output stream dropped; the job ended {found['status']}]\n"
    return subprocess.CompletedProcess(submitted.args, 0 if found["status"] == "SUCCEEDED" else 1, found["logs"],
                                       submitted.stderr + note)
