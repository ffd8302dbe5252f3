"""The VAHRM paper's workloads (Tables III and IV), GPU jobs only: power-class mixes over real arrivals.

The paper mixes CPU and GPU jobs 9:1, 5:5 and 1:9, each mix with small,
medium or large power jobs (nine workloads), over TSUBAME3.0's arrivals,
run times and node counts. Here every job is a GPU job: the paper's CPU jobs
become ResNet-50 jobs (class A, 181 W on Longhorn V100s: the variability-
sensitive class), and its GPU jobs are the mix's power level, from the
Longhorn power profile's classes: small = C (PageRank, 81 W), medium = B
(BERT, 152 W), large = D (SGEMM, 297 W) — per GPU, close to Table IV's
251 / 597 / 1095 W per 4-GPU node. Arrivals, run times and GPU counts come
from a real trace (default Philly VC 0e4a51, 2,465 jobs); every job is rigid
(all its GPUs or none, as an HPC job), and ``sr`` (the paper's SR) divides
every submission time. Class draws are seeded.
"""

from __future__ import annotations

import numpy as np

from pcs_ray.jobs.spec import JobSpec, linear_speedup

#: (share of ResNet jobs : share of the level's jobs), paper Table III's CPU:GPU ratios
RATIOS = ((9, 1), (5, 5), (1, 9))
LEVELS = {"small": "C", "medium": "B", "large": "D"}
OTHER = ("resnet", "A")
#: workload id -> (ratio, level), in the paper's order (0: 9:1 small ... 8: 1:9 large)
MIXES = {3 * r + k: (RATIOS[r], level) for r in range(3) for k, level in enumerate(LEVELS)}


def energy_mix(jobs: list[JobSpec], mix: int, *, sr: float = 1.0, seed: int = 0) -> list[JobSpec]:
    """``jobs``' arrivals (divided by ``sr``), run times and GPU counts, with classes drawn for mix ``mix``."""
    if mix not in MIXES:
        raise ValueError(f"unknown energy mix {mix}; valid: 0..{len(MIXES) - 1}")
    if not sr > 0:
        raise ValueError(f"the shrink ratio SR must be > 0, got {sr}")
    (a, b), level = MIXES[mix]
    rng = np.random.default_rng(seed)
    heavy = rng.random(len(jobs)) < b / (a + b)
    out = []
    for spec, h in zip(jobs, heavy):
        model, cls = (level, LEVELS[level]) if h else OTHER
        n = spec.max_gpus
        out.append(JobSpec(job_id=spec.job_id, submit_time=spec.submit_time / sr, service=spec.service, max_gpus=n,
                           speedup=linear_speedup(n), min_gpus=n, model=model, job_class=cls, name=spec.name))
    return out


__all__ = ["LEVELS", "MIXES", "RATIOS", "energy_mix"]
