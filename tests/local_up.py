"""A ``pcs-ray up --local`` cluster for a test, driven through the CLI as a user would: a private token
file (``~/.ray`` untouched), no ``RAY_AUTH_MODE`` set, and everything stopped by PID (``pcs-ray down``'s
record) when the test is done."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from pcs_ray.commands import local_cluster as lc

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "pcs_ray.cli"]
#: What a test's environment must not inherit: it names its own cluster, API and token.
INHERITED = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS", "PCS_RAY_API")


def private_env(tmp: Path, **extra: str) -> dict:
    """This process's environment with a fresh token file in ``tmp`` and no inherited cluster."""
    token = tmp / "token"
    token.write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    env.update(RAY_AUTH_TOKEN_PATH=str(token), PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


def one_json(stdout: str) -> dict:
    """The command's one JSON object: Ray itself may print a line into the same stdout (a raylet it saw die)."""
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))


def cli(env: dict, *args, timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess:
    """``pcs-ray ARGS`` in a subprocess; with ``check``, a non-zero exit fails the test with its output's tail."""
    proc = subprocess.run([*CLI, *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"pcs-ray {args[0]} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc


def status(env: dict) -> dict:
    return one_json(cli(env, "status", "--json", timeout=120).stdout)


@contextlib.contextmanager
def up_local(env: dict, state: Path, *options) -> Iterator[dict]:
    """``pcs-ray up --local OPTIONS --state-dir STATE``; yields ``up``'s JSON. The cluster is brought
    down on the way out, also when the test fails."""
    try:
        yield one_json(cli(env, "up", "--local", *options, "--state-dir", state, "--json", timeout=300).stdout)
    finally:
        if (state / lc.STATE_FILE).exists():
            lc.down(state)
