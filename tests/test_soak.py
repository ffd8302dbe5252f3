"""A short soak (`bench/soak.py --minutes 2`): arrivals and every fault on a local 3-node cluster, and nothing
acknowledged lost or duplicated, no bad submission accepted, no step lost past the checkpoint interval,
nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.soak]  # a 3-node cluster for minutes: `pytest -m soak`

ROOT = Path(__file__).resolve().parent.parent


def test_a_short_soak_loses_and_duplicates_nothing_it_acknowledged():
    env = {k: v for k, v in os.environ.items()  # the suite's own Ray may run with auth off: the soak's has it on
           if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS", "PCS_RAY_API")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "bench/soak.py", "--minutes", "2", "--drain-minutes", "4", "--rate", "4",
                           "--limit", "ended_job_retention_s=30"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])  # Ray may print a node's death on stdout before it
    assert not out["interrupted"] and out["acknowledged"] > 0, out
    kinds = {f["kind"] for f in out["faults"] if "error" not in f and "skipped" not in f}
    assert {"coordinator", "worker_node", "hung_loop", "raising_loop", "bad_burst"} <= kinds, out["faults"]
    assert out["acknowledged_submissions_lost"] == 0, out["lost_names"]
    assert out["submissions_duplicated"] == 0 and out["ids_mismatched"] == 0
    assert out["bad_submissions_acknowledged"] == 0 and out["refused"]["bad_submissions"] == 8
    assert out["steps_lost_beyond_interval"] == 0, out["runs_losing_more_than_interval"]
    assert out["down_left_processes"] == 0 and out["after_down_alive"] == 0
