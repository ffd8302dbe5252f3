"""MAPA (Ranganath et al., SC'21): allocate by matching the job's communication pattern to the links.

Variants (all sticky, all blind to GPU variability):

* ``baseline``: lowest free GPU ids on the first node that fits (what Docker does);
* ``topo``: the first CPU socket that fits, else ``baseline`` (Topo-aware);
* ``greedy``: the embedding with the most aggregated bandwidth;
* ``preserve``: bandwidth-sensitive jobs the highest predicted effective
  bandwidth, insensitive ones the embedding that leaves the most bandwidth
  among the GPUs still free (Algorithm 1).

MAPA allocates inside one server; on a cluster the candidates are the
embeddings on every node that fits the job (nodes whose free GPUs form the
same subset of the same topology are scored once), and a job no node fits
is spread like Packed. Nodes without a topology count as uniform PCIe.
Ties go to the lowest node, then the lowest GPU ids.
"""

from __future__ import annotations

from pcs_ray.placement.candidates import Embeddings, LowestIds, SameSocket, Spread
from pcs_ray.placement.framework import Configuration
from pcs_ray.placement.scores import AggregatedBandwidth, EffectiveBandwidth, PreservedBandwidth

VARIANTS = ("baseline", "topo", "greedy", "preserve")


def _mapa(variant: str, help: str, sources, scores=()) -> Configuration:
    return Configuration(name=f"mapa-{variant}", help=help, sources=sources, scores=scores, sticky=True, ranked=True,
                         about={"variant": variant})


MAPA_BASELINE = _mapa("baseline", "MAPA's Baseline: lowest free GPU ids on the first node that fits (as Docker does)",
                      (LowestIds(home=False), Spread()))
MAPA_TOPO = _mapa("topo", "MAPA's Topo-aware: the first CPU socket that fits, else the lowest ids",
                  (SameSocket(), LowestIds(home=False, fallback=True), Spread()))
MAPA_GREEDY = _mapa("greedy", "MAPA's Greedy: the embedding with the most aggregated NVLink bandwidth",
                    (Embeddings(embedding="aggregated"), Spread()), ((AggregatedBandwidth(), 1.0),))
MAPA_PRESERVE = _mapa(
    "preserve", "MAPA's Preserve: sensitive jobs the best predicted effective bandwidth, others the embedding "
                "that leaves the most NVLink bandwidth free",
    (Embeddings(), Spread()),
    ((EffectiveBandwidth(sensitive_only=True), 1.0), (PreservedBandwidth(insensitive_only=True), 1.0)),
)

__all__ = ["MAPA_BASELINE", "MAPA_GREEDY", "MAPA_PRESERVE", "MAPA_TOPO", "VARIANTS"]
