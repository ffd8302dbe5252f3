"""The view every page renders from: plain data, taken from a live coordinator or rebuilt from a journal.

A snapshot is a dict::

    now       unix seconds the snapshot stands for
    jobs      job views as ``Coordinator.status`` gives them (absolute times, GPUs by name ``node:index``,
              ``waiting`` = the typed reason ``status`` gives), each with ``protected_until`` (unix seconds a
              minimum-runtime protection of its run holds, or None)
    nodes     [{"name", "gpus": [{"name", "index", "speed_class", "scores"}], "nvlink_groups": [[gpu names]]}]
    config    ``Coordinator.config`` (policy and placement in force, source, since) without the cluster
    tenants   ``Coordinator.tenants_view``
    history   [{"t", "kind", "source", "policy" | "tenants"}]: the journal's config and tenants events

Nothing here reads the coordinator: these helpers only look things up in such a dict.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Speed classes of a GPU from its slowdown scores (1.0 nominal; larger is slower).
FAST_BELOW, SLOW_ABOVE = 0.95, 1.05


def speed_class(scores: dict[str, float]) -> str:
    """``fast``, ``nominal`` or ``slow`` from a GPU's per-class slowdown scores (their mean)."""
    if not scores:
        return "nominal"
    mean = sum(scores.values()) / len(scores)
    return "fast" if mean < FAST_BELOW else "slow" if mean > SLOW_ABOVE else "nominal"


def nvlink_groups(gpu_names: list[str], links: list[list[str]] | None) -> list[list[str]]:
    """GPUs joined by NVLink paths (link codes ``NV<k>``) as groups, connected components in GPU order;
    every GPU of a node without a topology matrix is a group of its own."""
    n = len(gpu_names)
    if not links:
        return [[g] for g in gpu_names]
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if links[i][j].upper().startswith("NV"):
                parent[root(i)] = root(j)
    groups: dict[int, list[str]] = {}
    for i, name in enumerate(gpu_names):
        groups.setdefault(root(i), []).append(name)
    return list(groups.values())


def holders(jobs: Iterable[dict]) -> dict[str, dict]:
    """GPU name -> the job holding it now (running or stopping)."""
    out: dict[str, dict] = {}
    for job in jobs:
        if job["state"] in ("running", "stopping"):
            for gpu in job["gpus"]:
                out[gpu] = job
    return out


def job_by_id(snapshot: dict, job_id: int) -> dict | None:
    for job in snapshot["jobs"]:
        if job["id"] == job_id:
            return job
    return None
