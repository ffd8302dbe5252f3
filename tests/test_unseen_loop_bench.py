"""bench/unseen_loop_prediction.py's own arithmetic: how it sizes a job from its probe and what it says about the machine.

The bench itself (three loops on a private Ray) is run by hand; its figures are in the closing notes.
"""

from __future__ import annotations

import pytest
from builders import bench_module


@pytest.fixture(scope="module")
def bench():
    with bench_module("unseen_loop_prediction") as module:
        yield module


def test_a_probe_whose_reports_span_one_second_is_too_short_to_size_a_job(bench):
    # Two reports a second apart, the second after the loop's slow first steps: 89 steps/s of a loop that runs 190.
    assert bench.probe_pace([(10.0, 1), (11.0, 90)]) is None
    assert bench.probe_pace([(10.0, 1)]) is None


def test_a_probe_spanning_a_few_seconds_gives_its_pace(bench):
    polled = [(10.0, 1), (11.0, 90), (12.0, 280), (13.0, 470), (14.0, 660)]
    assert bench.probe_pace(polled) == pytest.approx(659 / 4.0)


def test_busy_cores_is_the_machine_share_between_two_readings(bench, monkeypatch):
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    assert bench.busy_cores((100, 1000, 1), (250, 1200, 3)) == 1.5  # 150 of 200 ticks busy on 2 cores
    assert bench.busy_cores(None, (250, 1200, 3)) is None
    assert bench.busy_cores((100, 1000, 1), (100, 1000, 1)) is None
    assert bench.runnable([(0, 0, 1), None, (0, 0, 4)]) == 2.5
    assert bench.runnable([None]) is None
    reading = bench.cpu_reading()
    assert reading is None or (0 <= reading[0] <= reading[1] and reading[2] >= 1)  # this test's thread runs


def test_the_bare_anchor_extrapolates_the_loops_own_pace_from_its_first_report_to_its_tenth(bench):
    # First report at 1 s (step 1, warm-up and all), the tenth (step 10 of 100) at 2.8 s: 0.2 s a step from
    # the first report on, so 2.8 + 90 * 0.2 = 20.8 s foretold; the loop took 23.4 s (it slowed after its tenth).
    reports = [[1.0, 1, 0.9], [2.0, 6, 1.8], [2.8, 10, 2.6], [23.4, 100, 21.0]]
    anchor = bench.ideal_at_tenth(reports, 100, 23.4)
    assert anchor["predicted_jct_at_tenth_s"] == pytest.approx(20.8)
    assert anchor["error_at_tenth_pct"] == pytest.approx(100 * 2.6 / 20.8, abs=0.01)
    assert anchor["signed_error_at_tenth_s"] == pytest.approx(2.6)
    assert anchor["steps_per_s_before_tenth"] == pytest.approx(5.0)
    assert anchor["steps_per_s_after_tenth"] == pytest.approx(90 / 20.6, abs=0.01)
    assert anchor["loop_cpu_ms_per_step_before_tenth"] == pytest.approx(1000 * 1.7 / 9, abs=0.001)
    assert anchor["loop_cpu_ms_per_step_after_tenth"] == pytest.approx(1000 * 18.4 / 90, abs=0.001)


def test_a_bare_run_whose_first_report_is_past_its_tenth_has_no_anchor(bench):
    assert bench.ideal_at_tenth([[1.0, 50, 1.0], [2.0, 100, 2.0]], 100, 2.0)["error_at_tenth_pct"] is None
    assert bench.ideal_at_tenth([], 100, 2.0)["error_at_tenth_pct"] is None


def test_the_loops_cpu_per_step_and_cores_between_two_readings(bench):
    assert bench.cpu_per_step(1.0, 1.5, 100) == 5.0  # 0.5 s of CPU over 100 steps
    assert bench.cpu_per_step(None, 1.5, 100) is None
    assert bench.cpu_per_step(1.0, 1.5, 0) is None
    assert bench.cpu_share(1.0, 1.8, 1.0) == 0.8  # it got 0.8 of a core: it waited for one the rest of the time
    assert bench.cpu_share(1.0, None, 1.0) is None


def test_the_loops_process_cpu_is_read_from_proc(bench):
    import os

    cpu = bench.process_cpu_s(os.getpid())
    assert cpu is None or cpu >= 0
    assert bench.process_cpu_s(2**22 + 12345) is None  # no such process
    assert bench.process_niceness(os.getpid()) in (None, os.nice(0))
    assert bench.process_niceness(2**22 + 12345) is None


def test_ray_processes_cpu_counts_those_seen_twice_and_those_started_between(bench):
    before = {10: 5.0, 11: 1.0, 12: 3.0}  # 12 ends before the next reading: not counted
    now = {10: 5.5, 11: 1.25, 13: 0.5}  # 13 started between: all of its CPU
    assert bench.others_cpu_s(before, now) == pytest.approx(1.25)
    assert bench.others_cpu_s(None, now) is None
    polls = [(100.0, 0, 0, 0, 0, 0, 0.2), (101.0, 0, 0, 0, 0, 0, 0.5), (102.0, 0, 0, 0, 0, 0, 0.3)]
    assert bench.others_cores(polls) == pytest.approx(0.4)  # 0.8 s of CPU over the 2 s between the first and last poll
    assert bench.others_cores(polls[:1]) is None
    assert bench.others_cores([(100.0, 0, 0, 0, 0, 0, None), (101.0, 0, 0, 0, 0, 0, 0.5)]) is None
