"""A rank's stacks in its log when its run stops reporting: ``faulthandler`` armed at each report.

The coordinator takes a run that reported no step for its ``report_timeout_s`` for hung and kills it
a few seconds later (``pcs_ray.coordinator.guards``). Each rank arms ``faulthandler`` for that
timeout at its start and again at its reports, so a rank still silent when it fires writes every
thread's stack to its stderr (a user run's ``rank-<r>.log``, ``pcs-ray logs``) before the kill.

Re-arming ``faulthandler`` ends its watchdog thread and starts another, and the rank waits for the old
one to be scheduled: 100-190 us a report on a busy 2-core machine, five times the rest of a report's path,
up to a quarter of a small loop's 3-5 ms step, and more the busier the machine. So a rank re-arms at most
every :data:`REARM_S` (a tenth of the timeout when that is shorter): its stacks come after at least the
timeout less that interval of silence, and still before the kill (``HANG_DUMP_MARGIN_S`` after the timeout).
"""

from __future__ import annotations

import faulthandler
import logging
import time

log = logging.getLogger(__name__)

STDERR_FD = 2  # the rank's stderr: a user run's log file (pcs_ray.executors.user_run), else its Ray worker's log
REARM_S = 1.0  # the most a report's re-arm is put off (see the module docstring)

_armed: tuple[float, float] | None = None  # (timeout, when armed) of this process's countdown


def arm(timeout_s: float | None) -> None:
    """(Re)start the countdown: the stacks are dumped once ``timeout_s`` passes without another call, less at
    most ``min(REARM_S, timeout_s / 10)`` (a call that soon after the last arming leaves it be). None: nothing is armed."""
    global _armed
    if not timeout_s:
        return
    now = time.monotonic()
    if _armed is not None and _armed[0] == timeout_s and now - _armed[1] < min(REARM_S, timeout_s / 10):
        return
    try:
        faulthandler.dump_traceback_later(timeout_s, repeat=False, file=STDERR_FD, exit=False)
    except (OSError, ValueError, RuntimeError) as exc:  # no usable stderr: the kill still comes, only without stacks
        log.warning("cannot arm the hang dump: %s", exc)
        _armed = None
        return
    _armed = (timeout_s, now)


def disarm() -> None:
    global _armed
    _armed = None
    faulthandler.cancel_dump_traceback_later()
