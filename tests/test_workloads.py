"""Trace readers and the CDF workload generator, against the real reference data."""

from __future__ import annotations

import csv
import itertools
import json

import numpy as np
import pytest

from pcs_ray.data import data_dir
from pcs_ray.workloads.errors import WorkloadError
from pcs_ray.workloads.generator import EmpiricalCDF, available_workloads, generate_workload
from pcs_ray.workloads.traces import (
    SIA_ITERATION_TIME,
    default_speedup,
    read_pcs_trace,
    read_sia_philly,
    read_testbed_trace,
    read_trace,
)

DATA = data_dir()
PHILLY = DATA / "pcs" / "traces" / "trace_0e4a51.csv"
WORKLOADS = DATA / "pcs" / "workloads"


def _csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- PCS / Philly -----------------------------------------------------------


def test_pcs_trace_arrivals_are_cumulative_sleep_times():
    jobs = read_pcs_trace(PHILLY, speedup="linear")
    rows = _csv_rows(PHILLY)
    assert len(jobs) == 2465 == len(rows)
    arrivals = list(itertools.accumulate(float(r["sleep_time"]) for r in rows))
    by_id = {j.job_id: j for j in jobs}
    for row, arrival in zip(rows[:50], arrivals[:50]):
        job = by_id[int(row["app_id"])]
        assert job.submit_time == pytest.approx(arrival)
        assert job.service == float(row["service"])
        assert job.max_gpus == int(row["num_jobs"]) and job.min_gpus == 1
        assert job.model == row["model_name"]
        assert job.speedup == tuple(float(n) for n in range(job.max_gpus + 1))
    assert jobs[-1].submit_time == pytest.approx(arrivals[-1])
    assert [(j.submit_time, j.job_id) for j in jobs] == sorted((j.submit_time, j.job_id) for j in jobs)


def test_pcs_trace_model_speedup_curves():
    """Model curves are the default, as the PCS artifact replays traces; linear stays selectable."""
    curves = json.loads((DATA / "pcs" / "speedup-curves.json").read_text())["models"]
    jobs = read_pcs_trace(PHILLY)
    assert jobs == read_pcs_trace(PHILLY, speedup="model") == read_trace(PHILLY)
    assert default_speedup(PHILLY) == "model" and default_speedup(DATA / "pal" / "sia-philly" / "workload-1.csv") == "linear"
    job = next(j for j in jobs if j.model == "Resnet50Model128" and j.max_gpus >= 2)
    t = curves["Resnet50Model128"]["iteration_time_us_by_gpus"]
    assert job.speedup[1] == 1.0
    assert job.speedup[2] == pytest.approx(t[0] / t[1])
    assert all(b >= a for a, b in zip(job.speedup, job.speedup[1:]))


def test_pcs_trace_unknown_model_falls_back_to_linear(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("app_id,submit_time,service,num_jobs,sleep_time,model_name\n0,0,100,4,0,NoSuchModel\n")
    curves = tmp_path / "curves.json"
    curves.write_text(json.dumps({"models": {"M": {"iteration_time_us_by_gpus": [2.0, 1.5]}}}))
    [job] = read_pcs_trace(f, speedup="model", curves_path=curves)
    assert job.speedup == (0.0, 1.0, 2.0, 3.0, 4.0)


def test_testbed_traces():
    path = DATA / "pcs" / "testbed" / "trace_themis1_scaled.csv"
    rows = _csv_rows(path)
    jobs = read_testbed_trace(path)
    assert len(jobs) == len(rows) > 0
    arrivals = list(itertools.accumulate(float(r["sleep_time"]) for r in rows))
    assert [j.submit_time for j in jobs] == pytest.approx(arrivals)
    assert all(j.min_gpus == 1 and j.speedup[-1] == j.max_gpus for j in jobs)
    toy = read_trace(DATA / "pcs" / "testbed" / "trace_toy.csv")
    assert [(j.job_id, j.submit_time, j.service, j.max_gpus) for j in toy] == [(0, 0, 120, 4), (1, 0, 80, 4)]


# --- Sia-Philly -------------------------------------------------------------


def test_sia_philly_rigid_jobs_and_class_mapping():
    path = DATA / "pal" / "sia-philly" / "workload-1.csv"
    jobs = read_sia_philly(path)
    assert len(jobs) == 160
    rows = {int(r["job_id"]): r for r in _csv_rows(path)}
    classes = {"resnet50": "A", "gpt2": "B", "dcgan": "B", "bert": "B", "vgg19": "C", "pointnet": "D"}
    for job in jobs:
        row = rows[job.job_id]
        gpus, key = int(row["num_gpus"]), row["model"].lower()
        assert job.rigid and job.max_gpus == gpus
        assert job.submit_time == float(row["submit_time"])
        runtime = float(row["duration"]) * SIA_ITERATION_TIME[key]
        assert job.min_runtime == pytest.approx(runtime)
        assert job.service == pytest.approx(runtime * gpus)
        assert job.job_class == classes[key]
        assert job.bw_sensitive == (gpus > 1 and key in {"resnet50", "vgg19", "bert", "gpt2"})
    assert {j.model for j in jobs} <= {"resnet50", "vgg19", "PointNet", "BERT", "DCGAN", "GPT2"}
    assert read_trace(path) == jobs


# --- errors -----------------------------------------------------------------

PCS_HEADER = "app_id,submit_time,service,num_jobs,sleep_time,model_name\n"


def _write(tmp_path, text, name="trace.csv"):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_malformed_row_reports_its_line(tmp_path):
    f = _write(tmp_path, PCS_HEADER + "0,0,100,1,0,M\n1,0,200,1,0,M\n2,0,abc,1,0,M\n")
    with pytest.raises(WorkloadError, match=r"trace\.csv:4: column 'service' is not a number: 'abc'") as err:
        read_pcs_trace(f)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        ("0,0,0,1,0,M\n", 2, "'service' must be > 0"),
        ("0,0,-5,1,0,M\n", 2, "'service' must be > 0"),
        ("0,0,10,0,0,M\n", 2, "'num_jobs' must be > 0"),
        ("0,0,10,1.5,0,M\n", 2, "'num_jobs' must be a whole number"),
        ("0,0,10,1,-1,M\n", 2, "'sleep_time' must be >= 0"),
        ("0,0,10,1,0,M\n0,0,10,1,0,M\n", 3, "duplicate job id 0"),
        ("0,0,10,1,0\n", 2, "expected 6 fields, got 5"),
        ("", 1, "no jobs"),
    ],
)
def test_bad_rows(tmp_path, body, line, what):
    f = _write(tmp_path, PCS_HEADER + body)
    with pytest.raises(WorkloadError, match=rf"trace\.csv:{line}: .*{what}"):
        read_pcs_trace(f)


def test_missing_column(tmp_path):
    f = _write(tmp_path, "app_id,submit_time,service,sleep_time,model_name\n0,0,1,0,M\n")
    with pytest.raises(WorkloadError, match=r"trace\.csv:1: missing column\(s\) 'num_jobs'"):
        read_pcs_trace(f)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(WorkloadError, match=r"no such trace file: .*x\.csv"):
        read_trace(tmp_path / "x.csv")
    with pytest.raises(WorkloadError, match=r"empty\.csv:1: file is empty"):
        read_trace(_write(tmp_path, "\n", "empty.csv"))


def test_unknown_header_lists_accepted_ones(tmp_path):
    f = _write(tmp_path, "a,b,c\n1,2,3\n")
    with pytest.raises(WorkloadError, match="unrecognised trace header") as err:
        read_trace(f)
    message = str(err.value)
    assert "job_id,num_gpus,submit_time,duration,model" in message
    assert "app_id,submit_time,service,num_jobs,sleep_time,model_name" in message


def test_sia_unknown_model(tmp_path):
    f = _write(tmp_path, "job_id,num_gpus,submit_time,duration,model\n0,2,0,10,AlexNet\n")
    with pytest.raises(WorkloadError, match=r"trace\.csv:2: unknown model 'AlexNet'"):
        read_trace(f)


# --- EmpiricalCDF -----------------------------------------------------------


def test_cdf_out_of_order_rows_and_jumps(tmp_path):
    # Rows shuffled, a duplicate row, and a jump from 10 to 15 at cdf 0.5.
    f = _write(tmp_path, "#secs,cdf\n20,1.0\n15,0.5\n0,0\n10,0.5\n10,0.5", "cdf.csv")
    cdf = EmpiricalCDF.from_csv(f)
    assert list(cdf.values) == [0, 10, 10, 15, 20] and list(cdf.probs) == [0, 0.5, 0.5, 0.5, 1.0]
    expected = 0.5 * 5 + 0.5 * 17.5  # uniform on [0, 10) then on [15, 20)
    assert cdf.mean() == pytest.approx(expected)
    draws = cdf.sample(np.random.default_rng(0), 100_000)
    assert not np.any((draws > 10) & (draws < 15))
    assert draws.mean() == pytest.approx(expected, rel=0.01)


def test_cdf_mean_matches_sampling_on_real_files():
    for path in [data_dir() / "pcs" / "workloads" / "cdf-app-service-times-themis1.csv",
                 *sorted(WORKLOADS.glob("cdf-app-service-times-workload_*.csv"))[:3]]:
        cdf = EmpiricalCDF.from_csv(path)
        assert np.all(np.diff(cdf.probs) >= 0)
        draws = cdf.sample(np.random.default_rng(1), 200_000)
        assert draws.min() >= cdf.values.min() and draws.max() <= cdf.values.max()
        assert draws.mean() == pytest.approx(cdf.mean(), rel=0.03)


def test_cdf_is_cut_at_one_and_clamped_below_first_point():
    cdf = EmpiricalCDF([10, 10, 30], [0.2, 0.2, 1.2])
    # u < 0.2 -> 10; u in [0.2, 1) -> 10 + (u - 0.2) * 20, reaching 26 at u = 1.
    assert cdf.mean() == pytest.approx(0.2 * 10 + 0.8 * (10 + 26) / 2)
    draws = cdf.sample(np.random.default_rng(2), 100_000)
    assert draws.max() < 26 and draws.mean() == pytest.approx(cdf.mean(), rel=0.01)


# --- generator --------------------------------------------------------------


def test_generator_is_deterministic():
    a = generate_workload("themis1", 200, 64, seed=7)
    b = generate_workload("themis1", 200, 64, seed=7)
    c = generate_workload("themis1", 200, 64, seed=8)
    assert a == b
    assert a != c


def test_generator_bundled_themis1_offered_load():
    jobs = generate_workload("themis1", 2000, 64, load=0.7, seed=1, dirs=[data_dir() / "pcs" / "workloads"])
    assert jobs[0].submit_time == 0
    offered = sum(j.service for j in jobs) / (64 * jobs[-1].submit_time)
    assert offered == pytest.approx(0.7, rel=0.25)
    assert all(1 <= j.min_gpus <= j.max_gpus and j.speedup[-1] == j.max_gpus for j in jobs)
    assert max(j.max_gpus for j in jobs) > 1  # themis1 jobs are multi-trial sweeps


@pytest.mark.parametrize("name", ["workload_0e4a51", "philly", "gavel"])
def test_generator_shared_workloads(name):
    jobs = generate_workload(name, 500, 32, load=1.2, seed=3)
    assert len(jobs) == 500
    assert all(b.submit_time >= a.submit_time for a, b in zip(jobs, jobs[1:]))
    offered = sum(j.service for j in jobs) / (32 * jobs[-1].submit_time)
    assert offered == pytest.approx(1.2, rel=0.25)


def test_generator_unknown_workload_lists_available(tmp_path):
    with pytest.raises(WorkloadError, match=r"unknown workload 'nope'.*available: .*themis1"):
        generate_workload("nope", 10, 8, dirs=[tmp_path, data_dir() / "pcs" / "workloads"])
    assert "themis1" in available_workloads([data_dir() / "pcs" / "workloads"])


@pytest.mark.parametrize("kw", [{"num_jobs": 0}, {"num_gpus": 0}, {"load": 0}, {"load": -1}])
def test_generator_validates_arguments(kw):
    args = {"num_jobs": 10, "num_gpus": 8, "load": 0.9} | kw
    with pytest.raises(WorkloadError):
        generate_workload("themis1", dirs=[data_dir() / "pcs" / "workloads"], **args)
