"""Everything a coordinator is started with, as plain JSON-able data, and the objects built from it.

Ray restarts a dead actor with its original constructor arguments, so the
whole configuration travels as one dict: the cluster spec, the policy (and
its WFQ configuration inline, since the file may not exist on the actor's
node) and the state folder that holds the journal, checkpoints and history.

Which policy: the one named, else the WFQ configuration the operator chose
with ``pcs-ray solve --set`` (``pcs_ray.solver.preference.set_wfq_config`` writes it
to ``default_config_path()``), else ``pcs-bal`` (:func:`choose_policy`). A
running coordinator swaps it with ``pcs-ray config set``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from pcs_ray import policies
from pcs_ray.api.advert import DEFAULT_API_PORT
from pcs_ray.cluster import ClusterSpec, cluster_spec_from_dict
from pcs_ray.contract import ConfigError
from pcs_ray.coordinator.core import BRANCH_MAX_AGE_S, Coordinator
from pcs_ray.coordinator.guards import RunLimits
from pcs_ray.coordinator.retention import Retention
from pcs_ray.coordinator.journal import Journal
from pcs_ray.placement import create_placement
from pcs_ray.policies import SchedulingPolicy
from pcs_ray.workloads.catalog import registered_workloads
from pcs_ray.workloads.history import HISTORY_FILE

DEFAULT_POLICY = "pcs-bal"

log = logging.getLogger("pcs_ray.coordinator")


@dataclass
class CoordinatorConfig:
    cluster: dict  # ClusterSpec as a dict
    state_dir: str
    policy: str | None = None  # None: the operator's choice (see choose_policy)
    wfq: dict | None = None  # WFQ config (PCS JSON format) for policy "pcs"
    placement: str = "packed-sticky"
    grace_s: float = 30.0  # a runner asked to stop is killed after this long
    launcher: str = "pcs_ray.executors.launch:launch"  # cold starts: runner processes started for each run
    warm_pool: bool = True  # hand runs to warm runners (pcs_ray.executors.pool), one per GPU; cold where there is none
    warm_runners_per_node: int | None = None  # at most this many warm runners per Ray node (None: what memory holds)
    default_step_time: float = 1.0
    restart_overhead: float = 3.0
    progress_journal_every: float = 5.0
    api_host: str = "127.0.0.1"  # the interface the HTTP API listens on (loopback: this node only)
    api_port: int = DEFAULT_API_PORT  # the first free of it and the next few, else any (0: any; see http_advert)
    forecast_refresh_max_age_s: float = BRANCH_MAX_AGE_S  # a submission's forecast branches from a refresh younger than this
    # What keeps a job from holding GPUs it no longer uses (pcs_ray.coordinator.guards; seconds, None: no limit):
    external_lease_s: float = RunLimits.lease_s  # an external executor silent this long loses its job's GPUs
    max_runtime_s: float | None = RunLimits.max_runtime_s  # a job's time limit unless it sets its own
    max_runtime_bound_s: float | None = RunLimits.max_runtime_bound_s  # the longest a job may set
    report_timeout_s: float | None = RunLimits.report_timeout_s  # a run silent this long is hung
    report_timeout_bound_s: float | None = RunLimits.report_timeout_bound_s  # the longest a job may set
    log_bytes_per_rank: int | None = RunLimits.log_bytes_per_rank  # a user rank's log rotates past this size
    # How long an ended job is kept (pcs_ray.coordinator.retention; None: no bound of that kind):
    ended_job_retention_s: float | None = Retention.ended_job_s  # forgotten this long after it ended
    ended_jobs_kept: int | None = Retention.ended_jobs_kept  # at most this many ended jobs kept, the oldest forgotten
    history_bytes: int | None = Retention.history_bytes  # the job history (history.jsonl) rotates past this size
    # The cluster's storage URI (pcs_ray.storage): checkpoints, logs and a mirror of the journal live there, so
    # no node's disk is needed after it is gone; None: all of it under state_dir, which every node must share.
    storage: str | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> "CoordinatorConfig":
        return cls(**raw)

    def resolved(self) -> "CoordinatorConfig":
        """With the policy named: the operator's choice when none is (read where this runs)."""
        if self.policy is not None:
            return self
        choice = choose_policy()
        return replace(self, policy=choice.policy, wfq=choice.wfq)

    def limits(self) -> RunLimits:
        try:
            return RunLimits(lease_s=self.external_lease_s, max_runtime_s=self.max_runtime_s,
                             max_runtime_bound_s=self.max_runtime_bound_s, report_timeout_s=self.report_timeout_s,
                             report_timeout_bound_s=self.report_timeout_bound_s,
                             log_bytes_per_rank=self.log_bytes_per_rank)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def retention(self) -> Retention:
        try:
            return Retention(ended_job_s=self.ended_job_retention_s, ended_jobs_kept=self.ended_jobs_kept,
                             history_bytes=self.history_bytes)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    @property
    def journal_path(self) -> Path:
        return Path(self.state_dir) / "journal.sqlite"

    @property
    def checkpoint_root(self) -> Path:
        return Path(self.state_dir) / "checkpoints"

    @property
    def history_path(self) -> Path:
        return Path(self.state_dir) / HISTORY_FILE

    @property
    def speeds_path(self) -> Path:
        return Path(self.state_dir) / "speeds.json"


def coordinator_policy(name: str, wfq: dict | None = None) -> SchedulingPolicy:
    """``pcs_ray.policies.build_policy`` as the coordinator names a policy: a name and, for ``pcs``, the
    WFQ configuration as a dict (what the journal and ``config set`` carry), which ``pcs`` must have."""
    if name.lower() != "pcs":
        return policies.build_policy(name)
    if wfq is None:
        raise ValueError("policy 'pcs' needs a WFQ configuration (--pcs-config FILE)")
    return policies.build_policy(name, config=wfq)


class PolicyChoice(NamedTuple):
    policy: str
    wfq: dict | None
    source: str  # where it came from, for the operator


def load_wfq(path: str | Path) -> dict:
    """A WFQ configuration file (PCS JSON, as ``pcs-ray solve`` writes it), checked."""
    try:
        return policies.wfq_config(path).to_dict()
    except ValueError as e:
        raise ConfigError(str(e)) from None


def choose_policy(policy: str | None = None, wfq_file: str | Path | None = None) -> PolicyChoice:
    """The policy a coordinator starts with: the one named (``pcs`` when only a WFQ file is given),
    else the WFQ configuration ``pcs-ray solve --set`` wrote, else ``pcs-bal``. Checked here, so a
    bad choice fails before any coordinator starts."""
    from pcs_ray.solver.preference import default_config_path  # here: the solver's imports are not small

    if wfq_file is not None:
        if policy not in (None, "pcs"):
            raise ConfigError(f"a WFQ configuration file is for policy 'pcs', not {policy!r}")
        choice = PolicyChoice("pcs", load_wfq(wfq_file), str(wfq_file))
    elif policy is not None:
        choice = PolicyChoice(policy, None, "named")
    elif default_config_path().is_file():
        path = default_config_path()
        choice = PolicyChoice("pcs", load_wfq(path), f"{path}, written by `pcs-ray solve --set`")
    else:
        choice = PolicyChoice(DEFAULT_POLICY, None, "the default")
    try:
        coordinator_policy(choice.policy, choice.wfq)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return choice


def build_core(config: CoordinatorConfig, clock=time.time, keep_runs: bool = False) -> Coordinator:
    """The Ray-free coordinator for ``config``; replays the journal in its state folder if there is one
    (``keep_runs``: see :class:`Coordinator`)."""
    config = config.resolved()
    cluster = cluster_spec_from_dict(config.cluster, "cluster spec")
    if config.storage:
        from pcs_ray.coordinator.journal_mirror import restore
        from pcs_ray.storage import open_storage

        restored = restore(open_storage(config.storage), config.state_dir)
        if restored:
            log.warning("journal rebuilt from %s: %d record(s)", config.storage, restored)
    return Coordinator(
        cluster, coordinator_policy(config.policy, config.wfq), Journal(config.journal_path),
        checkpoint_root=config.checkpoint_root, placement=create_placement(config.placement, cluster),
        clock=clock, workloads=registered_workloads(), default_step_time=config.default_step_time,
        restart_overhead=config.restart_overhead, history_path=config.history_path, speeds_path=config.speeds_path,
        progress_journal_every=config.progress_journal_every, policies=coordinator_policy, keep_runs=keep_runs,
        branch_max_age_s=config.forecast_refresh_max_age_s, limits=config.limits(),
        retain=config.retention(), storage=config.storage,
    )


def cluster_dict(spec: ClusterSpec) -> dict:
    return spec.model_dump(mode="json")
