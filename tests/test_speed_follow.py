"""Other jobs' forecasts follow the speed model's shared estimates once they move, not at every sample.

Every start and stop adds a cost sample; re-syncing every queued job for each costs O(jobs) per call
(16 ms at 1,000 queued), so the model bumps its version only when an estimate moved by its tolerance.
"""

from __future__ import annotations

import pytest

from pcs_ray.coordinator.speed import COST_TOLERANCE, ESTIMATE_TOLERANCE, SpeedModel


def test_a_cost_is_followed_when_first_measured_and_once_it_moved_by_its_tolerance():
    speed = SpeedModel()
    v = speed.version
    speed._add_cost("tiny", "start", 10.0)
    assert speed.version == v + 1  # a first measurement: every job follows it
    rel, floor = COST_TOLERANCE
    speed._add_cost("tiny", "start", 10.0 * (1 + rel / 2))  # EMA moves the mean by rel * 0.15: within tolerance
    assert speed.version == v + 1
    assert speed.cost("tiny", "start") > 10.0  # the estimate itself moved; the forecasts follow it later
    for _ in range(5):  # a run of slower starts: the mean moves past the tolerance
        speed._add_cost("tiny", "start", 14.0)
    assert speed.version > v + 1
    assert speed.cost("tiny", "start") > 10.0 * (1 + rel)


def test_small_costs_move_by_the_floor_in_seconds_not_by_their_share():
    speed = SpeedModel()
    speed._add_cost("tiny", "stop", 0.05)
    v = speed.version
    _, floor = COST_TOLERANCE
    speed._add_cost("tiny", "stop", 0.5)  # 10x, but the mean moves by 0.135 s < floor
    assert speed.cost("tiny", "stop") - 0.05 < floor
    assert speed.version == v
    speed._add_cost("tiny", "warm_start", 0.05)  # another kind: followed at once
    assert speed.version == v + 1


def test_the_estimate_ratio_is_followed_once_it_moved():
    speed = SpeedModel()
    assert speed._moved(("estimate_ratio",), 1.0, ESTIMATE_TOLERANCE)
    assert not speed._moved(("estimate_ratio",), 1.0 + ESTIMATE_TOLERANCE / 2, ESTIMATE_TOLERANCE)
    assert speed._moved(("estimate_ratio",), 1.0 + 2 * ESTIMATE_TOLERANCE, ESTIMATE_TOLERANCE)
    # what is followed is the value at the last move, not the latest sample
    assert not speed._moved(("estimate_ratio",), 1.0 + 2.5 * ESTIMATE_TOLERANCE, ESTIMATE_TOLERANCE)
    assert speed._followed[("estimate_ratio",)] == pytest.approx(1.0 + 2 * ESTIMATE_TOLERANCE)
