"""The PCS paper's 4-job toy (Fig. 1a/1b) on one GPU, stage by stage.

Stage k replays the first k arrivals. Sizes are the service times, scaling is
linear and every job can use at most the one GPU.
"""

from __future__ import annotations

import json

import pytest

from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.sim.metrics import summarize
from pcs_ray.data import data_dir
from pcs_ray.policies import build_policy
from pcs_ray.sim.run import simulate

DATA = data_dir() / "pcs" / "reference"


def _fig(name):
    return json.loads((DATA / name).read_text())


def _specs(k):
    arrivals = _fig("fig1a.json")["arrivals"][:k]
    return [
        JobSpec(i + 1, float(a["time"]), float(a["size"]), 1, linear_speedup(1), name=a["job"])
        for i, a in enumerate(arrivals)
    ]


def _published_finish(stage):
    """Finish time of each job in a published schedule: the end of its last slice."""
    out = {}
    for piece in stage["schedule"]:
        out[piece["job"]] = max(out.get(piece["job"], 0), piece["end"])
    return out


def _run(policy, k, **kw):
    result = simulate(_specs(k), 1, build_policy(policy, **kw))
    return result, {f"J{r.job_id}": r.finish for r in result.records}


STAGES = [(pol, key, k) for pol, key in (("srsf", "tiresias"), ("fifo", "yarn_fifo")) for k in range(1, 5)]
STAGES += [("themis-lease", "themis", k) for k in range(1, 4)]


@pytest.mark.parametrize("policy,key,k", [pytest.param(*s, id=f"{s[1]}-stage{s[2]}") for s in STAGES])
def test_stage_finish_times_match_published(policy, key, k):
    kw = {"lease": 1.0} if policy == "themis-lease" else {}
    _, finish = _run(policy, k, **kw)
    published = _published_finish(_fig("fig1a.json")[key][k - 1])
    assert finish == {j: float(t) for j, t in published.items()}


def test_themis_stage4_known_discrepancy():
    """Stage 4 of the published Themis schedule is not reproducible.

    The figure has J4 (arriving at t=10) wait until t=19 while J1 and J2 keep
    alternating (J1 19, J2 16, J3 3, J4 27). But at t=10, with J3 done and
    N = 3 jobs sharing one GPU, J4's finish-time fairness ratio
    rho = (elapsed / N + remaining) / service is 8/8 = 1.0, the largest: with
    the remaining work the published schedule shows at t=10 (J1 5, J2 4),
    J1 has (10/3 + 5)/10 = 0.83 and J2 (10/3 + 4)/8 = 0.92 (in our run,
    J1 6 and J2 3 left: 0.93 and 0.79). Largest-rho-first must serve J4 at
    once, so J4 cannot wait until both are done. Our Themis (lease 1 s)
    gives J1 24, J2 21, J3 3, J4 27; these values are pinned so that any
    change shows up.
    """
    result, finish = _run("themis-lease", 4, lease=1.0)
    published = _published_finish(_fig("fig1a.json")["themis"][3])
    assert published == {"J1": 19, "J2": 16, "J3": 3, "J4": 27}
    assert finish == {"J1": 24.0, "J2": 21.0, "J3": 3.0, "J4": 27.0}
    assert finish != {j: float(t) for j, t in published.items()}
    assert summarize(result)["avg_jct"] == pytest.approx(16.0)  # published 13.5


@pytest.mark.parametrize(
    "policy,key,kw",
    [
        pytest.param("srsf", "tiresias", {}, id="tiresias"),
        pytest.param("fifo", "yarn_fifo", {}, id="yarn_fifo"),
        pytest.param("themis-lease", "themis", {"lease": 1.0}, id="themis"),
    ],
)
def test_first_prediction_is_the_published_prediction_at_arrival(policy, key, kw):
    """Over the full 4-job run, each job's first prediction is what the figure shows at its arrival.

    J1 and J2 both arrive at t=0; submissions are one at a time, so J1 is predicted alone (10).
    """
    result, _ = _run(policy, 4, **kw)
    stages = _fig("fig1a.json")[key]
    for k, rec in enumerate(result.records, start=1):
        assert rec.first_pred == float(stages[k - 1]["predictions"][f"J{k}"]), f"J{k}"


@pytest.mark.parametrize(
    "policy,key,kw,stages",
    [
        pytest.param("srsf", "tiresias", {}, 4, id="tiresias"),
        pytest.param("fifo", "yarn_fifo", {}, 4, id="yarn_fifo"),
        pytest.param("themis-lease", "themis", {"lease": 1.0}, 3, id="themis-stages1-3"),
    ],
)
def test_stage_predictions_match_published(policy, key, kw, stages):
    """Each stage's predictions (the last one each job got, at or before the stage's final
    arrival) match the figure."""
    for k in range(1, stages + 1):
        result, _ = _run(policy, k, **kw)
        published = _fig("fig1a.json")[key][k - 1]["predictions"]
        got = {f"J{r.job_id}": r.last_pred for r in result.records}
        assert got == {j: float(t) for j, t in published.items()}, k


@pytest.mark.parametrize(
    "policy,key,mean_jct,mean_err",
    [
        pytest.param("srsf", "tiresias", 11.25, 45.625, id="tiresias"),
        pytest.param("fifo", "yarn_fifo", 15.75, 0.0, id="yarn_fifo"),
    ],
)
def test_fig1b_means(policy, key, mean_jct, mean_err):
    fig = _fig("fig1b.json")[key]
    result, _ = _run(policy, 4)
    s = summarize(result)
    assert s["avg_jct"] == pytest.approx(mean_jct, abs=1e-9)
    assert s["avg_jct"] == pytest.approx(fig["mean_jct"], abs=0.005)
    # Tiresias: J1 predicted 10, finishes at 27 (170%), J2 8 -> 9 (12.5%), J3 and J4 exact:
    # 45.625%, which the figure rounds to 46%.
    assert s["avg_pred_err"] == pytest.approx(mean_err, abs=1e-9)
    assert round(s["avg_pred_err"]) == fig["mean_pred_error"]
