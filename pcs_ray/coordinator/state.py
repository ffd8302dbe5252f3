"""The coordinator's state, changed only by journaled events: replaying the journal rebuilds it.

Every change goes through ``_record``: the event is appended to the journal
and committed, then applied by ``_apply``. Replaying the journal through the
same ``_apply`` rebuilds the state after a restart, so the live path and the
recovery path cannot drift. A runner's reports between the journaled ones
(``Coordinator.progress`` journals one every few seconds) are applied by
``_apply`` alone, the same way: the next journaled report, or the run's end,
carries the step they reached. The state is the jobs (:mod:`.jobs`), what was
measured (:mod:`.speed`), the cluster model kept in step with them
(:mod:`.model`) and the policy in force. What an event does to the jobs is
the journal's one interpreter (:class:`.journal_interpreter.JournalInterpreter`, which ``pcs-ray
report`` replays too); this state adds what it does to the model, the
measurements and the policy.

The policy in force: the one the coordinator was started with, unless a
``pcs-ray config set`` came later (a ``config`` event from source ``set``,
rebuilt on replay through ``policies``). A start with a different policy
than the last start journals a ``config`` event from source ``start``, which
takes over; restarting with the same one (a Ray actor restart) keeps what
was set. Once a tenants file is applied (``pcs-ray tenants apply``, a
``tenants`` event), the ``tenants`` policy wraps that policy (:meth:`_install`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pcs_ray.cluster import ClusterSpec
from pcs_ray.contract import ConfigError
from pcs_ray.coordinator.gc_pauses import no_collection
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.coordinator.journal import Journal
from pcs_ray.coordinator.journal_interpreter import JournalInterpreter
from pcs_ray.coordinator.model import ClusterModel, job_spec
from pcs_ray.coordinator.speed import SpeedModel
from pcs_ray.policies.base import SchedulingPolicy
from pcs_ray.policies.tenants import TenantPolicy
from pcs_ray.tenants.spec import TenantsFile, tenants_from_dict

#: Builds a policy from its name and WFQ configuration (``coordinator.config.coordinator_policy``).
PolicyFactory = Callable[[str, dict | None], SchedulingPolicy]


def described(policy: SchedulingPolicy) -> dict:
    """The policy's parameters as the journal stores them (JSON round trip: tuples become lists)."""
    return json.loads(json.dumps(policy.describe()))


class CoordinatorState(JournalInterpreter):
    """Jobs, measurements, the model and the policy; see the module docstring."""

    def __init__(self, cluster: ClusterSpec, policy: SchedulingPolicy, journal: Journal, *, placement,
                 speed: SpeedModel, clock: Callable[[], float], policies: PolicyFactory | None,
                 keep_runs: bool = False) -> None:
        super().__init__()
        self.cluster = cluster
        self.policy = policy  # in force
        self.base_policy = policy  # what the tenants policy wraps, once a tenants file is applied
        self.tenants: TenantsFile | None = None  # the tenants file in force (None: none applied)
        self.tenants_since: float | None = None
        self.journal = journal
        self.clock = clock
        self.speed = speed
        self.model = ClusterModel(cluster, policy, placement)
        self.config_source, self.config_since = "start", 0.0  # where the policy in force came from, and when
        self._policies = policies
        self._start_policy = policy
        self._dirty: set[int] = set()  # jobs whose modelled remaining work must be re-synced
        self._predictions_stale = True
        self.changes = 0  # events since start: a forecast begun before the latest one is not the newest
        self._forecast_at: dict[int, int] = {}  # job -> ``changes`` when a submission forecast it
        self.recovered = 0  # jobs whose runs were lost with a previous incarnation (see settle_runs)
        self.reattached = 0  # runs a previous incarnation started that this one adopted
        self._replay(keep_runs)
        if self.epoch is None:
            self._record("init", None, epoch=self.clock(), policy=described(policy))
        elif described(policy) != self.started_with:
            self._record("config", None, source="start", policy=described(policy))

    # -- time ------------------------------------------------------------------
    def now(self) -> float:
        return self.clock() - self.epoch

    def wall(self, t: float | None) -> float | None:
        return None if t is None else self.epoch + t

    # -- the journal -------------------------------------------------------------
    def _record(self, _kind: str, job_id: int | None, **data) -> None:
        t = 0.0 if self.epoch is None else self.now()
        self.journal.append(t, _kind, job_id, data)
        self._apply(t, _kind, job_id, data)

    def _replay(self, keep_runs: bool) -> None:
        """Rebuild state from the journal.

        ``keep_runs``: the jobs the journal says hold GPUs stay as they are until the host has asked
        their runners whether they still train (:meth:`settle_runs`); otherwise they are lost now.
        """
        with no_collection():  # what a replay builds lives on: collections would walk it again and again
            for ev in self.journal.events():
                self._apply(ev.t, ev.kind, ev.job_id, ev.data)
        if self.epoch is not None and not keep_runs:
            self.settle_runs({})

    def holding(self) -> list[LiveJob]:
        """Jobs the state says hold GPUs (running, or stopping): after a restart, those whose runs may live on."""
        return [job for job in self.active.values() if job.state.holds_gpus]

    def settle_runs(self, alive: dict[int, int | None]) -> int:
        """After a restart: the runs in ``alive`` (job id -> the step its runner is at, if known) go on;
        every other job that held GPUs lost its runner, goes back to the queue and resumes from its
        last checkpoint. Returns how many were lost."""
        lost = 0
        for job in self.holding():
            if job.job_id in alive:
                step = alive[job.job_id]
                # Sets ``reported_at``: the adopted run's next report is not its start-up.
                self._record("progress", job.job_id, step=max(job.steps, step or 0), step_time=None,
                             emulated=job.emulated)
                self.reattached += 1
            else:
                self._record("cancelled" if job.cancel_requested else "lost", job.job_id, attempt=job.attempt)
                lost += 1
        self.recovered += lost
        return lost

    def _build_policy(self, name: str, wfq: dict | None) -> SchedulingPolicy:
        """A policy by name; what cannot be built is a :class:`ConfigError`."""
        if self._policies is None:
            raise ConfigError("this coordinator was built without a policy factory: it cannot change its policy")
        try:
            return self._policies(name, wfq)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    # -- events ------------------------------------------------------------------
    def _apply(self, t: float, kind: str, jid: int | None, data: dict) -> None:
        self.apply(t, kind, jid, data)
        if kind == "measured":  # an older coordinator's measured time per step of a workload on one GPU
            self.speed.learned(data["workload"], data["t1"])
        elif kind == "config":
            self._configured(t, data)
        elif kind == "tenants":
            self._tenants_set(t, data)
        if kind not in ("init", "measured", "predicted", "compacted"):  # these change no job's prospects
            self._predictions_stale = True
            self.changes += 1

    def forget(self, job_ids: list[int]) -> list[int]:
        """Forget these jobs where they ended (``pcs_ray.coordinator.retention``): their events leave the
        journal and they leave the state. Returns those forgotten."""
        ids = [jid for jid in job_ids if jid in self.jobs and self.jobs[jid].done]
        if ids:
            t = self.now()
            marker = {"jobs": self.forgotten + len(ids), "next_id": self.next_id, "now": ids}
            self.journal.forget(ids, t, marker)
            self._apply(t, "compacted", None, marker)
        return ids

    def _admitted(self, job: LiveJob) -> None:
        self.model.admit(job_spec(job, self.speed))
        self._dirty.add(job.job_id)

    def _withdrawn(self, job: LiveJob) -> None:
        self.model.remove(job.job_id)

    def _skipped(self, job: LiveJob) -> None:
        self.model.restore_skips(job.job_id, job.skips)

    def _stop_took(self, job: LiveJob, seconds: float) -> None:
        self.speed.observe_stop(job, seconds)

    def _requeued(self, job: LiveJob) -> None:
        self._dirty.add(job.job_id)

    def _resized(self, job: LiveJob) -> None:
        if job.job_id in self.model:
            self.model.readmit(job_spec(job, self.speed))
        self._dirty.add(job.job_id)

    def _configured(self, t: float, data: dict) -> None:
        """The policy changed (``data``: the ``config`` event's)."""
        if data["source"] == "set":
            policy = self._build_policy(data["name"], data.get("wfq"))
        else:  # the latest start's policy is the one this coordinator was started with
            policy = self._start_policy
        self.base_policy = policy
        self._install()
        self.config_source, self.config_since = data["source"], t

    def _tenants_set(self, t: float, data: dict) -> None:
        """A tenants file was applied (``data["tenants"]``: the file, as ``pcs_ray.tenants.spec`` reads it)."""
        self.tenants = tenants_from_dict(data["tenants"], "journaled tenants")
        self.tenants_since = t
        self._install()

    def _install(self) -> None:
        """The policy in force: the base policy, wrapped by the tenants policy when a tenants file is in force
        (a base that is itself a tenants policy gives up its own tenants for the file's)."""
        policy = self.base_policy
        if self.tenants is not None:
            inner = policy.inner if isinstance(policy, TenantPolicy) else policy
            policy = TenantPolicy(inner, self.tenants)
        self.policy = policy
        self.model.set_policy(policy)

    def _reported(self, job: LiveJob, t: float, step_time: float | None, first_of_run: bool) -> None:
        if step_time and first_of_run:
            self.speed.observe_start_up(job, t, job.steps, step_time)
        if step_time and job.gpus:
            self.speed.observe_step_time(job, step_time, first_of_run=first_of_run)
        self._dirty.add(job.job_id)
