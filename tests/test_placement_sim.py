"""Placement inside the simulator (slowdowns, migration overhead, predictions) and on the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pcs_ray.cli import run
from pcs_ray.cluster import ClusterSpec, GPUSpec, NodeSpec
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.data import data_dir
from pcs_ray.placement import create_placement
from pcs_ray.variability.profiles import apply_profile, load_profile
from pcs_ray.policies import build_policy
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.traces import read_sia_philly

DATA = data_dir()
SIA1 = DATA / "pal" / "sia-philly" / "workload-1.csv"
DGX1 = DATA / "topology" / "dgx1-v100.topo"


def two_gpus() -> ClusterSpec:
    """GPU 0 is nominal for class A, GPU 1 twice as slow; class B sees no difference."""
    return ClusterSpec(nodes=[NodeSpec(name="n0", gpus=[
        GPUSpec(index=0, uuid="g0", scores={"A": 1.0}), GPUSpec(index=1, uuid="g1", scores={"A": 2.0})])])


def jobs_b_then_a() -> list[JobSpec]:
    return [JobSpec(1, 0.0, 100.0, 1, linear_speedup(1), job_class="B"),
            JobSpec(2, 10.0, 100.0, 1, linear_speedup(1), job_class="A")]


def finishes(result) -> dict[int, float]:
    return {r.job_id: r.finish for r in result.records}


def test_non_sticky_move_costs_the_overhead_exactly():
    # PM-First moves the class B job off GPU 0 when the class A job arrives at t=10.
    res = simulate(jobs_b_then_a(), 2, build_policy("fifo"), placement=create_placement("pm-first", two_gpus()),
                   overhead=5.0, predict=False)
    assert finishes(res) == pytest.approx({1: 10 + 5 + 90, 2: 110})
    res = simulate(jobs_b_then_a(), 2, build_policy("fifo"), placement=create_placement("pm-first", two_gpus()),
                   predict=False)
    assert finishes(res) == pytest.approx({1: 100, 2: 110})
    # Packed-Sticky leaves the B job where it is; the A job runs on the slow GPU.
    res = simulate(jobs_b_then_a(), 2, build_policy("fifo"), placement=create_placement("packed-sticky", two_gpus()),
                   overhead=5.0, predict=False)
    assert finishes(res) == pytest.approx({1: 100, 2: 10 + 200})


def test_predictions_with_a_placement_are_exact_and_leave_the_schedule_alone():
    jobs = jobs_b_then_a()
    plain = simulate(jobs, 2, build_policy("fifo"), placement=create_placement("pm-first", two_gpus()),
                     predict=False)
    predicted = simulate(jobs, 2, build_policy("fifo"), placement=create_placement("pm-first", two_gpus()))
    assert finishes(plain) == finishes(predicted)
    last = {r.job_id: r.last_pred for r in predicted.records}
    assert last == pytest.approx(finishes(predicted))  # nothing arrives after job 2: its play is exact


def test_variability_and_locality_slow_jobs_down_in_simulation():
    spec = JobSpec(1, 0.0, 300.0, 3, linear_speedup(3), min_gpus=3, job_class="A")
    cluster = ClusterSpec(nodes=[
        NodeSpec(name="a", gpus=[GPUSpec(index=i, uuid=f"a{i}", scores={"A": s}) for i, s in enumerate([1.0, 1.3])]),
        NodeSpec(name="b", gpus=[GPUSpec(index=i, uuid=f"b{i}", scores={"A": s}) for i, s in enumerate([1.1, 1.0])]),
    ], locality_penalty=1.5)
    res = simulate([spec], 4, build_policy("fifo"), placement=create_placement("pm-first", cluster), predict=False)
    # The three best GPUs (1.0, 1.0, 1.1) span both nodes: 100 s x 1.1 x 1.5.
    assert res.records[0].finish == pytest.approx(100 * 1.1 * 1.5)


@pytest.mark.parametrize("seed", [0, 1])
def test_sia_philly_ordering_on_one_trace(seed):
    """A reduced version of the bench experiment: one trace, FIFO, L = 1.7, Longhorn profile."""
    jobs = read_sia_philly(SIA1)
    cluster = apply_profile(ClusterSpec.homogeneous(64, 4, 1.7), load_profile("longhorn"), seed)
    avg = {}
    for name in ("packed-sticky", "random-nonsticky", "pal"):
        res = simulate(jobs, 64, build_policy("fifo"), placement=create_placement(name, cluster, seed=seed),
                       predict=False)
        avg[name] = float(np.mean([r.jct for r in res.records]))
    assert avg["pal"] < 0.9 * min(avg["packed-sticky"], avg["random-nonsticky"])


# -- CLI ------------------------------------------------------------------------------------


def cli_json(capsys, *args) -> dict:
    code = run(["simulate", *args, "--json", "--no-predict"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_cli_placement_json(capsys):
    out = cli_json(capsys, "--trace", str(SIA1), "--gpus", "64", "--gpus-per-node", "4", "-p", "fifo",
                   "--placement", "pal", "--profile", "longhorn", "--profile-seed", "2", "--locality-penalty", "1.7")
    assert out["placement"]["placement"] == "pal" and out["placement"]["locality_penalty"] == 1.7
    assert out["workload"]["placement"] == {"placement": "pal", "locality_penalty": 1.7, "profile": "longhorn",
                                            "profile_seed": 2}
    assert out["placement"]["jobs_across_nodes"] > 0
    assert "sensitive_effbw_gbps" not in out["placement"]


def test_cli_topology_reports_effective_bandwidth(capsys):
    out = cli_json(capsys, "--trace", str(SIA1), "--gpus", "64", "-p", "fifo", "--placement", "mapa-preserve",
                   "--topology", str(DGX1))
    assert out["workload"]["gpus_per_node"] == 8
    bw = out["placement"]["sensitive_effbw_gbps"]
    assert bw["jobs"] > 0 and 0 < bw["min"] <= bw["p25"] <= bw["p50"] <= bw["max"]
    assert out["placement"]["migrations"] == 0  # MAPA is sticky


@pytest.mark.parametrize("args, message", [
    (["--placement", "best"], "unknown placement 'best'"),
    (["--profile", "longhorn"], "need --placement"),
    (["--placement", "pal", "--profile", "mars"], "unknown profile"),
    (["--placement", "pal", "--locality-penalty", "0.5"], "locality-penalty"),
    (["--placement", "pal", "--gpus-per-node", "4", "--topology", str(DGX1)], "has 8 GPUs"),
])
def test_cli_placement_errors_are_one_line(capsys, args, message):
    code = run(["simulate", "--gpus", "16", "--num-jobs", "5", "-p", "fifo", "--no-predict", *args])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
