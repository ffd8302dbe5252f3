"""The live coordinator: a Ray-free core and the hosts that serve its calls (``CoordinatorAPI``).

``core.Coordinator`` turns events (submit, cancel, progress, a run ending,
a timer, a policy swap) into actions (``StartRun``/``StopRun``, defined with
the rest of the contract in ``pcs_ray.contract``). ``local.LocalCoordinator``
serves it in-process; ``actor`` hosts it as a detached named Ray actor and
carries the actions out through ``pcs_ray.executors.launch``.
"""

from pcs_ray.contract import Action, StartRun, StopRun, UnknownJobError
from pcs_ray.coordinator.core import Coordinator
from pcs_ray.coordinator.journal import Journal

__all__ = ["Action", "Coordinator", "Journal", "StartRun", "StopRun", "UnknownJobError"]
