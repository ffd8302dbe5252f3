"""Everything a coordinator is started with, as plain JSON-able data.

Ray restarts a dead actor with its original constructor arguments, so the
whole configuration travels as one dict: the cluster spec, the policy (and
its WFQ configuration inline, since the file may not exist on the actor's
node) and the state folder that holds the journal, checkpoints and history.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pcs_ray.cluster import ClusterSpec, cluster_spec_from_dict
from pcs_ray.coordinator.core import Coordinator
from pcs_ray.coordinator.journal import Journal
from pcs_ray import policies
from pcs_ray.placement import create_placement
from pcs_ray.policies import SchedulingPolicy
from workloads.catalog import registered_workloads

DEFAULT_POLICY = "pcs-bal"


@dataclass
class CoordinatorConfig:
    cluster: dict  # ClusterSpec as a dict
    state_dir: str
    policy: str = DEFAULT_POLICY
    wfq: dict | None = None  # WFQ config (PCS JSON format) for policy "pcs"
    placement: str = "packed-sticky"
    grace_s: float = 30.0  # a runner asked to stop is killed after this long
    launcher: str = "executors.launch:launch"
    default_step_time: float = 1.0
    restart_overhead: float = 3.0
    progress_journal_every: float = 5.0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> "CoordinatorConfig":
        return cls(**raw)

    @property
    def journal_path(self) -> Path:
        return Path(self.state_dir) / "journal.sqlite"

    @property
    def checkpoint_root(self) -> Path:
        return Path(self.state_dir) / "checkpoints"

    @property
    def history_path(self) -> Path:
        return Path(self.state_dir) / "history.jsonl"


def build_policy(name: str, wfq: dict | None = None) -> SchedulingPolicy:
    """``pcs`` with a WFQ config (``wfq``), else any name ``pcs_ray.policies.build_policy`` knows."""
    if name.lower() != "pcs":
        return policies.build_policy(name)
    if wfq is None:
        raise ValueError("policy 'pcs' needs a WFQ configuration (--pcs-config FILE)")
    return policies.build_policy(name, config=wfq)


def build_core(config: CoordinatorConfig, clock=time.time) -> Coordinator:
    """The Ray-free coordinator for ``config``; replays the journal in its state folder if there is one."""
    cluster = cluster_spec_from_dict(config.cluster, "cluster spec")
    return Coordinator(
        cluster, build_policy(config.policy, config.wfq), Journal(config.journal_path),
        checkpoint_root=config.checkpoint_root, placement=create_placement(config.placement, cluster),
        clock=clock, workloads=registered_workloads(), default_step_time=config.default_step_time,
        restart_overhead=config.restart_overhead, history_path=config.history_path,
        progress_journal_every=config.progress_journal_every,
    )


def cluster_dict(spec: ClusterSpec) -> dict:
    return spec.model_dump(mode="json")
