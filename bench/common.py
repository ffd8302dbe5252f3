"""What every bench script shares: progress lines, summary statistics, a private Ray, the ``pcs-ray`` CLI.

Bench scripts run as ``python bench/<name>.py`` from the repository root with pcs-ray installed (or
``PYTHONPATH=.``); Python puts the script's own folder first on ``sys.path``, so they import this
module as ``common``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import statistics
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What ``summary`` can report, by field name.
FIELDS = ("n", "mean", "median", "min", "max", "p50", "p90", "p99", "samples")


def log(message: str) -> None:
    """A progress line on stderr (stdout carries the script's JSON)."""
    print(message, file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile, interpolated between the closest ranks (numpy's default); NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (at - low))


def summary(values: Iterable[float], fields: Iterable[str] = ("n", "mean", "median", "min", "max"), unit: str = "",
            digits: int | None = None, scale: float = 1.0) -> dict:
    """``fields`` of ``values`` (each times ``scale``), keyed ``<field>_<unit>`` (``n`` keeps its name),
    rounded to ``digits`` when given. Without values every statistic is None and ``n`` is 0."""
    xs = [scale * v for v in values]
    known = {
        "n": lambda: len(xs), "mean": lambda: statistics.fmean(xs), "median": lambda: statistics.median(xs),
        "min": lambda: min(xs), "max": lambda: max(xs), "p50": lambda: percentile(xs, 50),
        "p90": lambda: percentile(xs, 90), "p99": lambda: percentile(xs, 99), "samples": lambda: list(xs),
    }
    out = {}
    for name in fields:
        if name not in known:
            raise ValueError(f"summary has no field {name!r} (it knows {', '.join(FIELDS)})")
        value = known[name]() if xs or name in ("n", "samples") else None
        if digits is not None and name != "n" and value is not None:
            value = [round(v, digits) for v in value] if name == "samples" else round(value, digits)
        out[name if name == "n" or not unit else f"{name}_{unit}"] = value
    return out


def start_ray(gpus: int | dict[str, int] = 0, cpus: int | None = None, **init):
    """A private Ray instance on this machine, authentication off for it alone; returns ``ray``.

    ``gpus``: logical GPUs of node ``node0``, or a count per node name, each registered as pcs-ray's
    per-GPU resources (``<node>_gpu<i>``). ``init``: more ``ray.init`` arguments (they win)."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray

    from pcs_ray.cluster.resources import node_gpu_resources

    nodes = {"node0": gpus} if isinstance(gpus, int) else dict(gpus)
    options: dict = {"address": "local", "num_cpus": cpus, "include_dashboard": False, "log_to_driver": False}
    if sum(nodes.values()):
        options["num_gpus"] = sum(nodes.values())
        options["resources"] = {k: v for node, n in nodes.items() for k, v in node_gpu_resources(node, n).items()}
    ray.init(**{**options, **init})
    return ray


def private_token(folder: Path) -> Path:
    """A fresh cluster token in ``folder/token``, readable by its owner only (``RAY_AUTH_TOKEN_PATH``)."""
    token = Path(folder) / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    return token


def cli_env(token: Path | None = None, pythonpath: str | Path = ROOT, **extra: str) -> dict:
    """The environment of a ``pcs-ray`` command as a new user's shell gives it: no cluster address, API or
    auth mode of the caller's; with ``token`` (a file), that token alone (``RAY_AUTH_TOKEN_PATH``).
    ``PYTHONPATH`` is ``pythonpath`` (this checkout), so the cluster's processes import this pcs-ray."""
    dropped = {"RAY_AUTH_MODE", "RAY_ADDRESS", "PCS_RAY_API", "PYTHONPATH"}
    if token is not None:
        dropped.add("RAY_AUTH_TOKEN")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONPATH"] = str(pythonpath)
    if token is not None:
        env["RAY_AUTH_TOKEN_PATH"] = str(token)
    env.update(extra)
    return env


class Cli:
    """Runs ``pcs-ray`` commands in a subprocess with one environment; a failed one raises with its stderr."""

    def __init__(self, env: dict, timeout: float = 300.0) -> None:
        self.env, self.timeout = env, timeout

    def __call__(self, *args, check: bool = True, timeout: float | None = None,
                 env: dict | None = None) -> subprocess.CompletedProcess:
        """``pcs-ray ARGS``; ``env``: variables to set for this command only."""
        words = [str(a) for a in args]
        proc = subprocess.run([sys.executable, "-m", "pcs_ray.cli", *words], env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=timeout or self.timeout, cwd=ROOT)
        if check and proc.returncode:
            raise RuntimeError(f"pcs-ray {' '.join(words[:3])} exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
        return proc

    def json(self, *args, **kw):
        """A ``--json`` command's output (its last line, where progress lines come before it)."""
        return json.loads(self(*args, "--json", **kw).stdout.strip().splitlines()[-1])


@dataclass
class LocalCluster:
    """A cluster ``up_local`` started: what ``up --json`` said, and what ``down --json`` said (after)."""

    up: dict
    state_dir: Path
    down: dict = field(default_factory=dict)


@contextlib.contextmanager
def up_local(cli: Cli, state_dir: Path, *options, timeout: float = 900.0,
             down_timeout: float = 300.0) -> Iterator[LocalCluster]:
    """``pcs-ray up --local OPTIONS --state-dir STATE_DIR``, then ``pcs-ray down`` whatever happened
    (its result, or its error, lands in ``.down``)."""
    cluster = LocalCluster({}, Path(state_dir))
    try:
        cluster.up = json.loads(cli("up", "--local", *options, "--state-dir", cluster.state_dir, "--json",
                                    timeout=timeout).stdout)
        yield cluster
    finally:
        if (cluster.state_dir / "cluster.json").exists():
            down = cli("down", "--state-dir", cluster.state_dir, "--json", check=False, timeout=down_timeout)
            cluster.down = {"rc": down.returncode}
            with contextlib.suppress(json.JSONDecodeError, IndexError):
                cluster.down.update(json.loads(down.stdout.strip().splitlines()[-1]))
            if down.returncode:
                cluster.down["stderr"] = down.stderr.strip()[-300:]
