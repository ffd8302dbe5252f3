"""Blox semantics (PAL's evaluation): each rule on a hand-built case, the PAL artifact's cluster, and
the authors' workload-1 figures; the continuous default is left as it was."""

from __future__ import annotations

import csv
import json
import random

import numpy as np
import pytest

from pcs_ray import cli
from pcs_ray.cluster import ClusterSpec
from pcs_ray.data import data_dir
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.placement.configure import configure_placement
from pcs_ray.variability.profiles import ProfileError, load_profile
from pcs_ray.policies import build_policy
from pcs_ray.sim.semantics import BLOX_ROUND_S, StrictPriority, round_boundary, with_semantics
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.traces import read_sia_philly

R = BLOX_ROUND_S


def rigid(job_id: int, submit: float, gpus: int, runtime: float) -> JobSpec:
    return JobSpec(job_id=job_id, submit_time=submit, service=runtime * gpus, max_gpus=gpus,
                   speedup=linear_speedup(gpus), min_gpus=gpus)


def run(jobs, policy="fifo", semantics="blox", capacity=4, predict=False):
    res = simulate(jobs, capacity, with_semantics(build_policy(policy), semantics), predict=predict)
    return {r.job_id: r for r in res.records}


# -- the rules, one hand-built case each ---------------------------------------------------


def test_head_of_line_blocking_no_backfilling():
    # A holds 2 of 4 GPUs; B (4 GPUs) waits for it; C (1 GPU) fits beside A but must not overtake B.
    jobs = [rigid(0, 0, 2, 1000), rigid(1, 10, 4, 100), rigid(2, 20, 1, 100)]
    blox = run(jobs)
    assert blox[0].start == 0 and blox[0].finish == 3 * R  # done at 1000, recorded at the 1080 boundary
    assert blox[1].start == 3 * R  # A's GPUs stay held until the boundary
    assert blox[2].start == 4 * R  # behind B, although a GPU was free from the start
    assert blox[2].finish == 5 * R
    continuous = run(jobs, semantics="continuous")
    assert continuous[2].start == 20  # the default backfills C at once
    assert continuous[1].start == 1000


def test_higher_priority_job_preempts_a_lower_priority_one():
    # SRTF: S (short) arrives while L (long) holds every GPU; at the next boundary L is suspended.
    jobs = [rigid(0, 0, 4, 10_000), rigid(1, 400, 4, 100)]
    out = run(jobs, policy="srtf")
    assert out[1].start == 2 * R and out[1].finish == 3 * R
    assert out[0].preemptions == 1
    # L ran 720 s, waited while S ran (720..1080), then its other 9,280 s: done at 10,360, recorded at 10,440.
    assert out[0].finish == round_boundary(3 * R + 10_000 - 2 * R, R) == 29 * R


def test_arrivals_are_admitted_at_round_boundaries():
    jobs = [rigid(0, 100, 1, 500), rigid(1, 2 * R, 1, 10)]
    out = run(jobs)
    assert out[0].start == R and out[0].finish == 3 * R  # 360 + 500 = 860, recorded at 1080
    assert out[0].jct == 3 * R - 100
    assert out[1].start == 2 * R  # an arrival exactly on a boundary is admitted there


def test_predictions_are_round_boundaries_too():
    jobs = [rigid(0, 0, 2, 1000), rigid(1, 10, 4, 100), rigid(2, 20, 1, 100)]
    out = run(jobs, predict=True)
    for rec in out.values():  # nothing arrives after a job's first prediction: it comes true exactly
        assert rec.first_pred == rec.finish


def test_only_priority_orders_run_strictly():
    with pytest.raises(ValueError, match="no priority order"):
        StrictPriority(build_policy("themis"))
    with pytest.raises(ValueError, match="unknown semantics"):
        with_semantics(build_policy("fifo"), "gavel")
    assert with_semantics(build_policy("fifo"), "continuous").round_s is None


# -- the PAL artifact's cluster ------------------------------------------------------------


def test_pal_sim64_is_the_artifacts_own_draw():
    """The artifact's rule (random.seed(42); per GPU, class A..D, a random median-normalised run of
    ResNet-50, BERT, BERT, PageRank) gives the bundled scores, and its bins group them exactly."""
    base = data_dir() / "pal" / "variability"
    files = {"A": "resnet", "B": "bert", "C": "bert", "D": "pagerank"}
    runs = {}
    for c, app in files.items():
        with open(base / "sim" / f"{app}-longhorn-agg.csv", newline="") as f:
            perf = np.asarray([float(r["perf"]) for r in csv.DictReader(f)])
        runs[c] = [float(x) for x in perf / np.median(perf)]
    rng = random.Random(42)
    drawn = {c: [] for c in files}
    for _ in range(64):
        for c in files:
            drawn[c].append(rng.choice(runs[c]))
    profile = load_profile("pal-sim64")
    assert profile.fixed
    for c in files:
        raw, bins = profile.scores[c], profile.binned[c]
        assert raw.tolist() == drawn[c]
        with open(base / f"gpudf_class{c}.csv", newline="") as f:
            assert bins.tolist() == [float(r["sf"]) for r in csv.DictReader(f)]
        levels = sorted(set(bins.tolist()))
        centroids = [raw[bins == v].mean() for v in levels]
        for lo, hi in zip(levels, levels[1:]):  # bins are intervals of the raw scores
            assert raw[bins == lo].max() < raw[bins == hi].min()
        ratio = np.asarray(centroids) / np.median(centroids)  # the artifact scales bins by the median centroid
        assert np.allclose(ratio, levels, rtol=1e-9)
    with pytest.raises(ProfileError, match="recorded 64-GPU cluster"):
        profile.sample(32)


def avg_jct(placement: str, semantics: str, workload: int = 1) -> float:
    jobs = read_sia_philly(data_dir() / "pal" / "sia-philly" / f"workload-{workload}.csv")
    setup = configure_placement(ClusterSpec.homogeneous(64, 4), placement, profile="pal-sim64",
                                locality_penalty=1.7)
    res = simulate(jobs, 64, with_semantics(build_policy("fifo"), semantics), placement=setup.new(), predict=False)
    return float(np.mean([r.jct for r in res.records]))


def test_workload_1_matches_the_authors_simulator():
    """The PAL authors' Blox simulator on Sia-Philly workload-1 (64 GPUs, FIFO, L = 1.7), its figures and
    tolerances read from ``pcs_ray/data/pal/reference/blox-workload-1.json`` (provenance there)."""
    authors = json.loads((data_dir() / "pal" / "reference" / "blox-workload-1.json").read_text())
    jct, tol = authors["avg_jct_s"], authors["tolerance"]
    packed, pal = avg_jct("packed-sticky", "blox"), avg_jct("pal", "blox")
    assert abs(packed / jct["packed-sticky"] - 1) <= tol["avg_jct_rel"]
    assert abs(pal / jct["pal"] - 1) <= tol["avg_jct_rel"]
    assert abs(pal / packed - jct["pal"] / jct["packed-sticky"]) <= tol["pal_over_packed_sticky_abs"]
    assert avg_jct("packed-sticky", "continuous") < 0.7 * packed  # backfilling hides head-of-line blocking


# -- the command line --------------------------------------------------------------------------


def test_cli_semantics(capsys):
    trace = ["simulate", "--trace", "sia-philly/workload-1", "--gpus", "64", "--no-predict", "--json"]
    assert cli.run([*trace, "-p", "all", "--semantics", "blox"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["runs"]] == ["fifo", "las", "srtf"]  # `all`: the priority orders
    assert out["workload"]["semantics"] == "blox"
    assert all(r["config"]["semantics"] == "blox" and r["config"]["round_s"] == R for r in out["runs"])
    assert cli.run([*trace, "-p", "fifo,themis", "--semantics", "blox"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: --semantics blox: policy 'themis' has no priority order")
    small = ["simulate", "--trace", "sia-philly/workload-1", "--gpus", "32", "-p", "fifo"]
    for bad, fragment in ((["--semantics", "gavel"], "--semantics"),
                          (["--placement", "pal", "--profile", "pal-sim64"], "recorded 64-GPU cluster")):
        assert cli.run([*small, *bad]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err
