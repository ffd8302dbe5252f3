"""The live CLI without a cluster: user errors are one line with status 2, node-resources, the demo's report."""

from __future__ import annotations

import json

import pytest

from pcs_ray.cli import run
from pcs_ray.commands.demo_cluster import demo_cluster
from pcs_ray.commands.demo_plot import plot_report
from pcs_ray.commands.demo_report import build_report


def test_submit_rejects_a_bad_file_before_connecting(tmp_path, capsys):
    bad = tmp_path / "job.yaml"
    bad.write_text("workload: tiny_cnn\nsteps: -1\nextra: 1\n")
    assert run(["submit", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "steps" in err and len(err.splitlines()) == 1
    assert run(["submit", str(tmp_path / "missing.yaml")]) == 2
    assert "no such job spec file" in capsys.readouterr().err


def test_start_rejects_a_bad_policy_before_connecting(capsys):
    assert run(["start", "--policy", "nonsense"]) == 2
    assert "unknown policy 'nonsense'" in capsys.readouterr().err
    assert run(["start", "--policy", "pcs"]) == 2
    assert "needs a WFQ configuration" in capsys.readouterr().err


def test_node_resources_from_a_declared_spec(tmp_path, capsys):
    spec = tmp_path / "cluster.yaml"
    spec.write_text("nodes:\n  - {name: gpu-a, gpus: 2}\n  - {name: gpu-b, gpus: 3}\n")
    assert run(["node-resources", "--cluster-spec", str(spec), "--node-name", "gpu-b", "--head"]) == 0
    out = capsys.readouterr().out.split()
    assert out[0] == "--head" and "--num-gpus=3" in out
    assert """--resources={"gpu-b_gpu0":1,"gpu-b_gpu1":1,"gpu-b_gpu2":1}""" in " ".join(out).replace("'", "")
    assert run(["node-resources", "--cluster-spec", str(spec), "--node-name", "gpu-a", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["node"]["source"] == "cluster-spec" and len(data["node"]["gpus"]) == 2
    assert run(["node-resources", "--cluster-spec", str(spec), "--node-name", "gpu-z"]) == 2
    assert "no node named 'gpu-z'" in capsys.readouterr().err


def test_help_explains_the_live_commands(capsys):
    for cmd in ("start", "submit", "status", "predict", "cancel", "stop", "node-resources", "demo"):
        assert run([cmd, "--help"]) == 0
    assert "ray start" in capsys.readouterr().out


def test_demo_cluster_uses_real_topology_and_variability(tmp_path):
    cluster, notes = demo_cluster(tmp_path, seed=1)
    assert [n.name for n in cluster.nodes] == ["node0", "node1"] and cluster.num_gpus == 8
    assert any("DGX-1" in n for n in notes) and any("PAL" in n for n in notes)
    scores = {cluster.score(g, "A") for g in cluster.gpu_ids()}
    assert len(scores) > 1  # GPUs differ
    from pcs_ray.cluster.topology import read_topo

    assert read_topo(cluster.nodes[0].topology).links[0][3] == "NV2"


def test_demo_report_and_plot_from_a_status(tmp_path):
    cluster, notes = demo_cluster(tmp_path, seed=1)
    t = 1000.0
    status = {
        "now": t + 100, "policy": {"policy": "pcs"}, "restart_overhead": 5.0,
        "jobs": [
            {"id": 1, "name": "a", "workload": "tiny_cnn", "class": "A", "state": "finished", "demand": [1, 2],
             "steps": 10, "total_steps": 10, "submit": t, "finish": t + 50, "preemptions": 1, "attempts": 2,
             "emulated": True, "segments": [
                 {"start": t + 1, "end": t + 20, "gpus": ["node0:0", "node0:1"], "kind": "start"},
                 {"start": t + 25, "end": t + 50, "gpus": ["node1:0"], "kind": "resize"}]},
            {"id": 2, "name": "b", "workload": "tiny_cnn", "class": "B", "state": "finished", "demand": [1, 1],
             "steps": 5, "total_steps": 5, "submit": t + 10, "finish": t + 40, "preemptions": 0, "attempts": 1,
             "emulated": True, "segments": [{"start": t + 20, "end": t + 40, "gpus": ["node0:0"], "kind": "start"}]},
        ],
    }
    submitted = {1: {"predicted": t + 40, "bound": t + 80, "history": [(t, t + 40), (t + 24, t + 48)]},
                 2: {"predicted": t + 40, "bound": t + 60, "history": [(t + 10, t + 40)]}}
    report = build_report(status, submitted, cluster, notes, wall_s=60.0)
    a, b = report["jobs"]
    assert a["jct_s"] == 50 and a["predicted_jct_s"] == 40 and a["error_pct"] == pytest.approx(25.0)
    assert a["midlife_predicted_jct_s"] == 48  # the prediction in force at t + 25
    assert b["error_pct"] == 0 and report["summary"]["mean_abs_error_pct"] == pytest.approx(12.5)
    assert report["summary"]["preemptions"] == 1 and report["summary"]["finished"] == 2
    plot_report(report, tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").stat().st_size > 10_000


def test_status_table_says_why_a_job_failed():
    from rich.console import Console

    from pcs_ray.commands.format import status_table

    job = {"id": 1, "name": "a", "class": "A", "state": "failed", "gpus": [], "steps": 3, "total_steps": 10,
           "step_time": None, "emulated": False, "finish": 1010.0, "predicted_completion": None, "bound": None,
           "preemptions": 0, "error": "Traceback (most recent call last):\n  File ...\nRuntimeError: CUDA out of memory\n"}
    ok = {**job, "id": 2, "name": "b", "state": "finished", "error": None}
    console = Console(record=True, width=250)
    console.print(status_table({"now": 1020.0, "jobs": [job, ok]}))
    text = console.export_text()
    assert "RuntimeError: CUDA out of memory" in text and "Traceback" not in text
    console.print(status_table({"now": 1020.0, "jobs": [ok]}))
    assert "error" not in console.export_text()  # no column when nothing failed


def test_status_explain_prints_the_placement_breakdown(capsys, monkeypatch):
    from pcs_ray.commands import live

    why = {"job_id": 3, "placement": "pal", "gpus": ["node0:1", "node0:2"], "source": "pal-lxv", "candidates": 6,
           "total": 1.7, "scores": [{"plugin": "variability", "value": 1.0, "weight": 1.0, "share": 0.0},
                                    {"plugin": "locality", "value": 1.7, "weight": 1.0, "share": 1.0}],
           "tie_breaks": [], "rejections": {"too-few-free": 2}}

    class FakeClient:
        def predict(self, jid):
            return {"id": jid, "placement": why if jid == 3 else None}

    monkeypatch.setattr(live, "coordinator_client", lambda *where: FakeClient())
    assert run(["status", "--explain", "3"]) == 0
    out = capsys.readouterr().out
    assert "pal chose node0:1 node0:2" in out and "locality" in out and "100%" in out and "too-few-free x2" in out
    assert run(["status", "--explain", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == why
    assert run(["status", "--explain", "4"]) == 0
    assert "has not been placed" in capsys.readouterr().out


def test_predict_says_how_the_submissions_forecast_was_played(capsys, monkeypatch):
    from pcs_ray.commands import live

    replies = {1: {"basis": "branch", "refresh_age_s": 1.25}, 2: {"basis": "fresh", "refresh_age_s": None},
               3: {"basis": None, "refresh_age_s": None}}

    class FakeClient:
        def predict(self, jid):
            return {"id": jid, "state": "queued", "predicted_completion": None, "bound": None, **replies[jid]}

    monkeypatch.setattr(live, "coordinator_client", lambda *where: FakeClient())
    said = {}
    for jid in replies:
        assert run(["predict", str(jid)]) == 0
        said[jid] = capsys.readouterr().out
    assert "branched from a refresh 1.2 s old" in said[1]
    assert "a fresh play" in said[2] and "at submission" not in said[3]
