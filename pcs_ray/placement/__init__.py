"""Placement by name: which GPUs each job gets (one registry for simulator, predictor and coordinator).

``create_placement("pal", cluster, seed=1)`` builds one; ``PLACEMENTS`` maps
each name to its :class:`Configuration` (``PLACEMENTS[name].help`` is a
one-line description, also ``placement_help(name)``). A configuration is a
set of plugins, candidates -> filters -> scores (``framework.py``); to add a
score or filter, subclass ``Score``/``Filter`` and register a configuration
that lists it, e.g. ``register(PAL.with_score(MyScore(), 0.5, name="pal-my", help="..."))``.
"""

from __future__ import annotations

from pcs_ray.cluster import ClusterSpec
from pcs_ray.placement.base import Placement
from pcs_ray.placement.combined import COMBINED
from pcs_ray.placement.energy import CVA, ENERGY, LOWEST_ENERGY, LOWEST_POWER, VAHRM
from pcs_ray.placement.framework import Configuration, PlacementError, Unplaceable
from pcs_ray.placement.plugin import Reason
from pcs_ray.placement.mapa import MAPA_BASELINE, MAPA_GREEDY, MAPA_PRESERVE, MAPA_TOPO
from pcs_ray.placement.packed import PACKED_NONSTICKY, PACKED_STICKY
from pcs_ray.placement.pal import PAL
from pcs_ray.placement.pmfirst import PM_FIRST
from pcs_ray.placement.random_ import RANDOM_NONSTICKY, RANDOM_STICKY
from pcs_ray.placement.slow_runs import with_slow_run_filter
from pcs_ray.cluster.topology import TopoMatrix, TopologyError, hardware_graph, parse_topo, read_topo

#: name -> configuration, in the order the CLI lists them
PLACEMENTS: dict[str, Configuration] = {
    c.name: c for c in (
        PACKED_STICKY, PACKED_NONSTICKY, RANDOM_STICKY, RANDOM_NONSTICKY, PM_FIRST, PAL,
        MAPA_BASELINE, MAPA_TOPO, MAPA_GREEDY, MAPA_PRESERVE, COMBINED, LOWEST_POWER, LOWEST_ENERGY, VAHRM, CVA, ENERGY,
        with_slow_run_filter(PACKED_STICKY), with_slow_run_filter(COMBINED), COMBINED.sized(), ENERGY.sized(),
    )
}

#: what ``create_placement`` accepts besides the name and cluster (see ``Placement``)
OPTIONS = ("sticky", "seed", "topology", "locality_penalty", "comm", "binned", "bin_seed", "cache")


def register(config: Configuration, *, replace: bool = False) -> Configuration:
    """Add a configuration to the registry under its name (a ``ValueError`` if taken, unless ``replace``)."""
    key = config.name.lower()
    if key != config.name:
        raise ValueError(f"placement names are lower case, got {config.name!r}")
    if key in PLACEMENTS and not replace:
        raise ValueError(f"placement {key!r} is already registered")
    PLACEMENTS[key] = config
    return config


def _lookup(name: str) -> Configuration:
    config = PLACEMENTS.get(name.lower())
    if config is None:
        raise ValueError(f"unknown placement {name!r}; valid placements: {', '.join(PLACEMENTS)}")
    return config


def placement_help(name: str) -> str:
    """The one-line description of a registered placement (a ``ValueError`` listing the names if unknown)."""
    return _lookup(name).help


def create_placement(name: str, cluster: ClusterSpec, **kwargs) -> Placement:
    """Build a placement by name; an unknown name or option fails with the valid choices (a ValueError)."""
    config = _lookup(name)
    unknown = sorted(set(kwargs) - set(OPTIONS))
    if unknown:
        raise ValueError(f"placement {config.name!r}: unknown option(s) {', '.join(unknown)}; valid: {', '.join(OPTIONS)}")
    return Placement(cluster, config, **kwargs)


__all__ = [
    "OPTIONS", "PLACEMENTS", "Configuration", "Placement", "PlacementError", "Reason", "TopoMatrix", "TopologyError",
    "Unplaceable", "create_placement", "hardware_graph", "parse_topo", "placement_help", "read_topo", "register",
]
