"""Packed placement (Tiresias when sticky, Gandiva when not): as few nodes as possible.

Candidates: the lowest free ids on every node that fits the job (its own
node and GPUs first); the best fit wins, i.e. the fullest node that still
fits. A job no node fits is spread over the nodes with the most free GPUs.
Blind to GPU variability and links.
"""

from __future__ import annotations

import dataclasses

from pcs_ray.placement.candidates import LowestIds, Spread
from pcs_ray.placement.framework import Configuration
from pcs_ray.placement.scores import BestFit

PACKED_STICKY = Configuration(
    name="packed-sticky",
    help="fewest nodes per job (best fit); a job keeps its GPUs until its count changes (Tiresias)",
    sources=(LowestIds(), Spread()),
    scores=((BestFit(), 1.0),),
    sticky=True,
)
PACKED_NONSTICKY = dataclasses.replace(
    PACKED_STICKY, name="packed-nonsticky", sticky=False,
    help="fewest nodes per job (best fit), re-packed every round (Gandiva)",
)

__all__ = ["PACKED_NONSTICKY", "PACKED_STICKY"]
