"""VU-FCFS(-B), the VAHRM paper's variation-unaware baseline (Table V): GPUs in id order (``packed-sticky``).
"""

from __future__ import annotations

from pcs_ray.policies.power_fcfs import PowerFCFS


class VUFCFS(PowerFCFS):
    name = "vu-fcfs"
    backfills = False
    placement = "packed-sticky"


class VUFCFSB(PowerFCFS):
    name = "vu-fcfs-b"
    placement = "packed-sticky"
