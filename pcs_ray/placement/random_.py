"""Random placement: uniformly random free GPUs (seeded), the baseline that knows nothing."""

from __future__ import annotations

import dataclasses

from pcs_ray.placement.candidates import RandomDraw
from pcs_ray.placement.framework import Configuration

RANDOM_STICKY = Configuration(
    name="random-sticky",
    help="random free GPUs (seeded); a job keeps them until its count changes",
    sources=(RandomDraw(),),
    sticky=True,
)
RANDOM_NONSTICKY = dataclasses.replace(
    RANDOM_STICKY, name="random-nonsticky", sticky=False, help="random free GPUs (seeded), drawn again every round",
)

__all__ = ["RANDOM_NONSTICKY", "RANDOM_STICKY"]
