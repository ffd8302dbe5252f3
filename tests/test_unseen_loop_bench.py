"""bench/unseen_loop_prediction.py's own arithmetic: how it sizes a job from its probe and what it says about the machine.

The bench itself (three loops on a private Ray) is run by hand; its figures are in the closing notes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "unseen_loop_prediction.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("unseen_loop_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCH.parent))  # as `python bench/unseen_loop_prediction.py` has it
        spec.loader.exec_module(module)
        yield module
    sys.modules.pop("common", None)


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
