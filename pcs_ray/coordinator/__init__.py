"""The live coordinator: a Ray-free core (state, journal, model, decisions) and a thin Ray actor.

``core.Coordinator`` turns events (submit, cancel, progress, a run ending,
a timer) into :mod:`actions`; ``actor`` hosts it as a detached named Ray
actor and carries the actions out through ``executors.launch``.
"""

from pcs_ray.coordinator.actions import Action, StartRun, StopRun
from pcs_ray.coordinator.core import Coordinator, UnknownJobError
from pcs_ray.coordinator.journal import Journal

__all__ = ["Action", "Coordinator", "Journal", "StartRun", "StopRun", "UnknownJobError"]
