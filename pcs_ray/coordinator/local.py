"""The coordinator in this process, behind the same calls as the Ray actor (tests, benches, simulated clusters).

Nothing here launches runners: the actions the core returns are kept in
``held`` for the caller, which plays those jobs itself (their ends through
``external_ended``). An external executor such as a Ray Tune sweep
(``pcs_ray.executors.tune``) runs against it exactly as against the actor.
"""

from __future__ import annotations

from pcs_ray.contract import Action
from pcs_ray.coordinator.core import Coordinator
from pcs_ray.coordinator.host import CoordinatorHost


class LocalCoordinator(CoordinatorHost):
    """A :class:`~pcs_ray.contract.CoordinatorAPI` on a core in this process."""

    def __init__(self, core: Coordinator) -> None:
        super().__init__(core)
        self.held: list[Action] = []
        self._resume()

    def _execute(self, actions: list[Action]) -> None:
        self.held.extend(actions)

    def _resume(self) -> None:
        super()._resume()
        with self.lock:
            self.core.play_refresh()  # no background loop here refreshes them

    def predict(self, job_id: int) -> dict:
        with self.lock:
            self.core.play_refresh()  # no background loop here refreshes them
            return super().predict(job_id)

    def refresh_views(self) -> None:
        self.core.play_refresh()  # no background loop here refreshes them
