"""Combined placement: variability, locality and topology scored by one product (none of the papers).

Every candidate allocation of a job is scored by the slowdown the simulator
would charge it, with binned scores in place of raw ones:

    worst binned PM-score x (locality penalty if across nodes) x topology slowdown

where the topology slowdown is ``CommModel``'s (effective bandwidth of the
job's pattern on those GPUs against the best its size can get; 1 for
insensitive jobs). The lowest product wins; ties keep a job where it was,
then leave the most link bandwidth among the free GPUs (MAPA's Preserve),
then prefer the fullest node. So a communication-heavy job on an 8-GPU
NVLink node gets the embedding with the best effective bandwidth among
well-performing GPUs, a compute-bound job on a noisy cluster gets the best
GPUs, and an insensitive job takes GPUs that leave the double links free.

Candidates: on each node that fits, every subset of its free GPUs (from the
node's precomputed subset table); across nodes, PM-First's choice (the
best scores; topology is not charged across nodes, the locality penalty
is). Nodes are visited in order of their best possible score (the N-th best
free score on the node) and the search stops when no unvisited node can
win, or after 8 nodes that could only tie. Without topology and
without ties to break this is PAL's rule; on identical GPUs it is Preserve's.
Jobs are placed in PM-First's class order, non-sticky.
"""

from __future__ import annotations

from pcs_ray.placement.candidates import BestNodesFirst, ClusterBest
from pcs_ray.placement.framework import Configuration
from pcs_ray.placement.scores import KeepGPUs, Locality, PreservedBandwidth, Topology, Variability

COMBINED = Configuration(
    name="combined",
    help="the lowest variability x locality x topology slowdown per job",
    sources=(BestNodesFirst(subsets=True, single_gpu=True, budget=8, stop_without_links=True), ClusterBest()),
    scores=((Variability(), 1.0), (Locality(), 1.0), (Topology(), 1.0)),
    tie_breaks=(KeepGPUs(), PreservedBandwidth()),
    sticky=False,
    class_order=True,
    ranked=True,
)

__all__ = ["COMBINED"]
