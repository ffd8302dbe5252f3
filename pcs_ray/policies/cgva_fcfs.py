"""CGVA-FCFS(-B), the VAHRM paper's CPU-and-GPU-variation-aware baseline (Table V).

Every job gets the most power-efficient free GPUs: the lowest predicted power x speed score, i.e.
energy per unit of work (the ``lowest-energy`` placement; the paper's P100s run at one speed,
Longhorn's V100s do not).
"""

from __future__ import annotations

from pcs_ray.policies.power_fcfs import PowerFCFS


class CGVAFCFS(PowerFCFS):
    name = "cgva-fcfs"
    backfills = False
    placement = "lowest-energy"


class CGVAFCFSB(PowerFCFS):
    name = "cgva-fcfs-b"
    placement = "lowest-energy"
