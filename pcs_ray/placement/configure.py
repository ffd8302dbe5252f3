"""Turn command-line placement options into a cluster with scores and a placement factory.

Used by ``pcs-ray simulate`` (and anything else that takes the same options):
a profile is sampled onto the cluster once (seeded), a topology applies to
every node, and each run gets a fresh placement object wrapped in a
:class:`PlacementLog` so its summary can be reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pcs_ray.cluster import ClusterSpec
from pcs_ray.placement import PLACEMENTS, create_placement
from pcs_ray.variability.profiles import apply_profile, load_profile
from pcs_ray.placement.stats import PlacementLog
from pcs_ray.cluster.topology import TopoMatrix, read_topo


@dataclass
class PlacementSetup:
    """The cluster to simulate and how to build each run's placement."""

    cluster: ClusterSpec
    name: str
    topology: TopoMatrix | None = None
    about: dict = field(default_factory=dict)
    binned: dict | None = None  # bins a recorded profile brings (else placements bin the scores themselves)

    def new(self, seed: int = 0) -> PlacementLog:
        extra = {"binned": self.binned} if self.binned is not None else {}
        return PlacementLog(create_placement(self.name, self.cluster, seed=seed, topology=self.topology, **extra))


def configure_placement(
    cluster: ClusterSpec,
    name: str,
    *,
    profile: str | None = None,
    profile_seed: int = 0,
    topology: str | None = None,
    locality_penalty: float | None = None,
) -> PlacementSetup:
    """Validate the options (errors are ``ValueError``s with one-line messages) and build the setup."""
    key = name.lower()
    if key not in PLACEMENTS:
        raise ValueError(f"unknown placement {name!r}; valid placements: {', '.join(PLACEMENTS)}")
    if locality_penalty is not None:
        if not locality_penalty >= 1.0:
            raise ValueError(f"--locality-penalty must be a number >= 1, got {locality_penalty}")
        cluster = ClusterSpec(nodes=cluster.nodes, locality_penalty=locality_penalty)
    about: dict = {"placement": key, "locality_penalty": cluster.locality_penalty}
    binned = None
    if profile is not None:
        loaded = load_profile(profile)
        cluster = apply_profile(cluster, loaded, profile_seed)
        binned = loaded.binned
        about.update(profile=profile, profile_seed=profile_seed)
    topo = None
    if topology is not None:
        topo = read_topo(topology)
        bad = [n.name for n in cluster.nodes if len(n.gpus) != topo.size]
        if bad:
            raise ValueError(f"--topology {topology} has {topo.size} GPUs but node {bad[0]} has a different number")
        about["topology"] = topology
    setup = PlacementSetup(cluster, key, topo, about, binned)
    setup.new()  # fail now, not in the middle of a run (e.g. a topology file named in the spec)
    return setup


__all__ = ["PlacementSetup", "configure_placement"]
