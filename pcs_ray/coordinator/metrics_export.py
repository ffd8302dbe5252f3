"""Prometheus metrics of the live coordinator, through ``ray.util.metrics`` (shown on Ray's metrics endpoint).

:func:`readings` computes what to show from the core (pure, testable without
Ray), a part of the jobs per hold of the coordinator's lock; :class:`RayMetrics` publishes it. Names, all prefixed ``pcs_ray_``:

* ``pcs_ray_jobs{state}``: jobs queued, running, stopping (and finished, failed, cancelled, timed out so far)
* ``pcs_ray_wfq_queue_length{queue}``: active jobs in each WFQ queue (``waiting`` tag: those without GPUs)
* ``pcs_ray_gpus{state}``: GPUs allocated and idle
* ``pcs_ray_waiting_jobs{reason}``: queued and stopping jobs by why they wait (``pcs_ray.policies.reasons.WaitCode``)
* ``pcs_ray_tenant_jobs{tenant,waiting}`` and ``pcs_ray_tenant_gpus{tenant}``: each tenant's active jobs
  (``waiting``: those without GPUs) and the GPUs its jobs hold ("" for jobs without a tenant)
* ``pcs_ray_preemptions_total``: preemptions so far
* ``pcs_ray_prediction_error_percent``: histogram of finished jobs' ``100·|JCT − JCT_pred| / JCT_pred``
  (the first prediction, as PCS measures it)

``grafana/pcs-ray-dashboard.json`` at the repository root plots them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from pcs_ray.contract import JobStatus
from pcs_ray.coordinator.decisions import hand_overs
from pcs_ray.policies.reasons import WaitCode

ERROR_BOUNDARIES = [1, 2, 5, 10, 20, 50, 100, 200, 500]
PART = 1000  # jobs counted per hold of the coordinator's lock


@dataclass
class Readings:
    jobs: dict[str, int]
    queues: dict[str, tuple[int, int]]  # queue -> (active, waiting)
    gpus_allocated: int
    gpus_idle: int
    preemptions: int
    finished_errors: dict[int, float] = field(default_factory=dict)  # job id -> prediction error (%)
    reasons: dict[str, int] = field(default_factory=dict)  # wait reason code -> queued jobs
    tenants: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # tenant -> (active, waiting, GPUs)


def readings(core, lock=None, pause: Callable[[], None] = lambda: None, part: int = PART) -> Readings:
    """What the coordinator shows now. With the core's ``lock``, it is held ``part`` jobs at a time (the
    wait reasons' inputs taken under it, their codes counted outside, ``pause`` called between parts);
    without, the caller holds it."""
    hold = contextlib.nullcontext if lock is None else lambda: lock
    jobs = {s.value: 0 for s in JobStatus}
    preemptions, allocated = 0, 0
    errors: dict[int, float] = {}
    queues: dict[str, list[int]] = {}
    tenants: dict[str, list[int]] = {}
    handed: dict[int, str] = {}  # hand-over and stopping codes (decisions.hand_overs)
    queued: set[int] = set()
    with hold():
        ids = list(core.jobs)
        reasons_later = core.model.why_waiting_later()
        plan = core.model.plan()
    for at in range(0, len(ids), part):
        pause()
        with hold():
            queue_of = getattr(core.policy, "queue_of", None)
            engine = core.model.engine
            active = []
            for jid in ids[at:at + part]:
                job = core.jobs.get(jid)
                if job is None:
                    continue
                jobs[job.state.value] += 1
                preemptions += job.preemptions
                if job.state == JobStatus.FINISHED and job.first_predicted and job.finish is not None:
                    predicted, actual = job.first_predicted - job.submit, job.finish - job.submit
                    if predicted > 0:
                        errors[job.job_id] = 100.0 * abs(actual - predicted) / predicted
                if job.done:
                    continue
                active.append(job)
                if job.state == JobStatus.QUEUED:
                    queued.add(jid)
                allocated += len(job.gpus)
                state = engine.job(jid)
                if queue_of is not None and state is not None:
                    q = queues.setdefault(str(queue_of(state)), [0, 0])
                    q[0] += 1
                    q[1] += not job.gpus
                t = tenants.setdefault(job.spec.tenant or "", [0, 0, 0])
                t[0] += 1
                t[1] += not job.gpus
                t[2] += len(job.gpus)
            handed.update((jid, why.code.value) for jid, why in
                          hand_overs(active, core.holders.values(), plan, core.gpu_name).items())
    reasons = {code.value: 0 for code in WaitCode}
    codes = dict(handed)
    codes.update((jid, why.code.value) for jid, why in reasons_later(pause).items() if jid in queued)
    for code in codes.values():
        reasons[code] += 1
    return Readings(jobs, {k: (v[0], v[1]) for k, v in queues.items()}, allocated,
                    max(0, core.cluster.num_gpus - allocated), preemptions, errors, reasons,
                    {k: (v[0], v[1], v[2]) for k, v in tenants.items()})


class RayMetrics:
    """The ``ray.util.metrics`` objects; :meth:`publish` sets them from :class:`Readings`."""

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Gauge, Histogram

        self.jobs = Gauge("pcs_ray_jobs", "pcs-ray jobs by state", tag_keys=("state",))
        self.queue = Gauge("pcs_ray_wfq_queue_length", "active jobs per WFQ queue", tag_keys=("queue", "waiting"))
        self.gpus = Gauge("pcs_ray_gpus", "GPUs allocated and idle", tag_keys=("state",))
        self.preemptions = Counter("pcs_ray_preemptions_total", "preemptions so far")
        self.waiting = Gauge("pcs_ray_waiting_jobs", "queued and stopping jobs by why they wait", tag_keys=("reason",))
        self.tenant_jobs = Gauge("pcs_ray_tenant_jobs", "active jobs per tenant", tag_keys=("tenant", "waiting"))
        self.tenant_gpus = Gauge("pcs_ray_tenant_gpus", "GPUs held per tenant", tag_keys=("tenant",))
        self._tenants: set[str] = set()
        self.error = Histogram("pcs_ray_prediction_error_percent", "finished jobs' prediction error (%)",
                               boundaries=ERROR_BOUNDARIES)
        self._preemptions = 0
        self._seen: set[int] = set()
        self._queues: set[str] = set()

    def publish(self, r: Readings) -> None:
        for state, n in r.jobs.items():
            self.jobs.set(n, {"state": state})
        for q in self._queues - set(r.queues):
            self.queue.set(0, {"queue": q, "waiting": "false"})
            self.queue.set(0, {"queue": q, "waiting": "true"})
        for q, (active, waiting) in r.queues.items():
            self.queue.set(active - waiting, {"queue": q, "waiting": "false"})
            self.queue.set(waiting, {"queue": q, "waiting": "true"})
        self._queues = set(r.queues)
        for reason, n in r.reasons.items():
            self.waiting.set(n, {"reason": reason})
        for t in self._tenants - set(r.tenants):
            r.tenants[t] = (0, 0, 0)
        for t, (active, waiting, gpus) in r.tenants.items():
            self.tenant_jobs.set(active - waiting, {"tenant": t, "waiting": "false"})
            self.tenant_jobs.set(waiting, {"tenant": t, "waiting": "true"})
            self.tenant_gpus.set(gpus, {"tenant": t})
        self._tenants = {t for t, v in r.tenants.items() if v[0]}
        self.gpus.set(r.gpus_allocated, {"state": "allocated"})
        self.gpus.set(r.gpus_idle, {"state": "idle"})
        if r.preemptions > self._preemptions:
            self.preemptions.inc(r.preemptions - self._preemptions)
            self._preemptions = r.preemptions
        for jid, err in r.finished_errors.items():
            if jid not in self._seen:
                self._seen.add(jid)
                self.error.observe(err)
        if len(self._seen) > len(r.finished_errors):  # jobs retention forgot: they cannot come back
            self._seen.intersection_update(r.finished_errors)
