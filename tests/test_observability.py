"""Metrics readings from the coordinator core, the Grafana dashboard's queries, and `pcs-ray report` from a journal."""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path

import pytest

from pcs_ray.coordinator.metrics_export import readings
from pcs_ray.policies.reasons import WaitCode
from builders import Clock, coordinator, placed_core, submit_random, unequal_cluster

ROOT = Path(__file__).resolve().parent.parent


def test_readings_count_jobs_queues_gpus_preemptions_and_prediction_errors(tmp_path):
    clock = Clock()
    core = coordinator(gpus=4, per_node=2, policy="pcs-bal", journal=tmp_path / "journal.sqlite", clock=clock)
    small, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 1, "step_time": 0.1})
    big, _ = core.submit({"workload": "tiny", "steps": 100_000, "gpus": 4, "step_time": 1.0})
    core.play_refresh(force=True)
    r = readings(core)
    assert r.jobs["running"] + r.jobs["queued"] + r.jobs["stopping"] == 2
    assert r.gpus_allocated + r.gpus_idle == 4 and r.gpus_allocated == sum(len(j.gpus) for j in core.active.values())
    assert sum(a for a, _ in r.queues.values()) == 2 and len(r.queues) >= 1  # WFQ: every active job has a queue
    assert sum(r.reasons.values()) == r.jobs["queued"] == sum(w for _, w, _ in r.tenants.values())
    assert r.tenants[""][2] == r.gpus_allocated  # jobs without a tenant
    clock.t += 2.0
    core.run_ended(small, core.jobs[small].attempt, "finished", 10)
    r = readings(core)
    assert r.jobs["finished"] == 1 and small in r.finished_errors and r.finished_errors[small] >= 0
    assert readings(coordinator(gpus=4, per_node=2, clock=Clock())).queues == {}  # no WFQ, no queues


def test_the_grafana_dashboard_plots_every_metric_the_coordinator_exports():
    import pcs_ray.coordinator.metrics_export as telemetry

    dashboard = json.loads((ROOT / "grafana" / "pcs-ray-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    for metric in ("pcs_ray_jobs", "pcs_ray_wfq_queue_length", "pcs_ray_gpus", "pcs_ray_preemptions_total",
                   "pcs_ray_prediction_error_percent", "pcs_ray_waiting_jobs", "pcs_ray_tenant_jobs",
                   "pcs_ray_tenant_gpus"):
        assert metric in telemetry.__doc__ and f"ray_{metric}" in exprs


def test_report_draws_a_run_from_its_journal(tmp_path):
    from pcs_ray.cli import run

    state = tmp_path / "state"
    clock = Clock()
    core = coordinator(gpus=4, per_node=2, journal=state / "journal.sqlite", clock=clock)
    jid, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 0.1, "name": "first"})
    core.journal.append(core.now(), "predicted", jid, {"completion": core.now() + 5.0})
    clock.t += 1
    other, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 0.1})
    clock.t += 3
    core.run_ended(jid, 1, "finished", 10)
    clock.t += 2
    core.run_ended(other, 1, "finished", 10)
    core.journal.close()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run(["report", str(state), "--out", str(tmp_path / "r"), "--json"]) == 0
    result = json.loads(out.getvalue())
    assert (result["jobs"], result["finished"], result["predictions"]) == (2, 2, 1)
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    first = next(j for j in report["jobs"] if j["name"] == "first")
    assert first["jct_s"] == 4.0 and first["predicted_jct_s"] == 5.0 and first["segments"][0]["gpus"] == ["gpu0", "gpu1"]
    assert all((tmp_path / "r" / f).stat().st_size > 1000 for f in ("timeline.png", "jct-cdf.png"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert run(["report", str(tmp_path / "nothing")]) == 2
    assert err.getvalue().startswith("error: ") and err.getvalue().count("\n") == 1


@pytest.mark.parametrize("policy", ["pcs-bal", "srsf"])
def test_readings_taken_a_part_at_a_time_under_the_lock_are_the_readings_taken_at_once(policy):
    from pcs_ray.coordinator.call_lock import CallLock

    core, clock = placed_core(unequal_cluster(), policy)
    submit_random(core, clock, random.Random(4), count=40, gap=2.0)
    whole = readings(core)
    pauses = []
    parted = readings(core, CallLock(), lambda: pauses.append(1), part=7)
    assert parted == whole and len(pauses) >= 6  # 40 jobs, 7 a part
    assert sum(whole.reasons.values()) == len(core.waiting_codes()) > 10
    assert whole.reasons == {code.value: list(core.waiting_codes().values()).count(code.value) for code in WaitCode}
