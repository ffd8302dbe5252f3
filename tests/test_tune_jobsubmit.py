"""`ray job submit -- python examples/sweep.py` against a real `ray start --head` on loopback.

The loopback head is ``loopback_head``'s ``ray_head`` fixture.
"""

from __future__ import annotations

import pytest

import json
from pathlib import Path

from loopback_head import VENV_BIN, ray_job_submit, run_command

pytestmark = pytest.mark.slow  # a real `ray start --head` and a sweep


def test_ray_job_submit_runs_a_sweep_scheduled_by_pcs_ray(ray_head, tmp_path):
    env = ray_head["env"]
    run_command([str(VENV_BIN / "pcs-ray"), "start", "--address", ray_head["gcs"], "--cluster-spec", str(ray_head["spec"]),
                 "--policy", "fifo", "--state-dir", str(ray_head["state"])], env)
    submitted = ray_job_submit(ray_head, [
        str(VENV_BIN / "python"), str(Path(__file__).resolve().parent.parent / "examples" / "sweep.py"), "--lr", "0.05", "0.1", "--momentum", "0.0", "0.9",
        "--iterations", "2", "--num-samples", "128", "--iteration-time", "2", "--storage", str(tmp_path / "tune")])
    out = submitted.stdout
    assert submitted.returncode == 0, out[-3000:] + submitted.stderr[-3000:]
    assert "sweep 1 submitted: predicted completion" in out and "sweep 1 finished: JCT" in out
    predicted_in = float(out.split("predicted in ")[1].split("s)")[0])  # how soon: bench/tune_overhead.py
    assert predicted_in >= 0.0, out

    status = json.loads(run_command([str(VENV_BIN / "pcs-ray"), "status", "--json", "--address", ray_head["gcs"]], env).stdout)
    [sweep] = status["jobs"]
    assert sweep["state"] == "finished" and sweep["steps"] == 4 * 2
    assert {g for s in sweep["segments"] for g in s["gpus"]} <= {"loop0:0", "loop0:1"}
    predicted = json.loads(run_command([str(VENV_BIN / "pcs-ray"), "predict", "1", "--json", "--address", ray_head["gcs"]], env).stdout)
    assert predicted["state"] == "finished" and predicted["first_predicted"] is not None
    run_command([str(VENV_BIN / "pcs-ray"), "stop", "--address", ray_head["gcs"]], env)
