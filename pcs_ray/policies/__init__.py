"""Scheduling policies by name: one registry, one builder, for the CLI, simulator, solver and coordinator.

``build_policy(name, **config)`` is the only way a name becomes a policy, so
a name means the same thing everywhere. ``ABOUT`` describes every name in one
line; help texts and the README are rendered from it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pcs_ray.data import PCS_CONFIG_KINDS, locate, pcs_config
from pcs_ray.tenants.spec import as_tenants
from pcs_ray.policies.afs import AFSPolicy
from pcs_ray.policies.easy import EasyBackfill
from pcs_ray.policies.afs_l import AFSLPolicy
from pcs_ray.policies.base import Allocation, AllocationError, SchedulingPolicy
from pcs_ray.policies.fair import FairSharePolicy
from pcs_ray.policies.fifo import FIFOPolicy
from pcs_ray.policies.las import LASPolicy
from pcs_ray.policies.rush import RushPolicy
from pcs_ray.policies.srsf import SRSFPolicy
from pcs_ray.policies.srtf import SRTFPolicy
from pcs_ray.policies.tenants import TenantPolicy
from pcs_ray.policies.themis import ThemisPolicy
from pcs_ray.policies.cgva_fcfs import CGVAFCFS, CGVAFCFSB
from pcs_ray.policies.cva_fcfs import CVAFCFS, CVAFCFSB
from pcs_ray.policies.vahrm import VAHRMPolicy
from pcs_ray.policies.vu_fcfs import VUFCFS, VUFCFSB
from pcs_ray.policies.themis_lease import ThemisLeasePolicy
from pcs_ray.policies.wfq import ConfigError, WFQConfig, WFQPolicy

POLICIES: dict[str, type[SchedulingPolicy]] = {
    cls.name: cls
    for cls in (FIFOPolicy, SRSFPolicy, LASPolicy, SRTFPolicy, ThemisPolicy, ThemisLeasePolicy, AFSPolicy, AFSLPolicy,
                FairSharePolicy, WFQPolicy, EasyBackfill, RushPolicy, VUFCFS, VUFCFSB, CVAFCFS, CVAFCFSB, CGVAFCFS,
                CGVAFCFSB, VAHRMPolicy, TenantPolicy)
}


@dataclass(frozen=True)
class BundledConfig:
    """A name for one of the PCS authors' WFQ configurations shipped in ``pcs_ray.data``."""

    workload: str
    kind: str  # one of PCS_CONFIG_KINDS

    def load(self) -> WFQConfig:
        return WFQConfig.load(pcs_config(self.workload, self.kind))


#: PCS's three themis1 configurations (paper Fig. 6), each a policy name of its own.
BUNDLED: dict[str, BundledConfig] = {f"pcs-{k}": BundledConfig("themis1", k) for k in PCS_CONFIG_KINDS}

#: One line per policy name, for help texts and the README.
ABOUT: dict[str, str] = {
    "fifo": "arrival order, each job as many GPUs as it can use",
    "srsf": "shortest remaining service first (Tiresias-G): GPU-seconds still needed at full demand, as the PCS "
            "artifact ranks",
    "las": "two-level least attained service (Tiresias-L)",
    "srtf": "shortest remaining time at the job's best allocation first",
    "themis": "finish-time fairness as the PCS artifact runs it: largest rho first at every event and 600 s "
              "quantum, fair share from the contention each job has seen",
    "themis-lease": "finish-time fairness at a 1/N share with 600 s leases (the PCS paper's Fig. 1a reading)",
    "afs": "AFS as the PCS artifact runs it (Algorithm C): GPU by GPU by relative speedup gain, every job one "
           "GPU first",
    "afs-l": "AFS-L as read from the AFS paper: GPU by GPU to the shortest job unless another gains "
             "relatively more (SRTF under linear scaling)",
    "fair": "max-min fair share in whole GPUs",
    "pcs": "PCS weighted fair queueing with a WFQ configuration (a JSON file in the PCS artifact's format "
           "or a bundled name)",
    "pcs-jct": "PCS with the artifact's themis1 configuration for the best JCT",
    "pcs-bal": "PCS with the artifact's themis1 configuration that balances JCT and predictability",
    "pcs-pred": "PCS with the artifact's themis1 configuration for the best predictability",
    "fcfs-easy": "arrival order with EASY backfilling on requested run times; rigid, never preempts",
    "vu-fcfs": "VAHRM paper's variation-unaware FCFS: arrival order, no backfilling, never preempts (with packed GPUs)",
    "vu-fcfs-b": "vu-fcfs with EASY backfilling",
    "cva-fcfs": "VAHRM paper's CPU-variation-aware FCFS: lowest-power GPUs for class A (its CPU jobs' stand-in), random for the rest",
    "cva-fcfs-b": "cva-fcfs with EASY backfilling",
    "cgva-fcfs": "VAHRM paper's CPU-and-GPU-variation-aware FCFS: the most power-efficient free GPUs",
    "cgva-fcfs-b": "cgva-fcfs with EASY backfilling",
    "vahrm": "VAHRM: most predicted energy first, aged by waiting time, on the lowest-power GPUs (random for a "
             "workload's first run), under a power budget counting idle draw",
    "rush": "fcfs-easy whose start function skips a job predicted to run slow, up to a skip threshold (RUSH)",
    "tenants": "tenant quotas with borrowing of idle quota by weight, and a minimum runtime before preemption, "
               "around an inner policy that divides each tenant's GPUs (default pcs-bal)",
}

#: The policy ``tenants`` wraps unless told otherwise (the coordinator's default).
DEFAULT_INNER = "pcs-bal"


def policy_names() -> list[str]:
    """Every name ``build_policy`` accepts: the registered policies, then the bundled configurations."""
    return [*POLICIES, *BUNDLED]


def wfq_config(value: WFQConfig | Mapping | str | Path) -> WFQConfig:
    """A WFQ configuration from a config, the PCS artifact's JSON as a dict, a file or a bundled name."""
    if isinstance(value, WFQConfig):
        return value
    if isinstance(value, Mapping):
        return WFQConfig.from_dict(dict(value), "pcs config")
    return WFQConfig.load(locate("pcs-config", value))


def policy_params(name: str) -> list[str]:
    """The arguments ``build_policy(name, ...)`` accepts (none for a bundled configuration)."""
    cls = POLICIES.get(name.lower())
    if cls is None:
        return []
    return [p.name for p in inspect.signature(cls.__init__).parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def build_policy(name: str, **config) -> SchedulingPolicy:
    """The policy ``name`` stands for (case-insensitive).

    A registered policy gets ``config`` as its constructor's arguments
    (``build_policy("themis", lease=300)``); ``pcs`` takes ``config=`` as
    anything ``wfq_config`` reads; a bundled name (``pcs-jct``) takes none.
    Unknown names and arguments fail with a ``ValueError`` listing the valid ones.
    """
    key = name.lower()
    if key in BUNDLED:
        if config:
            raise ValueError(f"policy {name!r} is a bundled configuration and takes no arguments, got {sorted(config)}")
        return WFQPolicy(BUNDLED[key].load())
    cls = POLICIES.get(key)
    if cls is None:
        raise ValueError(f"unknown policy {name!r}; valid policies: {', '.join(policy_names())}")
    params = policy_params(key)
    unknown = [k for k in config if k not in params]
    if unknown:
        raise ValueError(f"policy {name!r} takes no argument(s) {unknown}; it accepts {params or 'none'}")
    if cls is WFQPolicy and config.get("config") is not None:
        config["config"] = wfq_config(config["config"])
    if cls is TenantPolicy:
        inner = config.get("inner") or DEFAULT_INNER
        if isinstance(inner, str):
            if inner.lower() == TenantPolicy.name:
                raise ValueError("policy 'tenants' cannot wrap itself")
            inner = build_policy(inner)
        config["inner"] = inner
        config["tenants"] = as_tenants(config.get("tenants"))
    return cls(**config)


__all__ = [
    "ABOUT", "BUNDLED", "POLICIES", "Allocation", "AllocationError", "BundledConfig", "ConfigError", "EasyBackfill", "RushPolicy",
    "SchedulingPolicy", "TenantPolicy", "WFQConfig", "WFQPolicy", "build_policy", "policy_names", "policy_params", "wfq_config",
]
