"""``pcs-ray simulate``: JSON and table output, per-job CSV, and one-line errors for bad input."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path
import sys

import pytest
import yaml

from pcs_ray.commands.views import PER_JOB_COLUMNS
from pcs_ray.data import data_dir, pcs_config
from pcs_ray.policies import POLICIES
from builders import invoke

REPO_ROOT = Path(__file__).resolve().parent.parent

SMALL = ["simulate", "--workload", "themis1", "--num-jobs", "30", "--gpus", "16"]
TRACE = data_dir() / "pcs" / "traces" / "trace_51b7ef.csv"

SUMMARY_KEYS = {
    "policy", "jobs", "gpus", "avg_jct", "p50_jct", "p99_jct", "makespan", "avg_pred_err", "p99_pred_err",
    "avg_unfairness", "p99_unfairness", "utilization", "wall_s", "workload",
}
ALL_LABELS = [  # tenants wraps another policy: it runs when named, not in all
    label for name in POLICIES if name != "tenants"
    for label in (["pcs-jct", "pcs-bal", "pcs-pred"] if name == "pcs" else [name])
]


def run_json(capsys, *args):
    code, out, err = invoke(capsys, *args, "--json")
    assert code == 0, err
    assert err == ""  # no progress noise when stderr is not a terminal
    return json.loads(out)  # the whole of stdout is exactly one JSON document


# --- JSON output ---------------------------------------------------------------


def test_json_single_policy(capsys):
    data = run_json(capsys, *SMALL, "--policy", "fifo")
    assert isinstance(data, dict)
    assert SUMMARY_KEYS <= data.keys()
    assert data["policy"] == "fifo" and data["jobs"] == 30 and data["gpus"] == 16
    assert data["avg_pred_err"] == 0.0 and data["p99_pred_err"] == 0.0  # FIFO's first prediction is exact
    assert 0 < data["utilization"] <= 1
    assert data["avg_jct"] > 0 and data["p99_jct"] >= data["p50_jct"]
    assert data["workload"] == {
        "source": "generated", "workload": "themis1", "num_jobs": 30, "load": 0.9, "seed": 4567, "jobs": 30,
        "gpus": 16, "nodes": 1, "gpus_per_node": 16, "cluster": None, "overhead": 0.0, "predict": True,
        "semantics": "continuous",
    }


def test_num_apps_still_works_with_a_warning_and_help_shows_only_num_jobs(capsys):
    new = run_json(capsys, "simulate", "--num-jobs", "12", "--gpus", "8", "-p", "fifo", "--no-predict")
    code, out, err = invoke(capsys, "simulate", "--num-apps", "12", "--gpus", "8", "-p", "fifo", "--no-predict", "--json")
    assert code == 0 and err == "warning: --num-apps is deprecated; use --num-jobs\n"
    old = json.loads(out)
    assert old["workload"]["num_jobs"] == 12 and {**old, "wall_s": 0} == {**new, "wall_s": 0}
    for command in ("simulate", "solve"):
        code, out, _ = invoke(capsys, command, "--help")
        assert code == 0 and "--num-jobs" in out and "--num-apps" not in out


def test_json_is_deterministic_for_a_seed(capsys):
    a = run_json(capsys, *SMALL, "-p", "srsf", "--seed", "7")
    b = run_json(capsys, *SMALL, "-p", "srsf", "--seed", "7")
    c = run_json(capsys, *SMALL, "-p", "srsf", "--seed", "8")
    assert a["avg_jct"] == b["avg_jct"] != c["avg_jct"]


def test_workers_give_the_same_json(capsys):
    args = ["simulate", "--num-jobs", "30", "--gpus", "8", "-p", "pcs-jct", "--json"]
    serial = run_json(capsys, *args)
    parallel = run_json(capsys, *args, "--workers", "2")
    for d in (serial, parallel):
        d.pop("wall_s", None)
    assert parallel == serial


@pytest.mark.parametrize("placing", [
    ["--placement", "pal,packed-sticky", "--gpus-per-node", "8"],
    ["--placement", "mapa-preserve", "--topology", "dgx1-v100"],
    ["--placement", "pal", "--gpus-per-node", "8", "--run-variability", "longhorn", "--profile-seed", "3"],
], ids=["pal-and-sticky", "mapa", "run-variability"])
def test_workers_with_placements_give_the_same_json(capsys, placing):
    """Each process replays the schedule on its own copy of the placement; this one's, which replays it too,
    gives the placement summary and the slow runs: the same as in one process."""
    args = ["simulate", "--num-jobs", "40", "--gpus", "16", "-p", "pcs-jct", *placing]
    serial = run_json(capsys, *args)
    parallel = run_json(capsys, *args, "--workers", "2")
    assert "placement" in json.dumps(serial)
    assert _without_wall(parallel) == _without_wall(serial)


def _without_wall(data):
    if isinstance(data, dict):
        return {k: _without_wall(v) for k, v in data.items() if k != "wall_s"}
    if isinstance(data, list):
        return [_without_wall(v) for v in data]
    return data


def test_no_predict_gives_null_errors(capsys):
    data = run_json(capsys, *SMALL, "--policy", "srsf", "--no-predict")
    assert data["avg_pred_err"] is None and data["p99_pred_err"] is None
    assert data["avg_jct"] > 0
    assert data["workload"]["predict"] is False


def test_json_several_policies(capsys):
    data = run_json(capsys, *SMALL, "--policy", "fifo,srsf", "-p", "pcs", "-p", "fifo")
    assert set(data) == {"runs", "workload"}
    assert [r["policy"] for r in data["runs"]] == ["fifo", "srsf", "pcs-jct", "pcs-bal", "pcs-pred"]
    for run in data["runs"]:
        assert SUMMARY_KEYS - {"workload"} <= run.keys()
        assert run["jobs"] == 30
    configs = {r["policy"]: r["config"] for r in data["runs"]}
    assert configs["pcs-pred"]["num_classes"] >= 1 and configs["fifo"] == {"policy": "fifo"}


def test_default_runs_every_policy(capsys):
    data = run_json(capsys, *SMALL, "--num-jobs", "12", "--no-predict")
    assert [r["policy"] for r in data["runs"]] == ALL_LABELS


def test_pcs_config_files_are_labelled_by_stem(capsys, tmp_path):
    a = shutil.copy(pcs_config("themis1", "jct"), tmp_path / "mine.json")
    b = shutil.copy(pcs_config("themis1", "pred"), tmp_path / "other.json")
    data = run_json(capsys, *SMALL, "-p", "fifo,pcs", "--pcs-config", a, "--pcs-config", b)
    assert [r["policy"] for r in data["runs"]] == ["fifo", "pcs:mine", "pcs:other"]
    bundled = run_json(capsys, *SMALL, "-p", "pcs-jct")
    assert data["runs"][1]["avg_jct"] == bundled["avg_jct"]


def test_cluster_spec_sets_the_capacity(capsys, tmp_path):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump({"nodes": [{"name": "x", "gpus": 4}, {"name": "y", "gpus": 4}]}))
    data = run_json(capsys, *SMALL, "-p", "fifo", "--cluster", spec, "--gpus", "999")
    assert data["gpus"] == 8
    w = data["workload"]
    assert (w["gpus"], w["nodes"], w["gpus_per_node"], w["cluster"]) == (8, 2, 4, str(spec))
    split = run_json(capsys, *SMALL, "-p", "fifo", "--gpus", "10", "--gpus-per-node", "4")
    assert (split["workload"]["nodes"], split["workload"]["gpus_per_node"]) == (3, None)


def test_real_trace(capsys):
    data = run_json(capsys, "simulate", "--trace", TRACE, "--gpus", "8", "-p", "fifo,pcs-bal")
    with TRACE.open() as f:
        n = sum(1 for _ in csv.DictReader(f))
    assert [r["jobs"] for r in data["runs"]] == [n, n]
    assert data["runs"][0]["avg_pred_err"] == 0.0
    # A PCS/Philly trace is scaled by its model curves unless told otherwise, as the artifact replays it.
    assert data["workload"]["source"] == "trace" and data["workload"]["speedup"] == "model"


def test_real_trace_with_model_speedups(capsys):
    linear = run_json(capsys, "simulate", "--trace", TRACE, "--gpus", "8", "-p", "srtf", "--speedup", "linear")
    model = run_json(capsys, "simulate", "--trace", TRACE, "--gpus", "8", "-p", "srtf", "--speedup", "model")
    default = run_json(capsys, "simulate", "--trace", TRACE, "--gpus", "8", "-p", "srtf")
    assert model["workload"]["speedup"] == "model" and linear["workload"]["speedup"] == "linear"
    assert model["jobs"] == linear["jobs"]
    assert default["avg_jct"] == model["avg_jct"] != linear["avg_jct"]


# --- table and per-job CSV --------------------------------------------------------


def test_table_output(capsys):
    code, out, err = invoke(capsys, *SMALL, "-p", "fifo,srsf,pcs-bal")
    assert code == 0, err
    lines = out.splitlines()
    assert any("themis1: 30 jobs" in line and "16 GPUs" in line for line in lines)
    rows = {line.split()[1]: line for line in lines if line.startswith("│")}
    assert set(rows) == {"fifo", "srsf", "pcs-bal"}
    assert "1.000" in rows["fifo"]  # average JCT normalised to the first row
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_per_job_csv(capsys, tmp_path):
    path = tmp_path / "jobs.csv"
    data = run_json(capsys, *SMALL, "-p", "fifo,srsf", "--per-job", path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == PER_JOB_COLUMNS
    assert len(rows) == 60
    assert [r["policy"] for r in rows] == ["fifo"] * 30 + ["srsf"] * 30
    for r in rows:
        assert float(r["jct"]) == pytest.approx(float(r["finish"]) - float(r["submit"]))
        assert float(r["start"]) >= float(r["submit"])
        assert int(r["refreshes"]) >= 0 and int(r["preemptions"]) >= 0
    fifo_jcts = [float(r["jct"]) for r in rows if r["policy"] == "fifo"]
    assert sum(fifo_jcts) / 30 == pytest.approx(data["runs"][0]["avg_jct"])
    assert all(r["first_pred"] == r["last_pred"] == r["finish"] for r in rows if r["policy"] == "fifo")

    run_json(capsys, *SMALL, "-p", "fifo", "--no-predict", "--per-job", path)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 30 and all(r["first_pred"] == "" and r["bound"] == "" for r in rows)
    assert all(r["gpus"] == r["placement_scores"] == "" for r in rows)  # no placement: nothing to explain


def test_per_job_csv_explains_each_placement(capsys, tmp_path):
    path = tmp_path / "jobs.csv"
    run_json(capsys, *SMALL, "-p", "fifo", "--no-predict", "--gpus-per-node", "4", "--placement", "pal",
             "--profile", "longhorn", "--locality-penalty", "1.7", "--per-job", path)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 30
    for r in rows:
        gpus = r["gpus"].split()
        assert 1 <= len(gpus) and all(0 <= int(g) < 16 for g in gpus)
        assert "variability=" in r["placement_scores"] and "locality=" in r["placement_scores"]
    spread = [r for r in rows if len({int(g) // 4 for g in r["gpus"].split()}) > 1]
    assert all("locality=1.700" in r["placement_scores"] for r in spread)


def test_help(capsys):
    code, out, _ = invoke(capsys, "simulate", "--help")
    assert code == 0
    for word in ("--trace", "--workload", "--per-job", "--no-predict", "pcs-jct", "seconds", "percent", "runs"):
        assert word in out
    code, out, _ = invoke(capsys)
    assert code == 0 and "simulate" in out


# --- bad input --------------------------------------------------------------------


@pytest.fixture
def bad_files(tmp_path):
    malformed = tmp_path / "malformed.csv"
    malformed.write_text(
        "app_id,submit_time,service,num_jobs,sleep_time,model_name\n0,0,10,1,0,m\n1,0,abc,1,5,m\n"
    )
    negative = tmp_path / "negative.json"
    negative.write_text(json.dumps({"class_thresholds": [100, "inf"], "class_rates": [0.5, -0.5]}))
    no_rates = tmp_path / "no_rates.json"
    no_rates.write_text(json.dumps({"num_classes": 1, "class_thresholds": ["inf"]}))
    bad_cluster = tmp_path / "cluster.yaml"
    bad_cluster.write_text("nodes:\n  - name: a\n    gpus:\n      - {index: 0, uuid: g, scores: {A: -2}}\n")
    return {"malformed": malformed, "negative": negative, "no_rates": no_rates, "cluster": bad_cluster,
            "missing": tmp_path / "missing.csv"}


BAD_INPUTS = {
    "missing trace": (["--trace", "{missing}"], "no such trace file"),
    "malformed csv": (["--trace", "{malformed}"], "malformed.csv:3: column 'service' is not a number"),
    "unknown policy": (["-p", "fifo,bogus"], "unknown policy 'bogus'; valid policies: fifo, srsf"),
    "zero gpus": (["--gpus", "0"], "--gpus must be >= 1"),
    "zero gpus per node": (["--gpus-per-node", "0"], "--gpus-per-node must be >= 1"),
    "non-integer gpus": (["--gpus", "many"], "--gpus"),
    "negative weight": (["-p", "pcs", "--pcs-config", "{negative}"], "weights must be finite and > 0"),
    "missing class_rates": (["-p", "pcs", "--pcs-config", "{no_rates}"], "missing key 'class_rates'"),
    "missing pcs config": (["-p", "pcs", "--pcs-config", "{missing}"], "no such WFQ config file"),
    "pcs config without pcs": (["-p", "fifo", "--pcs-config", "{negative}"], "--pcs-config needs the pcs policy"),
    "bad cluster spec": (["--cluster", "{cluster}"], "nodes[0].gpus[0].scores.A"),
    "missing cluster spec": (["--cluster", "{missing}"], "no such cluster spec file"),
    "trace and workload": (["--trace", "{malformed}", "--workload", "themis1"], "mutually exclusive"),
    "num-jobs with trace": (["--trace", "{malformed}", "--num-jobs", "3"], "--num-jobs applies only"),
    "zero jobs": (["--num-jobs", "0"], "--num-jobs must be >= 1"),
    "both spellings": (["--num-apps", "3", "--num-jobs", "3"], "--num-apps and --num-jobs are one option"),
    "zero load": (["--load", "0"], "--load must be a number > 0"),
    "negative overhead": (["--overhead", "-5"], "--overhead must be"),
    "unknown workload": (["--workload", "nope"], "unknown workload 'nope'"),
    "bad speedup": (["--speedup", "quadratic"], "--speedup"),
    "per-job folder missing": (["--per-job", "{missing}/x.csv"], "--per-job"),
    "unknown option": (["--gpu", "4"], "No such option"),
    "zero workers": (["--workers", "0"], "--workers must be >= 1"),
    "unknown trace name": (["--trace", "philly/nope"], "trace 'philly/nope' is neither a file nor a bundled name (philly/"),
    "unknown pcs config name": (["-p", "pcs", "--pcs-config", "themis1-nope"], "pcs-config 'themis1-nope' is neither"),
    "unknown topology name": (["--placement", "mapa-greedy", "--topology", "dgx9"], "topology 'dgx9' is neither"),
    "unknown profile name": (["--placement", "pal", "--profile", "nope"], "not one of longhorn, frontera, ls6, 32gpu"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_error_line(capsys, bad_files, case):
    args, fragment = BAD_INPUTS[case]
    args = [a.format(**bad_files) for a in args]
    code, out, err = invoke(capsys, "simulate", *args)  # every case fails before any simulation runs
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert fragment in lines[0]


# --- data by name ---------------------------------------------------------------------


def test_bundled_names_stand_for_their_files(capsys):
    by_name = run_json(capsys, "simulate", "--trace", "philly/51b7ef", "--gpus", "8", "-p", "fifo,pcs",
                       "--pcs-config", "themis1-jct")
    by_path = run_json(capsys, "simulate", "--trace", TRACE, "--gpus", "8", "-p", "fifo,pcs-jct")
    assert by_name["workload"]["trace"] == str(TRACE)
    assert [r["policy"] for r in by_name["runs"]] == ["fifo", "pcs:themis1-jct"]
    assert [r["avg_jct"] for r in by_name["runs"]] == [r["avg_jct"] for r in by_path["runs"]]


def test_bundled_topology_sets_the_node_size(capsys):
    data = run_json(capsys, *SMALL, "-p", "fifo", "--no-predict", "--placement", "mapa-greedy", "--topology", "dgx1-v100")
    assert (data["workload"]["nodes"], data["workload"]["gpus_per_node"]) == (2, 8)
    assert data["workload"]["placement"]["topology"] == str(data_dir() / "topology" / "dgx1-v100.topo")


def test_data_lists_every_bundled_name(capsys):
    code, out, err = invoke(capsys, "data", "--json")
    assert code == 0 and err == ""
    listed = json.loads(out)
    assert set(listed) == {"trace", "workload", "pcs-config", "profile", "topology"}
    assert {"philly/0e4a51", "sia-philly/workload-1", "themis1-artifact"} <= set(listed["trace"]["names"])
    assert "themis1-jct" in listed["pcs-config"]["names"] and "dgx1-v100" in listed["topology"]["names"]
    assert "32gpu" in listed["profile"]["names"] and "themis1" in listed["workload"]["names"]
    code, out, _ = invoke(capsys, "data")
    assert code == 0 and "sia-philly/workload-1" in out and "dgx1-v100" in out


# --- the installed entry point -------------------------------------------------------


def _python_m(*args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pcs_ray.cli", *map(str, args)],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, env=env,
    )


def test_module_entry_point_success_and_error(bad_files):
    ok = _python_m(*SMALL, "-p", "fifo,pcs", "--json")
    assert ok.returncode == 0, ok.stderr
    assert [r["policy"] for r in json.loads(ok.stdout)["runs"]] == ["fifo", "pcs-jct", "pcs-bal", "pcs-pred"]
    assert ok.stderr == ""

    bad = _python_m("simulate", "--trace", bad_files["malformed"], "--json")
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert "Traceback" not in bad.stderr
    assert bad.stderr.splitlines() == [f"error: {bad_files['malformed']}:3: column 'service' is not a number: 'abc'"]


def test_bundled_profile_names_are_the_ones_the_loader_reads():
    """``pcs_ray.data`` describes the profiles (it sits below placement); the loader owns the files."""
    from pcs_ray import data
    from pcs_ray.variability.profiles import PROFILES

    assert list(data.PROFILES) == list(PROFILES)


# -- live commands with no coordinator reachable, and values the fuzz suite once let pass behind --help ------


@pytest.fixture
def no_cluster(monkeypatch):
    """Ray finds no cluster (as ``ray.init`` reports it) and no process may start."""
    import ray

    def refuse(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to by "
                              "setting `--address` flag or `RAY_ADDRESS` environment variable.")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: (_ for _ in ()).throw(OSError("no process may start")))


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["predict", "1"], ["predict", "1", "--json"],
                                  ["stop"], ["cancel", "1"]])
def test_live_commands_without_a_coordinator_say_so_in_one_line(capsys, no_cluster, args):
    code, out, err = invoke(capsys, *args, "--address", "127.0.0.1:1")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "pcs-ray up --local" in err  # what to do


@pytest.mark.parametrize("args, fragment", [
    (["solve", "--generations", "abc"], "--generations"),
    (["submit", "/nonexistent.yaml"], "nonexistent.yaml"),
    (["config", "set", "/nonexistent.json"], "nonexistent.json"),
    (["replay", "--trace", "/nonexistent.csv"], "nonexistent.csv"),
])
def test_bad_values_that_help_once_hid_fail_in_one_line(capsys, no_cluster, args, fragment):
    code, out, err = invoke(capsys, *args)
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1 and fragment in err
