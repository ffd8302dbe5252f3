"""A coordinator core behind a lock, answering the coordinator's calls (:class:`~pcs_ray.contract.CoordinatorAPI`).

The in-process host (:mod:`.local`) and the Ray actor (:mod:`.actor`) serve
every call the same way; they differ only in what they do with the actions
the core returns (:meth:`CoordinatorHost._execute`). Refusals are
:class:`~pcs_ray.contract.CoordinatorError` subclasses, raised as they are
(through Ray too: ``pcs_ray.client.Client`` re-raises them).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import deque

import numpy as np

from pcs_ray.contract import Action, Submitted
from pcs_ray.dashboard.markup import PREFIX as DASHBOARD
from pcs_ray.coordinator import reading, views
from pcs_ray.coordinator.call_lock import CallLock
from pcs_ray.coordinator.core import Coordinator
from pcs_ray.coordinator.dashboard_sessions import DashboardSessions
from pcs_ray.coordinator.gc_pauses import GcPauses
from pcs_ray.coordinator.logs import read_logs
from pcs_ray.tenants.identity import Caller
from pcs_ray.tenants.ownership import check_operator


class CoordinatorHost(ABC):
    """Serves the :class:`~pcs_ray.contract.CoordinatorAPI` calls on ``core``, one at a time."""

    def __init__(self, core: Coordinator) -> None:
        self.core = core
        self.lock = CallLock()  # a background forecast play stands aside while a call wants it
        # Emulated steps whose real compute overran the emulated GPU's budget, per job: the latest count of
        # each run (reports carry the run's running total) plus the finished runs' totals.
        self.overruns: dict[int, dict[int, int]] = {}
        self.late_steps: dict[int, int] = {}  # per job, from its ended runs: steps late on their own but caught up
        # Per submission: seconds waiting for the lock, and holding it (load benches split what a client sees).
        self.submit_s: deque[tuple[float, float]] = deque(maxlen=100_000)
        self.dashboard = DashboardSessions()  # its sign-in tickets and sessions (pcs_ray.coordinator.dashboard_routes)
        self.gc_pauses: GcPauses | None = None  # the process's garbage-collection pauses, where recorded (the actor)
        self.mirror = None  # the journal's mirror in the cluster's storage (pcs_ray.coordinator.journal_mirror)

    @abstractmethod
    def _execute(self, actions: list[Action]) -> None:
        """Carry out the actions the core returned (called under the lock)."""

    def _resume(self) -> None:
        """Decide once on the state the journal rebuilt: jobs whose runners were lost start again. The
        forecasts are the refresh play's (the actor's loop plays it outside the lock, so that a restart
        with 100,000 jobs queued answers calls before a whole play is done)."""
        with self.lock:
            self._execute(self.core.decide())

    def submit(self, spec: dict, submission_id: str | None = None, caller: dict | None = None) -> Submitted:
        who = Caller.from_wire(caller)
        asked = time.perf_counter()
        with self.lock:
            got = time.perf_counter()
            jid, actions = self.core.submit(spec, submission_id, caller=who)  # forecasts the new job (Coordinator.forecast)
            self._execute(actions)
            completion, bound = self.core.submitted(jid)
            self.submit_s.append((got - asked, time.perf_counter() - got))
        self.durable()
        return Submitted(jid, completion, bound)

    def status(self) -> dict:
        """The whole cluster and every job (``Coordinator.status``'s view), read a part at a time
        (``reading.read``): the lock is held for a bounded number of jobs at once, the views built outside it."""

        def first(core) -> dict:
            out = {"now": core.clock(), "epoch": core.epoch, "policy": core.policy.describe(),
                   "gpus": core.cluster.num_gpus, "restart_overhead": core.speed.restart_overhead}
            totals = {jid: sum(runs.values()) for jid, runs in self.overruns.items()}
            out["emulation_overruns"] = sum(totals.values())
            out["emulation_late_steps"] = sum(self.late_steps.values())
            runners = self._runners()
            if runners is not None:
                out["runners"] = runners
            if self.mirror is not None:
                out["storage"] = self.mirror.describe()
            out["state_dir"] = str(core.checkpoint_root.parent)  # where a driver without a storage stages files
            out["speeds"] = core.speed.to_dict()  # what forecasts use: step times per shape and count, costs
            return out, totals, dict(self.late_steps)

        got = reading.read(self, first)
        out, totals, late = got.first
        shown = []
        for job in reading.in_parts(got.jobs, got.pause):
            view = views.job_view(job, got.epoch, got.gpu_name, got.gpu_watts, got.now - got.epoch)
            view["waiting"] = got.waiting.get(job.job_id)
            view["emulation_overruns"] = totals.get(job.job_id, 0)
            view["emulation_late_steps"] = late.get(job.job_id, 0)
            shown.append(view)
        for at in range(0, len(shown), reading.READ_PART):
            with self.lock:
                self.core.floor_passed_forecasts(shown[at:at + reading.READ_PART])
        return {**out, "jobs": shown}

    def refresh_views(self) -> None:
        """Under the lock: bring forecasts up to date before a view is copied (the actor's loop does it in the
        background; an in-process host without one does it here)."""

    def _runners(self) -> list[dict] | None:
        """Each GPU's runner (warm or cold, its memory), where a host keeps a pool."""
        return None

    def count_overruns(self, job_id: int, attempt: int, overruns: int) -> None:
        """A run's emulation overruns so far (a running total per run, so late or repeated reports are harmless)."""
        if overruns:
            runs = self.overruns.setdefault(int(job_id), {})
            runs[attempt] = max(runs.get(attempt, 0), int(overruns))
        for per_job in (self.overruns, self.late_steps):  # jobs retention forgot (pcs_ray.coordinator.retention)
            for jid in [j for j in per_job if j not in self.core.jobs]:
                del per_job[jid]

    def decision_latency(self, after: int = 0, samples: bool = False) -> dict:
        """Percentiles of the core's decisions (policy, placement, the diff, its journal records), in ms: wall
        time, and ``cpu``, the deciding thread's CPU time (the decision's own cost, without the waits for a CPU,
        for the interpreter or for a garbage collection that wall time includes). ``count``: the decisions kept;
        ``after``: only those after the first ``after`` of them (a soak reads each window's); ``samples``: their
        times too. ``gc``: the process's collections so far, where the host records them (the actor)."""
        with self.lock:
            kept = list(self.core.decision_s)
            cpu_kept = list(self.core.decision_cpu_s)
        extra = {"gc": self.gc_pauses.read()} if self.gc_pauses is not None else {}
        times = np.array(kept[int(after):], dtype=float) * 1000.0
        if not len(times):
            return {"count": len(kept), **extra}
        cpu = np.array(cpu_kept[int(after):], dtype=float) * 1000.0
        out = {"count": len(kept), **_percentiles_ms(times), "cpu": _percentiles_ms(cpu), **extra}
        if samples:
            out.update(samples=[round(float(t), 3) for t in times], cpu_samples=[round(float(t), 3) for t in cpu])
        return out

    def submit_latency(self, after: int = 0) -> dict:
        """Percentiles, in ms, of the submissions' wait for the lock and of their time holding it
        (validation, journal, decision, the new job's forecast): what a client sees, less the call itself.
        ``after``: only the submissions after the first ``after`` kept."""
        with self.lock:
            times = np.array(list(self.submit_s)[after:], dtype=float).reshape(-1, 2) * 1000.0
        if not len(times):
            return {"count": 0}
        return {"count": int(len(times)), "wait": _percentiles_ms(times[:, 0]), "held": _percentiles_ms(times[:, 1])}

    def predict(self, job_id: int) -> dict:
        with self.lock:
            return self.core.prediction(int(job_id))

    def cancel(self, job_id: int, caller: dict | None = None) -> dict:
        who = Caller.from_wire(caller)
        with self.lock:
            self._execute(self.core.cancel(int(job_id), who))
            view = self.core.job_view(int(job_id))
        self.durable()
        return view

    def logs(self, job_id: int, attempt: int | None = None, offsets: dict | None = None,
             metrics: bool = False) -> dict:
        """What a user run's ranks printed (``pcs_ray.coordinator.logs.read_logs``), read outside the lock."""
        with self.lock:
            self.core.job_view(int(job_id))  # an unknown job is refused as such
            root = self.core.checkpoint_root.parent / "logs"
            storage = self.core.storage
        if storage:
            self._logs_from_storage(storage, root, int(job_id))
        return read_logs(root, int(job_id), None if attempt is None else int(attempt), offsets, metrics=bool(metrics))

    def _logs_from_storage(self, storage: str, root, job_id: int) -> None:
        """Bring the job's logs that ranks on any node uploaded into this coordinator's copy (``root``)."""
        from pcs_ray.storage import StorageError, open_storage
        from pcs_ray.storage.folders import download_changed

        try:
            download_changed(open_storage(storage, retry_s=5.0), f"logs/{job_id}", root / str(job_id))
        except StorageError:
            pass  # what was fetched before is read

    def durable(self) -> None:
        """Return once what this coordinator acknowledged is in the cluster's storage (with one: its journal
        mirror); nothing to wait for without one."""
        if self.mirror is not None:
            self.mirror.wait()

    def report_progress(self, job_id: int | str, step: int, step_time_s: float | None = None,
                        emulated: bool = False, overruns: int = 0) -> None:
        with self.lock:
            self.core.renew_lease(int(job_id))
            self.core.progress(int(job_id), int(step), step_time_s, bool(emulated))
            if overruns:
                job = self.core.jobs.get(int(job_id))
                self.count_overruns(int(job_id), job.attempt if job is not None else 0, overruns)

    def report_telemetry(self, job_id: int | str, attempt: int, node: str, index: int, reading: dict) -> None:
        """A runner rank's NVML reading of its GPU ``node:index`` in run ``attempt``
        (``pcs_ray.power.measured.RunMeter``; ``final``: the run's last). Runners call it, users do not."""
        with self.lock:
            self.core.telemetry(int(job_id), int(attempt), str(node), int(index), dict(reading))

    # -- external executors (``executor: external`` jobs, e.g. a Ray Tune sweep) --------
    def assignment(self, job_id: int) -> dict:
        with self.lock:
            return self.core.assignment(int(job_id))

    def external_ended(self, job_id: int, attempt: int, status: str, step: int,
                       step_time_s: float | None = None) -> dict:
        with self.lock:
            self.core.renew_lease(int(job_id))
            self._execute(self.core.run_ended(int(job_id), int(attempt), status, int(step), step_time_s))
            self.core.play_refresh()
            return self.core.assignment(int(job_id))

    def set_demand(self, job_id: int, gpus: int | None = None, steps: int | None = None) -> dict:
        with self.lock:
            self.core.renew_lease(int(job_id))
            self._execute(self.core.set_demand(int(job_id), gpus=gpus, steps=steps))
            return self.core.assignment(int(job_id))

    def external_failed(self, job_id: int, reason: str) -> dict:
        with self.lock:
            self._execute(self.core.external_failed(int(job_id), str(reason)))
            self.core.play_refresh()
            return self.core.job_view(int(job_id))

    def renew_lease(self, job_id: int) -> dict:
        with self.lock:
            self.core.renew_lease(int(job_id))
            return self.core.assignment(int(job_id))

    def dashboard_ticket(self, user: str, tenant: str | None = None) -> dict:
        """A one-time sign-in link's ticket for the dashboard (valid ``TICKET_TTL_S``), for the caller
        (``user``, ``tenant``) the browser then acts as; ``path``: the link without the host."""
        who = Caller.from_wire({"user": user, "tenant": tenant})
        ticket, expires = self.dashboard.issue_ticket(who)
        return {"ticket": ticket, "expires": expires, "path": f"{DASHBOARD}/login?ticket={ticket}",
                "url": self._dashboard_url(ticket)}

    def _dashboard_url(self, ticket: str) -> str | None:
        """The whole link, where the host knows the URL its HTTP API is served on."""
        return None

    # -- the operator ------------------------------------------------------------------
    def config(self) -> dict:
        with self.lock:
            return self.core.config()

    def set_config(self, policy: str, wfq: dict | None = None, caller: dict | None = None) -> dict:
        who = Caller.from_wire(caller)
        with self.lock:
            self._execute(self.core.set_policy(policy, wfq, who))
            out = self.core.config()
        self.durable()
        return out

    def tenants(self) -> dict:
        with self.lock:
            return self.core.tenants_view()

    def set_tenants(self, tenants: dict, caller: dict | None = None) -> dict:
        who = Caller.from_wire(caller)
        with self.lock:
            self._execute(self.core.set_tenants(tenants, who))
            return self.core.tenants_view()

    def check_stop(self, caller: dict | None = None) -> None:
        """Refuse ``pcs-ray stop`` from anyone but an operator, once a tenants file names operators."""
        with self.lock:
            check_operator(self.core.tenants, Caller.from_wire(caller), "stop")


def _percentiles_ms(ms: np.ndarray) -> dict:
    """p50, p99 and max of a non-empty array of milliseconds, rounded for a report."""
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "max_ms": round(float(ms.max()), 2)}
