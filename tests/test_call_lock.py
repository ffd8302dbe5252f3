"""The coordinator's lock: a background forecast play stands aside while a call wants the lock."""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace

import pytest

from pcs_ray.coordinator.call_lock import CallLock
from pcs_ray.coordinator.host import CoordinatorHost
from builders import placed_core, random_submission, unequal_cluster, whole_play


def test_the_host_lock_is_a_call_lock_and_reentrant():
    class Host(CoordinatorHost):
        def _execute(self, actions):
            pass

    lock = Host(core=None).lock
    assert isinstance(lock, CallLock)
    with lock:
        with lock:
            assert lock.wanted
        assert lock.wanted
    assert not lock.wanted


def test_a_play_pauses_while_a_call_holds_the_lock_and_goes_on_once_it_is_released():
    lock = CallLock()
    pause = lock.yielder(budget_s=30.0)
    events = []
    stop = threading.Event()

    def play():
        while not stop.is_set():
            pause()
            events.append(time.monotonic())
            time.sleep(0.001)

    with lock:
        worker = threading.Thread(target=play)
        worker.start()
        time.sleep(0.3)
        held = len(events)
    deadline = time.monotonic() + 30
    while len(events) <= 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    worker.join(5)
    assert held == 0  # not one event while the call held the lock
    assert len(events) > 10  # and it went on once the call was done


def test_a_play_stands_aside_for_at_most_its_budget():
    """The budget is spent once over the play, not per event: with the whole budget gone in the first
    wait (as the clock says), the next pauses return at once although the lock is still held."""
    lock = CallLock()
    ticks = iter([0.0, 0.2, 0.2, 0.2])  # the first wait takes the whole 0.2 s budget
    pause = lock.yielder(budget_s=0.2, clock=lambda: next(ticks))
    waits = []
    real_wait_for = lock._state.wait_for
    lock._state.wait_for = lambda *a, **k: waits.append(k.get("timeout")) or real_wait_for(*a, **k)
    with lock:
        done = threading.Thread(target=lambda: [pause() for _ in range(5)])
        done.start()
        done.join(30)
        assert not done.is_alive()  # five pauses while the lock was held all along
    assert waits == [0.2]  # one wait, for the whole budget; the other four pauses did not wait


def test_a_play_keeps_its_share_of_the_time_under_a_stream_of_calls():
    """With a share of one half, the play's waits never add up to more than the time it ran: the first
    pause (nothing run yet) and a pause right after a wait do not wait; after 0.1 s of running it may
    wait 0.1 s, and after 0.2 s more, the 0.2 s it has earned since. The lock is held all along."""
    lock = CallLock()
    ticks = iter([0.0, 0.1, 0.2, 0.2, 0.4, 0.6])  # each pause reads the clock before (and after a wait)
    pause = lock.yielder(budget_s=30.0, share=0.5, clock=lambda: next(ticks))
    waits = []
    real_wait_for = lock._state.wait_for
    lock._state.wait_for = lambda *a, **k: waits.append(round(k.get("timeout"), 9)) or real_wait_for(*a, **k)
    with lock:
        done = threading.Thread(target=lambda: [pause() for _ in range(4)])
        done.start()
        done.join(30)
        assert not done.is_alive()
    assert waits == [0.1, 0.2]
    with pytest.raises(ValueError):
        lock.yielder(budget_s=1.0, share=1.0)


def test_a_failed_acquire_does_not_leave_the_lock_wanted():
    lock = CallLock()
    lock._lock = None  # acquiring raises
    with pytest.raises(AttributeError):
        with lock:
            pass
    assert not lock.wanted


def test_a_detached_play_that_pauses_between_events_forecasts_the_same():
    core, clock = placed_core(unequal_cluster(), "pcs-bal")
    rng = random.Random(3)
    for _ in range(40):
        clock.t += rng.uniform(0.0, 30.0)
        core.submit(random_submission(rng))
    began, play = core.begin_play_refresh()
    calls = []
    finish = play(between=lambda: calls.append(1))
    assert finish == whole_play(core)
    assert len(calls) > 10  # once per event


def test_the_host_times_each_submissions_wait_for_the_lock_apart_from_its_work(monkeypatch):
    """On a clock that only the lock's holder moves (0.3 s while the submission waits for it), the
    submission's wait is exactly that and its own work, done on a still clock, is zero."""
    from pcs_ray.coordinator import host as host_module
    from pcs_ray.coordinator.local import LocalCoordinator

    clock = [0.0]
    monkeypatch.setattr(host_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    core, _ = placed_core(unequal_cluster(), "pcs-bal")
    host = LocalCoordinator(core)
    assert host.submit_latency() == {"count": 0}
    rng = random.Random(5)
    host.submit(random_submission(rng))
    held = threading.Event()

    def hold_the_lock():
        with host.lock:
            held.set()
            while host.lock._wanted < 2:  # until the submission waits behind us
                time.sleep(0.001)
            clock[0] += 0.3

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    held.wait()
    host.submit(random_submission(rng))  # waits behind the holder
    holder.join()
    out = host.submit_latency()
    assert out["count"] == 2
    assert out["wait"]["max_ms"] == pytest.approx(300.0) and out["held"]["max_ms"] == 0.0
    later = host.submit_latency(after=1)
    assert later["count"] == 1 and later["wait"]["p50_ms"] == pytest.approx(300.0)


def test_the_host_gives_the_decisions_after_a_count_with_their_times_for_a_soaks_windows():
    from pcs_ray.coordinator.local import LocalCoordinator

    core, _ = placed_core(unequal_cluster(), "pcs-bal")
    host = LocalCoordinator(core)
    core.decision_s.clear()
    core.decision_cpu_s.clear()
    assert host.decision_latency() == {"count": 0}
    core.decision_s.extend([0.001, 0.002, 0.004])
    core.decision_cpu_s.extend([0.001, 0.001, 0.0015])  # the wall time less the waits for a CPU
    everything = host.decision_latency()
    assert everything["count"] == 3 and everything["max_ms"] == pytest.approx(4.0) and "samples" not in everything
    assert everything["cpu"]["max_ms"] == pytest.approx(1.5)
    later = host.decision_latency(after=1, samples=True)
    assert later["count"] == 3 and later["samples"] == pytest.approx([2.0, 4.0]) and later["p50_ms"] == pytest.approx(3.0)
    assert later["cpu_samples"] == pytest.approx([1.0, 1.5])
    assert host.decision_latency(after=3) == {"count": 3}  # nothing new since the last read
