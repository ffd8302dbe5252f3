"""Job lists, the simulated half of ``pcs-ray replay`` and calibration planning (no Ray)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pcs_ray.cluster import ClusterSpec
from pcs_ray.commands.calibrate import calibration_jobs, shapes_of_jobs
from pcs_ray.commands.demo_jobs import DEMO_WFQ, demo_jobs
from pcs_ray.commands.replay import summary
from pcs_ray.commands.replay_sim import sim_specs, simulate_joblist, speed_model
from pcs_ray.workloads.device_model import emulated_step_s
from pcs_ray.workloads.joblist import JobListError, bundled_joblists, parse_joblist, read_joblist

HEADER = "submit_s,name,workload,steps,gpus,min_gpus,class\n"


def test_bundled_lists_parse_and_the_demo_is_one_of_them():
    assert {"demo", "mixed-20"} <= set(bundled_joblists())
    demo = read_joblist("demo")
    assert len(demo) == 8 and demo[0].name == "resnet18-a" and demo[0].params["batch_size"] == 8
    mixed = read_joblist("mixed-20")
    assert len(mixed) == 20 and max(j.submit_s for j in mixed) <= 300
    assert [j.name for j in demo_jobs(10)][8:] == ["resnet18-a-2", "tinycnn-d-2"]


@pytest.mark.parametrize("row, message", [
    ("x,a,tiny_cnn,10,1,,", "line 2: submit_s must be a number"),
    ("-1,a,tiny_cnn,10,1,,", "line 2: submit_s must be a number >= 0"),
    ("0,a,nope,10,1,,", "line 2: unknown workload 'nope'"),
    ("0,a,tiny_cnn,1.5,1,,", "line 2: steps must be a whole number"),
    ("0,a,tiny_cnn,10,2,3,", "line 2: need 1 <= min_gpus <= gpus"),
    ("0,a,tiny_cnn,10,1,,E", "line 2: class must be A, B, C or D"),
    ("0,a,tiny_cnn,10,1", "line 2: 5 fields, the header has 7"),
    ("0,a,tiny_cnn,10,16,,", "line 2: the job needs 16 GPUs; the cluster has 8"),
])
def test_a_malformed_row_is_one_error_naming_its_line(row, message):
    with pytest.raises(JobListError, match=message):
        parse_joblist(HEADER + row + "\n", "list.csv", capacity=8)


def test_params_are_checked_against_the_catalog_and_names_are_unique():
    text = "submit_s,name,workload,steps,gpus,min_gpus,class,params\n"
    with pytest.raises(JobListError, match=r"line 2: params: batch_size"):
        parse_joblist(text + '0,a,tiny_cnn,10,1,,,"{""batch_size"": 0}"\n')
    with pytest.raises(JobListError, match="line 3: name 'a' is used twice"):
        parse_joblist(HEADER + "0,a,tiny_cnn,10,1,,\n1,a,tiny_cnn,10,1,,\n")
    with pytest.raises(JobListError, match="header must be"):
        parse_joblist("when,name\n0,a\n")


def test_the_simulated_side_uses_what_the_live_model_measured(tmp_path):
    jobs = parse_joblist(HEADER + "0,a,resnet18,10,2,,A\n")
    cluster = ClusterSpec.homogeneous(8, 4)  # every GPU nominal: no placement slowdown
    policy = {"policy": "pcs", **DEMO_WFQ}
    # No measurement: the emulated device's reference times, and the default start cost (3 s).
    prior = simulate_joblist(jobs, cluster, policy, "packed-sticky", None)["a"]
    assert prior["jct_s"] == pytest.approx(3.0 + 10 * emulated_step_s("resnet18", {}, 2), rel=1e-6)
    assert prior["predicted_jct_s"] == pytest.approx(prior["jct_s"])
    # Measured: 0.5 s per step on 2 GPUs and a 1 s start.
    key = "resnet18"
    speeds = {"steps": {key: {"2": {"mean": 0.5, "samples": [0.5]}}},
              "costs": {"resnet18": {"start": {"mean": 1.0, "samples": [1.0]}}}}
    measured = simulate_joblist(jobs, cluster, policy, "packed-sticky", speeds)["a"]
    assert measured["jct_s"] == pytest.approx(1.0 + 10 * 0.5)
    [spec] = sim_specs(jobs, speed_model(speeds))
    assert spec.start_cost == 1.0 and spec.move_cost == pytest.approx(1.0)  # no stop measured, resume = start


def test_summary_schema_and_gap():
    live = {"summary": {"jobs": 2, "finished": 2, "avg_jct_s": 11.0, "mean_abs_error_pct": 5.0,
                        "mean_abs_error_midlife_pct": 2.0, "preemptions": 0},
            "jobs": [{"name": n, "workload": "w", "state": "finished", "jct_s": j, "predicted_jct_s": j,
                      "error_pct": 0.0, "midlife_error_pct": 0.0, "preemptions": 0, "overruns": 0}
                     for n, j in (("a", 10.0), ("b", 12.0))]}
    sim = {"a": {"jct_s": 10.0, "predicted_jct_s": 10.0}, "b": {"jct_s": 10.0, "predicted_jct_s": 8.0}}
    out = summary(live, sim, 0, 1.0)
    assert out["avg_jct_gap_pct"] == pytest.approx(10.0)
    assert out["sim"]["mean_abs_error_pct"] == pytest.approx(12.5)
    assert set(out["live"]) >= {"jobs", "finished", "avg_jct_s", "mean_abs_error_pct", "mean_abs_error_midlife_pct"}
    assert set(out) >= {"live", "sim", "avg_jct_gap_pct", "emulation_overruns", "wall_s"}


def test_calibration_covers_every_shape_at_one_gpu_and_its_widest():
    jobs = parse_joblist(HEADER + "0,a,tiny_cnn,10,4,1,\n1,b,tiny_cnn,10,2,,\n")
    shapes = shapes_of_jobs(jobs)
    assert sorted(n for _, _, n in shapes) == [1, 2, 4]
    [first] = calibration_jobs(shapes[:1])
    assert first["class"] == "D" and first["gpus"] == first["min_gpus"] == 1


def test_replay_cli_sim_only_json_and_one_line_errors(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "pcs_ray.cli", "replay", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=120)
    ok = run("--trace", "demo", "--sim-only", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout.strip().splitlines()[-1])["sim"]["jobs"] == 8
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "0,a,tiny_cnn,10,1,,\n0,b,tiny_cnn,ten,1,,\n")
    err = run("--trace", str(bad), "--sim-only")
    assert err.returncode == 2 and err.stderr.strip().count("\n") == 0
    assert "line 3: steps must be a number" in err.stderr


def test_the_embedded_ray_starts_its_workers_at_nice_zero_and_leaves_the_environment_as_it_was(monkeypatch):
    """Ray's default worker niceness (15) lets any ordinary process preempt the runners that pace emulated devices."""
    import os

    from pcs_ray.commands import demo_ray

    seen = {}
    monkeypatch.setattr(demo_ray.ray, "init", lambda **kw: seen.update(niceness=os.environ.get("RAY_worker_niceness")))
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    demo_ray._start_ray(ClusterSpec.homogeneous(2, 2), "/tmp/unused")
    assert seen == {"niceness": "0"} and "RAY_worker_niceness" not in os.environ


def test_what_ray_prints_to_stdout_inside_the_embedded_cluster_goes_to_stderr(monkeypatch, capsys):
    """Raylet warnings reach the driver's stdout; `replay --json` and `demo` must still print one JSON object."""
    from pcs_ray.commands import demo_ray

    monkeypatch.setattr(demo_ray, "_start_ray", lambda cluster, temp: print("(raylet) WARNING: 8 workers"))
    monkeypatch.setattr(demo_ray, "start_coordinator", lambda config: "actor")
    monkeypatch.setattr(demo_ray.ray, "kill", lambda actor, no_restart: None)
    monkeypatch.setattr(demo_ray.ray, "shutdown", lambda: None)
    with demo_ray.demo_coordinator(ClusterSpec.homogeneous(2, 2), DEMO_WFQ):
        print("inside")
    print("after")
    out = capsys.readouterr()
    assert out.out == "after\n" and "(raylet) WARNING" in out.err and "inside" in out.err


def test_calibration_starts_its_runs_one_at_a_time():
    """A start burst on shared cores inflates every measured start and step: each run is submitted once the last stepped."""
    from types import SimpleNamespace

    from pcs_ray.commands.calibrate import run_calibration

    class Fake:
        def __init__(self):
            self.polls, self.events = {}, []

        def submit(self, spec):
            jid = len(self.polls)
            assert all(n >= 2 for n in self.polls.values()), "submitted before the last run reported a step"
            self.polls[jid] = 0
            self.events.append(("submit", jid))
            return SimpleNamespace(id=jid)

        def job(self, jid):
            self.polls[jid] += 1
            return {"id": jid, "state": "running", "steps": 1 if self.polls[jid] >= 2 else 0}

        def wait(self, jid, timeout):
            return {"id": jid, "state": "finished", "steps": 6}

    fake = Fake()
    views = run_calibration(fake, calibration_jobs([("tiny_cnn", {}, 1), ("resnet18", {}, 2), ("vgg11", {}, 1)]), 30.0)
    assert [e[1] for e in fake.events] == [0, 1, 2] and [v["state"] for v in views] == ["finished"] * 3
