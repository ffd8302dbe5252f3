"""The coordinator's lock, which its background forecast play yields to.

Calls (a submission, a status, a runner's report) and the background loop
share one lock around the core. The loop's refresh play of the whole queue
runs outside the lock, but in the same interpreter: a CPU-bound play thread
takes the GIL half the time, so a submission's own play, running beside it,
took about twice as long. Between events the refresh play now calls the
pause :meth:`CallLock.yielder` gives it, which blocks while any call waits
for the lock or holds it, so a call runs almost alone. The play's total wait is
capped (``budget_s``): under a stream of calls the refresh still finishes,
only later.
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

    def yielder(self, budget_s: float, clock=time.monotonic):
        """A pause to call between the events of a play run outside the lock: it blocks while the lock
        is wanted, for at most ``budget_s`` over the play's life (then the play runs on beside calls), as
        ``clock`` measures it."""
        left = budget_s

        def yield_to_calls() -> None:
            nonlocal left
            if not self._wanted or left <= 0:
                return
            t0 = clock()
            with self._state:
                self._state.wait_for(lambda: not self._wanted, timeout=left)
            left -= clock() - t0

        return yield_to_calls


__all__ = ["CallLock"]
