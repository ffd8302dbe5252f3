"""Run-to-run replay (``pcs_ray.variability.run_replay``): recorded runs slow the simulated ones, drawn
from the job's own application, whole recorded nodes on one clock."""

from __future__ import annotations

import numpy as np
import pytest

from pcs_ray.cluster import ClusterSpec
from pcs_ray.placement import create_placement
from pcs_ray.policies import build_policy
from pcs_ray.variability.run_replay import DeviceRuns, ReplayedPlacement, RunReplay
from pcs_ray.sim.run import simulate
from builders import job_spec, recorded_devices, replayed, slow_device


def test_replay_slows_runs_and_counts_them():
    placed = replayed("packed-sticky", recorded_devices(4))
    placed.replay.devices[2] = slow_device(3.0)
    result = simulate([job_spec(1, max_gpus=4, rigid=True, runtime=100.0)], 4, build_policy("fcfs-easy"), predict=False,
                      placement=placed)
    assert result.records[0].finish == pytest.approx(300.0)  # the slowest GPU sets the pace
    assert placed.replay.summary() == {"runs": 1, "slow_runs": 1, "predicted_slow_runs": 1, "predicted_and_slow": 1}


def test_replay_draws_from_the_jobs_own_application():
    """Per-application pools: a class A job replays the A application's records, a class C job C's; a
    prediction is for the job's application, and a cluster larger than a pool draws it again."""
    slow = [DeviceRuns(f"a{i}", np.full(3, 2.0), np.full(3, True), np.full(3, True)) for i in range(2)]
    fast = [DeviceRuns(f"c{i}", np.full(3, 1.0), np.full(3, False), np.full(3, False)) for i in range(2)]
    replay = RunReplay({"resnet": slow, "pagerank": fast}, 4, seed=0, classes={"A": "resnet", "C": "pagerank"})
    a = simulate([job_spec(1, job_class="A")], 4,
                 build_policy("fcfs-easy"), predict=False,
                 placement=ReplayedPlacement(create_placement("packed-sticky", ClusterSpec.homogeneous(4, 4)), replay))
    assert a.records[0].finish == pytest.approx(200.0) and replay.slow_runs == 1
    c_job = job_spec(2, job_class="C")
    assert replay.draw([0, 1, 2, 3], 0.0, type("J", (), {"spec": c_job})()) == (1.0, False, False)
    assert replay.predicted_slow(type("J", (), {"spec": c_job})(), 0.0).tolist() == [False] * 4


def test_replay_lays_whole_recorded_nodes_on_one_clock():
    """A simulated node replays one recorded node's GPUs, all on one clock: a recorded node-wide slow
    moment is slow on all four simulated GPUs at once, and on the other node at no time."""
    def node(name, slow_at):
        return [DeviceRuns(f"{name}-{k}", np.array([1.0, 3.0 if slow_at else 1.0, 1.0]),
                           np.array([False, slow_at, False]), np.array([False, slow_at, False]),
                           np.array([0.0, 3600.0, 7200.0])) for k in range(4)]

    replay = RunReplay(node("c1-1", False) + node("c1-2", True), 8, seed=3, node_of=[0] * 4 + [1] * 4)
    nodes = [{d.device.rsplit("-", 1)[0] for d in replay.devices[i:i + 4]} for i in (0, 4)]
    assert all(len(n) == 1 for n in nodes) and nodes[0] != nodes[1]
    slow_node = 0 if nodes[0] == {"c1-2"} else 1
    moments = [replay.predicted_slow(None, t).tolist() for t in np.arange(0.0, 3 * 3600.0 + 1, 900.0)]
    assert any(any(m) for m in moments)
    for m in moments:
        slow, other = m[4 * slow_node:4 * slow_node + 4], m[4 - 4 * slow_node:8 - 4 * slow_node]
        assert slow in ([True] * 4, [False] * 4) and not any(other)


