"""The slow-run filter (``pcs_ray.placement.slow_runs``): placements that avoid GPUs predicted slow, and
step aside when they must."""

from __future__ import annotations

import pytest

from pcs_ray.policies import build_policy
from pcs_ray.sim.run import simulate
from builders import job_spec, recorded_devices, replayed, slow_device


def test_slow_run_filter_avoids_predicted_slow_gpus_with_a_reason():
    recorded = recorded_devices(8)
    placed = replayed("packed-sticky-slow-run", recorded)
    slow = [0, 1]  # predicted (and really) slow
    for g in slow:
        placed.replay.devices[g] = slow_device(2.0)
    result = simulate([job_spec(1, max_gpus=2, rigid=True, runtime=100.0)], 8, build_policy("fcfs-easy"), predict=False,
                      placement=placed)
    assert placed.replay.slow_runs == 0 and result.records[0].finish == pytest.approx(100.0)
    assert not set(placed.assignment().get(1, ())) & set(slow)
    why = placed.explain(1)
    assert why["rejections"].get("predicted-slow", 0) >= 1
    # Without the filter the same job lands on the lowest ids, the slow ones.
    plain = replayed("packed-sticky", recorded)
    for g in slow:
        plain.replay.devices[g] = placed.replay.devices[g]
    simulate([job_spec(1, max_gpus=2, rigid=True, runtime=100.0)], 8, build_policy("fcfs-easy"), predict=False,
             placement=plain)
    assert plain.replay.slow_runs == 1


def test_slow_run_filter_steps_aside_when_it_must():
    """When fewer GPUs than the job needs are predicted fast, the job still runs."""
    placed = replayed("combined-slow-run", recorded_devices(4, slow_gpu=0))
    result = simulate([job_spec(1, max_gpus=4, rigid=True, runtime=100.0)], 4, build_policy("fcfs-easy"), predict=False,
                      placement=placed)
    assert result.records[0].finish == pytest.approx(300.0)


