"""Reading the PCS artifact's per-job result files (shared by tests/test_fidelity.py and bench/baselines_fidelity.py)."""

from __future__ import annotations

import csv

import numpy as np


def per_job_errors(path) -> np.ndarray:
    """Prediction errors (%) of an artifact per-job file, as its summary computes them."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    jct = np.array([float(r["end_time"]) - float(r["submit_time"]) for r in rows])
    pred = np.array([float(r["estimated_end_time"]) - float(r["submit_time"]) for r in rows])
    return 100 * np.abs(jct - pred) / pred
