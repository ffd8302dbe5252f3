"""Where the coordinator's Ray actor is registered: its namespace and name.

Kept apart from the actor's own module so that a client (``pcs_ray.client.get_coordinator``) finds the
actor without importing the coordinator.
"""

NAMESPACE = "pcs-ray"
ACTOR_NAME = "coordinator"
