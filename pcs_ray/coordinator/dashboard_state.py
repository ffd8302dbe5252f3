"""The dashboard's view of a live coordinator: snapshots taken under the lock, shared, and the jobs' history.

``take_snapshot`` copies the jobs a part at a time under the host's lock (``reading``), and nothing
else: their views (``pcs_ray.dashboard.snapshot`` says what a snapshot holds), the wait reasons' texts
and the pages are built outside it.
``SnapshotKeeper`` takes at most one snapshot every ``max_age_s`` however many
dashboards ask (one in flight at a time; the others wait for it), less often
when a snapshot held the lock long (``LOCK_SHARE``), and keeps each active job's predicted finish, bound and step at
each snapshot where they changed: the job page's prediction-over-time chart.
"""

from __future__ import annotations

import math
import threading
import time
from array import array
from collections import deque

from pcs_ray.cluster.topology import TopologyError, read_topo
from pcs_ray.contract import JobStatus
from pcs_ray.coordinator import reading, views
from pcs_ray.coordinator.tenants import tenant_usage
from pcs_ray.dashboard.history import CONFIG_KINDS, config_history
from pcs_ray.dashboard.snapshot import nvlink_groups, speed_class

SNAPSHOT_MAX_AGE_S = 0.5  # with the pages' 1 s poll, what a page shows is at most 1.5 s old
LOCK_SHARE = 0.1  # snapshots hold the coordinator's lock at most this share of the time: at 10,000 jobs a
#                   snapshot is retaken less often than every SNAPSHOT_MAX_AGE_S rather than slow the cluster
HISTORY_POINTS = 64  # per job; when full, every other point goes (the whole life at half the resolution)
HISTORY_JOBS = 20_000  # jobs whose history is kept (the oldest go first)
TENANT_POINTS = 500  # changes of the tenants' GPUs kept
_FIELDS = 4  # t, predicted, bound, steps (NaN: none)


def cluster_layout(cluster) -> list[dict]:
    """Each node's GPUs (name, index, speed class, slowdown scores) and NVLink groups from its topology."""
    nodes = []
    for node in cluster.nodes:
        names = [f"{node.name}:{g.index}" for g in node.gpus]
        links = None
        if node.topology:
            try:
                matrix = read_topo(node.topology)
                links = matrix.links if matrix.size == len(names) else None
            except (TopologyError, OSError):
                links = None
        nodes.append({"name": node.name, "nvlink_groups": nvlink_groups(names, links),
                      "gpus": [{"name": name, "index": g.index, "scores": dict(g.scores),
                                "speed_class": speed_class(dict(g.scores))} for name, g in zip(names, node.gpus)]})
    return nodes


def take_snapshot(host, layout: list[dict], history: list[dict]) -> tuple[dict, float]:
    """What every page renders from, and the seconds the host's lock was held for it in all.

    The jobs are copied a part at a time (``reading.read``); their views (``Coordinator.status``'s, built by
    the same function), the wait reasons' texts and the tenants' usage are built after, outside the lock."""

    def first(core):
        minimum = core.tenants.min_runtime if core.tenants is not None else None
        declared = None if core.tenants is None else core.tenants.model_dump(mode="json")
        return core.config(), declared, core.wall(core.tenants_since), minimum

    got = reading.read(host, first)
    config, declared, since, minimum = got.first
    now, epoch = got.now, got.epoch
    config.pop("cluster", None)
    out = []
    for job in reading.in_parts(got.jobs, got.pause):
        view = views.job_view(job, epoch, got.gpu_name, got.gpu_watts, now - epoch)
        view["waiting"] = got.waiting.get(job.job_id)
        view["protected_until"] = None
        if minimum is not None and minimum.active and job.state == JobStatus.RUNNING and job.segments:
            until = epoch + job.segments[-1]["start"] + minimum.of(job.spec)
            view["protected_until"] = until if until > now else None
        out.append(view)
    tenants = {"tenants": declared, "since": since, "usage": tenant_usage(j for j in got.jobs if not j.done)}
    return {"now": now, "jobs": out, "nodes": layout, "config": config, "tenants": tenants, "history": history}, got.held_s


class JobHistory:
    """Per job, (t, predicted finish, bound, step) where any changed, at most ``HISTORY_POINTS`` each."""

    def __init__(self) -> None:
        self.points: dict[int, array] = {}

    def record(self, snapshot: dict) -> None:
        now = snapshot["now"]
        for job in snapshot["jobs"]:
            if job["state"] in ("finished", "cancelled", "failed") and job["id"] not in self.points:
                continue
            row = (now, _num(job.get("predicted_completion")), _num(job.get("bound")), float(job["steps"]))
            series = self.points.get(job["id"])
            if series is None:
                if len(self.points) >= HISTORY_JOBS:
                    del self.points[next(iter(self.points))]
                series = self.points[job["id"]] = array("d")
            elif _same(series[-_FIELDS + 1:], row[1:]):
                continue
            if len(series) >= HISTORY_POINTS * _FIELDS:
                thinned = array("d")
                for k in range(0, len(series), 2 * _FIELDS):
                    thinned.extend(series[k:k + _FIELDS])
                series = self.points[job["id"]] = thinned
            series.extend(row)

    def of(self, job_id: int) -> list[dict]:
        series = self.points.get(job_id, ())
        out = []
        for k in range(0, len(series), _FIELDS):
            t, predicted, bound, steps = series[k:k + _FIELDS]
            out.append({"t": t, "predicted": None if math.isnan(predicted) else predicted,
                        "bound": None if math.isnan(bound) else bound, "steps": steps})
        return out


def _num(value) -> float:
    return math.nan if value is None else float(value)


def _same(old, new) -> bool:
    return all((a == b) or (math.isnan(a) and math.isnan(b)) for a, b in zip(old, new))


class TenantHistory:
    """GPUs each tenant held at each snapshot where any changed (the last ``TENANT_POINTS``)."""

    def __init__(self) -> None:
        self.points: deque[dict] = deque(maxlen=TENANT_POINTS)

    def record(self, snapshot: dict) -> list[dict]:
        used = {name or "": row.get("gpus", 0) for name, row in (snapshot["tenants"].get("usage") or {}).items()}
        declared = ((snapshot["tenants"].get("tenants") or {}).get("tenants") or {})
        used.update({name: used.get(name, 0) for name in declared})
        if not self.points or self.points[-1]["used"] != used:
            self.points.append({"t": snapshot["now"], "used": used})
        return list(self.points)


class SnapshotKeeper:
    """The latest snapshot of ``host``, retaken when older than ``max_age_s``; thread-safe."""

    def __init__(self, host, max_age_s: float = SNAPSHOT_MAX_AGE_S) -> None:
        self.host, self.max_age_s, self.base_age_s = host, max_age_s, max_age_s
        self.history = JobHistory()
        self.tenants = TenantHistory()
        self._taking = threading.Lock()
        self._latest: tuple[float, dict] | None = None
        self._layout: tuple[object, list[dict]] | None = None
        self._config: tuple[tuple, list[dict]] | None = None

    def get(self) -> dict:
        """The latest snapshot, retaken when too old. While one is being taken, the others asking get the one
        before it rather than wait: they hold threads of the API's pool, which submissions need."""
        latest = self._latest
        if latest is not None and time.monotonic() - latest[0] < self.max_age_s:
            return latest[1]
        if not self._taking.acquire(blocking=latest is None):
            return latest[1]
        try:
            latest = self._latest
            if latest is not None and time.monotonic() - latest[0] < self.max_age_s:
                return latest[1]
            snapshot, held = take_snapshot(self.host, self.layout(), self.config_history())
            self.history.record(snapshot)
            snapshot["tenant_history"] = self.tenants.record(snapshot)
            self._latest = (time.monotonic(), snapshot)
            self.max_age_s = max(self.base_age_s, held / LOCK_SHARE)
            return snapshot
        finally:
            self._taking.release()

    def invalidate(self) -> None:
        """The next ``get`` takes a new snapshot (after an action, so its page shows its effect)."""
        with self._taking:
            self._latest = None

    def layout(self) -> list[dict]:
        cluster = self.host.core.cluster  # a new core after a node loss has a new cluster
        if self._layout is None or self._layout[0] is not cluster:
            self._layout = (cluster, cluster_layout(cluster))
        return self._layout[1]

    def config_history(self) -> list[dict]:
        """The journal's configuration events, read again only when the configuration in force changed."""
        core = self.host.core
        key = (id(core), core.config_since, core.config_source, core.tenants_since)
        if self._config is None or self._config[0] != key:
            with self.host.lock:
                events = [(e.t, e.kind, e.data) for e in core.journal.events_of(CONFIG_KINDS)]
            self._config = (key, config_history(events, None))
        return self._config[1]
