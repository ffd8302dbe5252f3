"""The interpreter's garbage-collection pauses in the coordinator's process, and the start-up heap kept out of them.

A collection stops every thread of the process, so a decision that overlaps one (its own, or one a
Ray or HTTP thread set off) takes as long as the collection. A full collection walks every object the
process holds: in the actor that is mostly what importing Ray, NumPy and pydantic left behind
(about 100,000 objects, 100-200 ms on a loaded 2-core machine), not the jobs. :func:`freeze_start_up`
moves what exists once the coordinator has started into the permanent generation (``gc.freeze``), so
later full collections walk only what was allocated since; those objects are still freed by reference
counting, only cycles among them are never collected. :class:`GcPauses` records each collection's
generation and length, so a load bench can tell its pauses from a decision's own cost.

A young collection runs once 700 containers more are alive than at the last one (the interpreter's
default), and what it finds alive moves to an older generation; once those moves add up to a quarter
of the objects a full collection last kept, the next full collection runs. The coordinator's calls
routinely hold thousands of containers for a moment (a readings pass, a status view, a refresh play's
state): young collections every 700 catch them alive and push full collections that walk every job
(113 of them, 158 ms on average, in a 10,000-job load run on a loaded 2-core machine). With a young
collection every ``YOUNG_COLLECTION_EVERY`` containers, such a call's containers are freed by reference
counting before any collection sees them, and at most that many cyclic ones wait to be collected.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator


class GcPauses:
    """Counts and lengths of the collections since it was installed, per generation (0, 1, 2 = full)."""

    def __init__(self, clock=time.perf_counter) -> None:
        self.clock = clock
        self.count = [0, 0, 0]
        self.total_s = [0.0, 0.0, 0.0]
        self.max_s = [0.0, 0.0, 0.0]
        self._began: dict[int, float] = {}  # thread id -> when its collection began
        self._mutex = threading.Lock()

    def __call__(self, phase: str, info: dict) -> None:
        """``gc.callbacks`` entry: called at the start and the stop of each collection."""
        me = threading.get_ident()
        if phase == "start":
            self._began[me] = self.clock()
            return
        began = self._began.pop(me, None)
        if began is None:
            return
        gen, took = min(int(info.get("generation", 2)), 2), self.clock() - began
        with self._mutex:
            self.count[gen] += 1
            self.total_s[gen] += took
            self.max_s[gen] = max(self.max_s[gen], took)

    def read(self) -> dict:
        """The totals so far, in ms (a reader takes differences between reads)."""
        with self._mutex:
            return {f"gen{g}": {"count": self.count[g], "total_ms": round(self.total_s[g] * 1000.0, 3),
                                "max_ms": round(self.max_s[g] * 1000.0, 3)} for g in range(3)}

    def install(self) -> GcPauses:
        gc.callbacks.append(self)
        return self

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No garbage collection for a while: while jobs are copied under the lock (a collection the copies'
    allocations set off would walk the whole heap while calls wait), or while a replay builds what lives on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: net container allocations between young collections in the coordinator's process (the interpreter's default: 700)
YOUNG_COLLECTION_EVERY = 20_000


def freeze_start_up() -> GcPauses:
    """Collect once, freeze what is left (the start-up heap) out of later collections, collect the young
    generation every ``YOUNG_COLLECTION_EVERY`` containers, and record the collections from now."""
    gc.collect()
    gc.freeze()
    _, older, full = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, older, full)
    return GcPauses().install()


__all__ = ["YOUNG_COLLECTION_EVERY", "GcPauses", "freeze_start_up", "no_collection"]
