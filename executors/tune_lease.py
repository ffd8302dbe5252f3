"""The lease a sweep's driver keeps on its GPUs: renewed from a daemon thread while the driver process lives.

The coordinator takes an external job's GPUs back once its executor has been silent for its lease
(``lease_s`` in the assignment, ``pcs_ray.coordinator.guards``): a driver that died, or died before
it connected to Ray, gives its GPUs back that way. The thread renews every third of the lease, so a
living driver keeps them whatever Tune is busy with; it dies with the process.
"""

from __future__ import annotations

import logging
import threading

from pcs_ray.contract import JobStatus

log = logging.getLogger(__name__)

#: Renewals per lease: two may be lost before the lease lapses.
RENEWALS_PER_LEASE = 3
#: Until the coordinator says its lease, renew this often (seconds).
FIRST_EVERY_S = 5.0


class LockedCalls:
    """Any coordinator client, its calls one at a time (an HTTP client keeps one connection; the lease
    thread and Tune's thread share it)."""

    def __init__(self, target) -> None:
        self._target = target
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            with self._lock:
                return attr(*args, **kwargs)

        return call


class LeaseKeeper:
    """Renews ``job_id``'s lease until :meth:`stop`, the job ends, or the process exits."""

    def __init__(self, coordinator, job_id: int, every_s: float = FIRST_EVERY_S) -> None:
        self.coordinator, self.job_id, self.every_s = coordinator, job_id, every_s
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pcs-ray-lease-{job_id}", daemon=True)

    def start(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def renew(self) -> dict | None:
        """Renew once; the assignment it answers (None when the coordinator could not be reached)."""
        try:
            reply = self.coordinator.renew_lease(self.job_id)
        except Exception as exc:  # the coordinator restarting: the next renewal tries again
            log.warning("renewing the lease of sweep %s failed: %s", self.job_id, exc)
            return None
        self.renewals += 1
        if reply.get("lease_s"):
            self.every_s = max(0.2, float(reply["lease_s"]) / RENEWALS_PER_LEASE)
        return reply

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            reply = self.renew()
            if reply is not None and JobStatus(reply["state"]).done:
                return
