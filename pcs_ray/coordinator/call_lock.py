"""The coordinator's lock, which its background forecast play yields to.

Calls (a submission, a status, a runner's report) and the background loop
share one lock around the core. The loop's refresh play of the whole queue
runs outside the lock, but in the same interpreter: a CPU-bound play thread
takes the GIL half the time, so a submission's own play, running beside it,
took about twice as long. Between events the refresh play calls the
pause :meth:`CallLock.yielder` gives it, which blocks while any call waits
for the lock or holds it, so a call runs almost alone. How long it stands
aside is capped twice: in all (``budget_s``), and by the share of its life it
keeps for itself (``share``): under a steady stream of calls, which want the
lock nearly all the time, a play that stood aside whenever asked would finish
only once its budget was spent, and the forecasts it leaves would be that much
older; with a share it runs beside calls part of the time and ends within
about ``1 / share`` of its own running time.
"""

from __future__ import annotations

import threading
import time


class CallLock:
    """A reentrant lock that counts the threads wanting it (waiting or holding), so that work done
    outside it can stand aside while any does."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._state = threading.Condition(threading.Lock())
        self._wanted = 0  # acquisitions under way or held (a reentrant one counts again)

    def __enter__(self) -> "CallLock":
        with self._state:
            self._wanted += 1
        try:
            self._lock.acquire()
        except BaseException:
            self._done()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()
        self._done()

    def _done(self) -> None:
        with self._state:
            self._wanted -= 1
            if not self._wanted:
                self._state.notify_all()

    @property
    def wanted(self) -> bool:
        """Whether any thread waits for the lock or holds it."""
        return self._wanted > 0

    def yielder(self, budget_s: float, share: float = 0.0, clock=time.monotonic):
        """A pause to call between the events of a play run outside the lock: it blocks while the lock
        is wanted, for at most ``budget_s`` over the play's life, and, with ``share`` > 0, only while the
        play keeps at least that share of the time since its first pause for itself (its waits stay within
        ``(1 - share) / share`` of the time it ran); past either it runs on beside calls. ``clock``
        measures both."""
        if not 0.0 <= share < 1.0:
            raise ValueError(f"a play's share of its own time must be in [0, 1), got {share}")
        waited = 0.0
        began: float | None = None

        def yield_to_calls() -> None:
            nonlocal waited, began
            if not self._wanted or waited >= budget_s:
                return
            t0 = clock()
            allowed = budget_s - waited
            if share:
                if began is None:
                    began = t0
                allowed = min(allowed, (t0 - began - waited) * (1.0 - share) / share - waited)
                if allowed <= 0:
                    return
            with self._state:
                self._state.wait_for(lambda: not self._wanted, timeout=allowed)
            waited += clock() - t0

        return yield_to_calls


__all__ = ["CallLock"]
