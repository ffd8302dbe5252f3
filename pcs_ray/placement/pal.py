"""PAL (PAL paper, Algorithm 2): trade variability against locality through the L x V matrix.

For a job of ``1 < N <= GPUs per node`` the matrix has one row per locality
level (within a node: 1; across nodes: the penalty L) and one column per
score bin V_i; its entries L x V_i are traversed in increasing order and the
first feasible allocation wins: *within* at V_i means some node has N free
GPUs scoring <= V_i, *across* means the cluster has. Other jobs use PM-First.

As a configuration: the first feasible *within* entry is the node with the
smallest N-th best free score (``BestNodesFirst``, which visits that node
only), the first feasible *across* entry is PM-First's choice
(``ClusterBest``), and the scores ``Variability`` x ``Locality`` are the
entries' values L x V, so the smaller wins and a tie goes to the node, as in
the traversal. ``lv_traversal`` is the literal order, kept for tests and
explanations.
"""

from __future__ import annotations

from pcs_ray.placement.candidates import BestNodesFirst, ClusterBest
from pcs_ray.placement.framework import Configuration
from pcs_ray.placement.scores import Locality, Variability


def lv_traversal(bins, penalty: float) -> list[tuple[float, float, float]]:
    """Entries ``(L, V, L*V)`` of the L x V matrix in traversal order (within first on ties)."""
    values = sorted(set(float(b) for b in bins))
    entries = [(1.0, v, v) for v in values] + [(float(penalty), v, float(penalty) * v) for v in values]
    return sorted(entries, key=lambda e: (e[2], e[0], e[1]))


PAL = Configuration(
    name="pal",
    help="PM-First's scores traded against locality through PAL's L x V matrix",
    sources=(BestNodesFirst(), ClusterBest()),
    scores=((Variability(), 1.0), (Locality(), 1.0)),
    sticky=False,
    class_order=True,
)

__all__ = ["PAL", "lv_traversal"]
