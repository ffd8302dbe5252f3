"""Baselines as the PCS evaluation computes them, pinned to the artifact's own results.

On the artifact's themis1 sample (500 jobs, 64 GPUs, linear speedups) every
policy's average JCT and average and p99 prediction error must be within 3 %
of what the artifact's simulator reports for it (``reference/themis1-artifact``);
the three PCS configurations must keep the artifact's trade-off orderings; and
on Philly VC 0e4a51 (model speedups, as the artifact replays traces) the
schemes must rank by average JCT as in the paper's Fig. 7.

One serial simulation per policy, cached for the module.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from pcs_ray.data import data_dir, locate
from pcs_ray.sim.metrics import per_job_errors, summarize
from pcs_ray.policies import build_policy
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.traces import read_trace

REF = data_dir() / "pcs" / "reference"
ART = REF / "themis1-artifact"
GPUS = 64
REL = 0.03
#: our name -> the artifact's name in summary.json
ARTIFACT = {"fifo": "FIFO", "srsf": "SRSF", "themis": "THEMIS", "afs": "AFS",
            "pcs-jct": "PCS_jct", "pcs-bal": "PCS_bal", "pcs-pred": "PCS_pred"}
#: Fig. 7's column -> our name (PCS columns with the VC's own configurations)
FIG7 = {"AFS": "afs", "Tiresias": "srsf", "Themis": "themis", "FIFO": "fifo",
        "PCS-JCT": "pcs-jct", "PCS-bal": "pcs-bal", "PCS-pred": "pcs-pred"}


@pytest.fixture(scope="module")
def summary() -> dict:
    return json.loads((ART / "summary.json").read_text())


@pytest.fixture(scope="module")
def themis1() -> dict[str, dict]:
    jobs = read_trace(locate("trace", "themis1-artifact"))
    return {name: summarize(simulate(jobs, GPUS, build_policy(name), workers=1)) for name in ARTIFACT}


def close(ours: float, theirs: float) -> bool:
    """Within 3 % of the artifact's figure (an error the artifact reports as 0 must be 0 here too)."""
    if theirs < 1e-6:
        return ours < 1e-6
    return abs(ours - theirs) <= REL * theirs


@pytest.mark.parametrize("name", ARTIFACT)
def test_avg_jct_within_3pct_of_artifact(themis1, summary, name):
    ours, theirs = themis1[name]["avg_jct"], summary[ARTIFACT[name]]["avg_jct_s"]
    assert close(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("name", [n for n in ARTIFACT if n != "themis"])
@pytest.mark.parametrize("metric,key", [("avg_pred_err", "avg_pred_error_pct"), ("p99_pred_err", "p99_pred_error_pct")])
def test_pred_error_within_3pct_of_artifact(themis1, summary, name, metric, key):
    ours, theirs = themis1[name][metric], summary[ARTIFACT[name]][key]
    assert close(ours, theirs), (ours, theirs)


def test_themis_pred_error_within_3pct_of_artifact_current_code(themis1, summary):
    """Themis's errors against the artifact's current code (per-job-THEMIS-62a6ca3.csv, see the README):
    its p99 is also summary.json's, its average is not, and the summary's own per-job file is what differs."""
    current = per_job_errors(ART / "per-job-THEMIS-62a6ca3.csv")
    published = per_job_errors(ART / "per-job-THEMIS.csv")
    assert published.mean() == pytest.approx(summary["THEMIS"]["avg_pred_error_pct"], rel=1e-9)
    ours = themis1["themis"]
    assert close(ours["avg_pred_err"], current.mean()), (ours["avg_pred_err"], current.mean())
    assert close(ours["p99_pred_err"], float(np.percentile(current, 99))), ours["p99_pred_err"]
    assert close(ours["p99_pred_err"], summary["THEMIS"]["p99_pred_error_pct"])
    # The known discrepancy: the published average is not what the current code gives.
    assert not close(current.mean(), summary["THEMIS"]["avg_pred_error_pct"])


@pytest.mark.parametrize("metric,key", [("avg_jct", "avg_jct_s"), ("avg_pred_err", "avg_pred_error_pct"),
                                        ("p99_pred_err", "p99_pred_error_pct")])
def test_pcs_tradeoff_orderings_as_the_artifact(themis1, summary, metric, key):
    """pcs-jct < pcs-bal < pcs-pred in JCT, the reverse in prediction errors, as in the artifact."""
    kinds = ("pcs-jct", "pcs-bal", "pcs-pred")
    ours = sorted(kinds, key=lambda k: themis1[k][metric])
    theirs = sorted(kinds, key=lambda k: summary[ARTIFACT[k]][key])
    assert ours == theirs
    assert theirs == (list(kinds) if metric == "avg_jct" else list(reversed(kinds)))


def test_baseline_orderings_as_the_artifact(themis1, summary):
    """The artifact's themis1 ranking of all seven by average JCT."""
    ours = sorted(ARTIFACT, key=lambda n: themis1[n]["avg_jct"])
    theirs = sorted(ARTIFACT, key=lambda n: summary[ARTIFACT[n]]["avg_jct_s"])
    assert ours == theirs


def fig7(vc: str) -> dict[str, float]:
    with (REF / "avg_jct_results.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["workload"] == vc)
    return {col: float(row[col]) for col in FIG7}


def test_fig7_ranking_on_philly_0e4a51():
    """Fig. 7's per-VC ranking of the seven schemes by average JCT on VC 0e4a51 (2,465 jobs)."""
    vc = "0e4a51"
    jobs = read_trace(locate("trace", f"philly/{vc}"))  # model speedups by default
    ours = {}
    for col, name in FIG7.items():
        policy = build_policy("pcs", config=f"{vc}-{name[4:]}") if name.startswith("pcs-") else build_policy(name)
        ours[col] = summarize(simulate(jobs, GPUS, policy, predict=False))["avg_jct"]
    published = fig7(vc)
    assert sorted(ours, key=ours.get) == sorted(published, key=published.get)
    # The baselines' normalised JCTs, not just their order: within 3 % of Fig. 7's.
    for col in ("Tiresias", "Themis", "FIFO"):
        assert close(ours[col] / ours["AFS"], published[col]), (col, ours[col] / ours["AFS"], published[col])
