"""A rank's hang dump: re-armed at most every so often, firing after its timeout of silence less at most that."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pcs_ray.executors import hang_dump


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def armed(monkeypatch):
    """The deadlines ``faulthandler`` is armed with, on a clock the test moves."""
    clock, calls = Clock(), []
    monkeypatch.setattr(hang_dump, "time", SimpleNamespace(monotonic=clock), raising=False)
    monkeypatch.setattr(hang_dump.faulthandler, "dump_traceback_later", lambda timeout, **_: calls.append(clock.t + timeout))
    monkeypatch.setattr(hang_dump.faulthandler, "cancel_dump_traceback_later", lambda: calls.clear())
    hang_dump.disarm()
    yield clock, calls
    hang_dump.disarm()


def test_reports_many_times_a_second_rearm_the_watchdog_about_once_a_second(armed):
    clock, calls = armed
    for _ in range(3000):  # a small loop's reports: one every 3 ms for 9 s
        hang_dump.arm(1800.0)
        clock.t += 0.003
    assert 9 <= len(calls) <= 10  # not 3000 watchdog threads ended and started


def test_the_dump_fires_after_the_timeout_of_silence_less_at_most_the_rearm_interval(armed):
    clock, calls = armed
    for gap in (0.3, 0.3, 0.3, 0.2, 0.05, 2.0, 0.01):
        hang_dump.arm(60.0)
        last = clock.t
        assert last + 60.0 - hang_dump.REARM_S <= calls[-1] <= last + 60.0
        clock.t += gap


def test_a_short_timeout_keeps_its_dump_within_a_tenth_of_it(armed):
    clock, calls = armed
    hang_dump.arm(0.5)
    clock.t += 0.04
    hang_dump.arm(0.5)  # within 0.05 s of the first: left be
    assert calls == [100.5]
    clock.t += 0.02
    hang_dump.arm(0.5)
    assert calls[-1] == pytest.approx(clock.t + 0.5)


def test_a_new_timeout_or_a_disarm_arms_afresh(armed):
    clock, calls = armed
    hang_dump.arm(60.0)
    hang_dump.arm(30.0)
    assert calls[-1] == pytest.approx(clock.t + 30.0)
    hang_dump.disarm()
    hang_dump.arm(30.0)
    assert calls == [pytest.approx(clock.t + 30.0)]
    hang_dump.arm(None)
    assert len(calls) == 1
