"""The coordinator's record of garbage-collection pauses, and the start-up heap frozen out of full collections."""

from __future__ import annotations

import gc

from pcs_ray.coordinator.gc_pauses import YOUNG_COLLECTION_EVERY, GcPauses, freeze_start_up


def test_each_collection_is_counted_by_generation_with_its_length():
    ticks = iter([10.0, 10.25, 20.0, 20.001])
    pauses = GcPauses(clock=lambda: next(ticks))
    pauses("start", {"generation": 2})
    pauses("stop", {"generation": 2})
    pauses("start", {"generation": 0})
    pauses("stop", {"generation": 0})
    got = pauses.read()
    assert got["gen2"] == {"count": 1, "total_ms": 250.0, "max_ms": 250.0}
    assert got["gen0"]["count"] == 1 and got["gen1"]["count"] == 0


def test_after_the_freeze_a_full_collection_walks_only_what_came_later():
    threshold = gc.get_threshold()
    try:
        pauses = freeze_start_up()
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert pauses.read()["gen2"]["count"] >= 1
    finally:
        pauses.remove()
        gc.unfreeze()
        gc.set_threshold(*threshold)


def a_calls_working_set() -> int:
    """Young collections while a call holds 5,000 containers for a moment (a readings pass over queued jobs)."""
    gc.collect()
    before = gc.get_stats()[0]["collections"]
    held = [{"job": i, "why": [i]} for i in range(2_500)]
    during = gc.get_stats()[0]["collections"] - before
    del held
    return during


def test_a_calls_moment_of_thousands_of_containers_is_freed_before_any_collection_sees_it():
    threshold, pauses = gc.get_threshold(), None
    try:
        gc.set_threshold(700, *threshold[1:])
        assert a_calls_working_set() >= 5  # the interpreter's default catches it alive, again and again
        pauses = freeze_start_up()
        assert gc.get_threshold()[0] == YOUNG_COLLECTION_EVERY
        assert a_calls_working_set() == 0
    finally:
        if pauses is not None:
            pauses.remove()
        gc.unfreeze()
        gc.set_threshold(*threshold)
