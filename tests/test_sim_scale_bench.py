"""bench/sim_scale.py's own arithmetic: the growth exponents and the per-round cost split it prints.

The bench itself (minutes per series) is run by hand; its figures are in the closing notes.
"""

from __future__ import annotations

import numpy as np
import pytest
from builders import bench_module


@pytest.fixture(scope="module")
def bench():
    with bench_module("sim_scale") as module:
        yield module


def point(apps, gpus, cpu_s, rounds=0, jobs_per_round=0.0, touched=0.0, finished=True, kept=None):
    return {"apps": apps, "gpus": gpus, "cpu_s": cpu_s, "wall_s": cpu_s, "rounds": rounds,
            "jobs_per_round": jobs_per_round, "gpus_touched_per_round": touched, "finished": finished,
            "kept": int(rounds * jobs_per_round * 0.9) if kept is None else kept}


def test_the_exponent_is_the_slope_of_log_time_on_log_work(bench):
    linear = [point(8 * g, g, 0.001 * 8 * g * g) for g in (500, 1000, 2000)]
    assert bench.exponent(linear) == pytest.approx(1.0)
    assert bench.exponent(linear, "cpu_s") == pytest.approx(1.0)
    # against apps x GPUs touched per round, with as many GPUs touched per round at every size
    flat = [point(8 * g, g, 0.002 * 8 * g, touched=100.0) for g in (500, 1000, 2000)]
    assert bench.exponent(flat, "cpu_s", "gpus_touched_per_round") == pytest.approx(1.0)
    unfinished = [*flat, point(64000, 8000, 1.0, touched=100.0, finished=False)]
    assert bench.exponent(unfinished, "cpu_s", "gpus_touched_per_round") == pytest.approx(1.0)
    assert bench.exponent(flat[:1]) is None


def test_a_round_costs_a_fixed_part_and_a_part_per_job_it_walks(bench):
    # 200 us a round plus 1.5 us per job walked, rounds in thousands
    points = [point(1, 1, (200 + 1.5 * jobs) * rounds * 1e-6, rounds, jobs) for rounds, jobs in
              ((24_000, 22.6), (47_000, 43.1), (82_000, 89.0), (133_000, 183.8))]
    assert bench.round_cost(points) == {"fixed_us": pytest.approx(200.0, abs=0.1), "per_job_us": pytest.approx(1.5, abs=1e-3)}
    assert bench.round_cost(points[:1]) is None
    assert bench.round_cost([point(1, 1, 1.0)] * 3) is None  # no placement rounds
    assert bench.round_cost([{**p, "kept": 0} for p in points]) is None  # a sticky placement walks no kept jobs


def test_what_placement_adds_is_the_run_without_placement_subtracted(bench):
    # the run without placement grows as apps x GPUs; placement adds 1 ms per app, touching 100 GPUs a round
    bare = [point(8 * g, g, 1e-6 * 8 * g * g) for g in (500, 1000, 2000, 4000)]
    placed = [point(8 * g, g, 1e-6 * 8 * g * g + 0.001 * 8 * g, touched=100.0) for g in (500, 1000, 2000, 4000)]
    added = bench.placement_share(placed, bare)
    assert [p["cpu_s"] for p in added] == pytest.approx([0.001 * 8 * g for g in (500, 1000, 2000, 4000)])
    assert bench.exponent(added, "cpu_s", "gpus_touched_per_round") == pytest.approx(1.0)
    assert bench.exponent(placed, "cpu_s", "gpus_touched_per_round") > 1.2  # the whole run's time grows faster
    # sizes without a run without placement (mapa's whole DGX-1 nodes: 496), or no added time, are left out
    assert [p["gpus"] for p in bench.placement_share([point(3968, 496, 5.0, touched=100.0), *placed[1:]], bare)] == [1000, 2000, 4000]
    assert bench.placement_share([point(4000, 500, 0.1, touched=100.0)], bare) == []


def test_a_fixed_cost_per_event_reads_above_one_where_rounds_touch_fewer_gpus(bench):
    # every event costs 300 us on any cluster, two events per app; rounds touch 109 GPUs at 500 and 75 at 8,000
    touched = {500: 109.0, 1000: 105.0, 2000: 100.0, 4000: 93.0, 8000: 75.0}
    points = [{**point(8 * g, g, 300e-6 * 16 * g, touched=t), "events": 16 * g} for g, t in touched.items()]
    reference = bench.exponent(points, "events", "gpus_touched_per_round")
    assert reference == bench.exponent(points, "cpu_s", "gpus_touched_per_round")
    work = np.log([p["apps"] * p["gpus_touched_per_round"] for p in points])
    assert reference == pytest.approx(np.polyfit(work, np.log([p["events"] for p in points]), 1)[0], abs=1e-3)
    assert reference > 1.1  # events grow 16x while apps x GPUs touched per round grow 16 x 75 / 109 = 11x
    assert bench.event_cost_exponent(points) == pytest.approx(0.0)
    # an event that costs 100 us more for every 1,000 GPUs grows with the cluster
    growing = [{**p, "cpu_s": (300e-6 + 1e-7 * p["gpus"]) * p["events"]} for p in points]
    assert bench.event_cost_exponent(growing) > 0.3
    assert bench.event_cost_exponent(points[:1]) is None


def test_a_fixed_cost_per_round_is_read_against_the_total_gpus_touched(bench):
    # 4 rounds per app on the smallest cluster, 2 on the largest; every round touches 100 GPUs
    points = [{**point(8 * g, g, 1e-4 * 8 * g * r, rounds=8 * g * r), "gpus_touched_per_app": 100.0 * r}
              for g, r in ((500, 4), (2000, 3), (8000, 2))]
    assert bench.exponent(points, "rounds", "gpus_touched_per_app") == pytest.approx(1.0)
    assert bench.exponent(points, "cpu_s", "gpus_touched_per_app") == pytest.approx(1.0)
