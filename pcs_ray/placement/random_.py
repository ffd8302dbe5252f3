"""Random placement: uniformly random free GPUs (seeded), the baseline that knows nothing."""

from __future__ import annotations

import numpy as np

from pcs_ray.placement.base import Placement
from pcs_ray.state import JobState


class RandomPlacement(Placement):
    """Any ``n`` free GPUs, drawn without repetition from the placement's seeded generator."""

    name = "random"

    def select(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
        return self.rng.choice(np.flatnonzero(free), size=n, replace=False)
