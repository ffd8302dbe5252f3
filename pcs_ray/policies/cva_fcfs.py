"""CVA-FCFS(-B), the VAHRM paper's CPU-variation-aware baseline (Table V).

Power-efficient nodes for CPU jobs, random ones for GPU jobs: in the GPU-only mixes the jobs that stand
for CPU jobs (class A, ``pcs_ray.placement.energy.CPU_STANDINS``) get the lowest-power GPUs and the
others random ones (the ``cva`` placement).
"""

from __future__ import annotations

from pcs_ray.policies.power_fcfs import PowerFCFS


class CVAFCFS(PowerFCFS):
    name = "cva-fcfs"
    backfills = False
    placement = "cva"


class CVAFCFSB(PowerFCFS):
    name = "cva-fcfs-b"
    placement = "cva"
