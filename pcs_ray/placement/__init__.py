"""Placement policies by name: which GPUs each job gets (one registry for simulator and coordinator).

``create_placement("pal", cluster, seed=1)`` builds one; see ``base.Placement``
for the interface and each module for its policy.
"""

from __future__ import annotations

from pcs_ray.cluster import ClusterSpec
from pcs_ray.placement.base import Placement, PlacementError
from pcs_ray.placement.combined import CombinedPlacement
from pcs_ray.placement.mapa import MAPAPlacement
from pcs_ray.placement.packed import PackedPlacement
from pcs_ray.placement.pal import PALPlacement
from pcs_ray.placement.pmfirst import PMFirstPlacement
from pcs_ray.placement.random_ import RandomPlacement
from pcs_ray.topology import TopoMatrix, TopologyError, hardware_graph, parse_topo, read_topo

#: name -> (class, fixed keyword arguments)
PLACEMENTS: dict[str, tuple[type[Placement], dict]] = {
    "packed-sticky": (PackedPlacement, {"sticky": True}),
    "packed-nonsticky": (PackedPlacement, {"sticky": False}),
    "random-sticky": (RandomPlacement, {"sticky": True}),
    "random-nonsticky": (RandomPlacement, {"sticky": False}),
    "pm-first": (PMFirstPlacement, {}),
    "pal": (PALPlacement, {}),
    "mapa-baseline": (MAPAPlacement, {"variant": "baseline"}),
    "mapa-topo": (MAPAPlacement, {"variant": "topo"}),
    "mapa-greedy": (MAPAPlacement, {"variant": "greedy"}),
    "mapa-preserve": (MAPAPlacement, {"variant": "preserve"}),
    "combined": (CombinedPlacement, {}),
}


def create_placement(name: str, cluster: ClusterSpec, **kwargs) -> Placement:
    """Build a placement by name; an unknown name fails with the valid choices (a ValueError)."""
    entry = PLACEMENTS.get(name.lower())
    if entry is None:
        raise ValueError(f"unknown placement {name!r}; valid placements: {', '.join(PLACEMENTS)}")
    cls, fixed = entry
    placement = cls(cluster, **{**fixed, **kwargs})
    placement.name = name.lower()
    return placement


__all__ = [
    "PLACEMENTS", "Placement", "PlacementError", "TopoMatrix", "TopologyError", "create_placement",
    "hardware_graph", "parse_topo", "read_topo",
]
