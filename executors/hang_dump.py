"""A rank's stacks in its log when its run stops reporting: ``faulthandler`` armed at each report.

The coordinator takes a run that reported no step for its ``report_timeout_s`` for hung and kills it
a few seconds later (``pcs_ray.coordinator.guards``). Each rank arms ``faulthandler`` for that
timeout at its start and again at every report, so a rank still silent when it fires writes every
thread's stack to its stderr (a user run's ``rank-<r>.log``, ``pcs-ray logs``) before the kill.
"""

from __future__ import annotations

import faulthandler
import logging

log = logging.getLogger(__name__)

STDERR_FD = 2  # the rank's stderr: a user run's log file (pcs_ray.executors.user_run), else its Ray worker's log


def arm(timeout_s: float | None) -> None:
    """(Re)start the countdown; a new call replaces the previous one. None: nothing is armed."""
    if not timeout_s:
        return
    try:
        faulthandler.dump_traceback_later(timeout_s, repeat=False, file=STDERR_FD, exit=False)
    except (OSError, ValueError, RuntimeError) as exc:  # no usable stderr: the kill still comes, only without stacks
        log.warning("cannot arm the hang dump: %s", exc)


def disarm() -> None:
    faulthandler.cancel_dump_traceback_later()
