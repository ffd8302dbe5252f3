"""Slow-run prediction (``pcs_ray.variability.slow_runs``): the dataset never leaks a run's own outcome,
model selection against the baseline, and one-line errors for bad data."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from pcs_ray.variability.longhorn import Run
from pcs_ray.variability.slow_runs import build_dataset, fit, read_csv
from builders import invoke


def synthetic_runs(n_devices=16, per_device=50, seed=1):
    """Runs of one app on ``n_devices`` GPUs every hour; half the devices go through slow spells (each
    run stays in its predecessor's state with probability 0.9): a planted signal that the device's last
    run reveals and its mean does not."""
    rng = np.random.default_rng(seed)
    runs = []
    state = [False] * n_devices
    for k in range(per_device):
        for d in range(n_devices):
            if d % 2 == 0 and rng.random() < 0.1:
                state[d] = not state[d]
            bad = state[d]
            runtime = (1.6 if bad else 1.0) + rng.normal(0, 0.03)
            runs.append(Run("app", f"c1-{d // 4}-{d % 4}", f"c1-{d // 4}-{d % 4}", "c1", d // 4, d % 4,
                            1_600_000_000 + 3600 * k + d, runtime, runtime, 250.0, 250.0, 1530.0, 877.0, 60.0))
    return runs


def test_features_never_read_the_runs_own_measurements():
    runs = synthetic_runs(6, 6)
    ds = build_dataset(runs)
    i = len(ds.runs) // 2
    target = ds.runs[i]
    changed = [Run(**{**r.__dict__, "runtime": 50.0, "temperature": 99.0, "power": 1.0}) if r is target else r
               for r in runs]
    ds2 = build_dataset(changed)
    assert np.array_equal(ds.X[i], ds2.X[i])  # its own row is the same
    assert ds2.y[i] == 1 and not np.array_equal(ds.X[i + 1:], ds2.X[i + 1:])  # later rows see it


def test_runs_that_start_together_do_not_see_each_other():
    """The GPUs of one multi-GPU run start at the same second: none may read another's outcome (Longhorn's
    slow runs are whole nodes at once, so a leak would predict three of every four)."""
    runs = [Run(**{**r.__dict__, "ts": 1_600_000_000 + 3600 * ((r.ts - 1_600_000_000) // 3600)}) for r in
            synthetic_runs(8, 6)]  # the four GPUs of each node start together
    ds = build_dataset(runs)
    ts = np.array([r.ts for r in ds.runs])
    i = int(np.flatnonzero(ts == ts[len(ts) // 2])[0])  # the first GPU of a run in the middle
    target = ds.runs[i]
    changed = [Run(**{**r.__dict__, "runtime": 50.0}) if r is target else r for r in runs]
    ds2 = build_dataset(changed)
    same, later = ts == target.ts, ts > target.ts
    assert same.sum() >= 4 and np.array_equal(ds.X[same], ds2.X[same])  # its run-mates see nothing of it
    assert not np.array_equal(ds.X[later], ds2.X[later])  # runs that start after it do


def test_fit_reports_every_model_and_the_baseline():
    result = fit(build_dataset(synthetic_runs()), folds=3)
    report = result.to_json()
    assert (set(report["cv_f1"]) == set(report["grouped_cv_f1"]) == set(report["test_f1"])
            == {"adaboost", "random-forest", "extra-trees", "knn"})
    assert report["chosen"] == max(report["cv_f1"], key=report["cv_f1"].get)
    assert 0 < len(report["features"]) <= 20
    assert report["chosen_test_f1"] > report["baseline"]["test_f1"]  # the planted signal is learnable


# -- one-line errors ---------------------------------------------------------------------------------


def test_unknown_data_set(capsys):
    code, out, err = invoke(capsys, "slow-runs", "fit", "--data", "quartz")
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "unknown data set 'quartz'" in err


def test_malformed_csv_names_the_line(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["app", "device", "ts", "runtime"])
        w.writerow(["a", "g0", 1000, 1.0])
        w.writerow(["a", "g1", 1001, "fast"])
    code, out, err = invoke(capsys, "slow-runs", "fit", "--data", path)
    assert code == 2 and err.strip().count("\n") == 0
    assert f"{path}:3: column 'runtime' is not a number" in err
    path.write_text("app,device,ts\na,g0,1\n")
    code, _, err = invoke(capsys, "slow-runs", "fit", "--data", path)
    assert code == 2 and ":1: missing column(s) runtime" in err
    path.write_text("app,device,ts,runtime\na,g0,1,1.0\na,g1,2\n")
    with pytest.raises(ValueError, match=r":3: expected 4 fields"):
        read_csv(path)


