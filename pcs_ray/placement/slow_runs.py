"""The slow-run filter: keep a starting job off GPUs whose next run is predicted slow (RUSH's model, per GPU).

The predictions come from whatever the placement's facts carry as
``slow_runs`` (an object with ``predicted_slow(job) -> bool per GPU``, e.g.
``pcs_ray.variability.run_replay.RunReplay``); without one nothing is predicted and
nothing is rejected, so a ``-slow-run`` placement then behaves as its base.
A job's own GPUs pass (staying on them starts no new run); a move to
other GPUs is a new run and avoids predicted-slow ones like a start. When fewer free GPUs than the job needs are predicted fast the filter steps
aside (the job must run somewhere; RUSH's start function is what waits).
When the base configuration's sources offer no all-fast candidate, the
fallback source ``fast-gpus`` offers the predicted-fast free GPUs on the
fewest nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from pcs_ray.placement.framework import Configuration
from pcs_ray.placement.plugin import Candidates, Context, Filter, Reason, Source

PREDICTED_SLOW = Reason("predicted-slow", "a GPU of the candidate is predicted to make this run slow")


def _fast(ctx: Context) -> np.ndarray | None:
    """Free GPUs a new run of this job may use: predicted fast, or already its own (staying there starts no
    new run); None when the filter has nothing to say."""
    predictor = getattr(ctx.facts, "slow_runs", None)
    if predictor is None:
        return None
    ok = ~predictor.predicted_slow(ctx.job)
    if ctx.home:
        ok[list(ctx.home)] = True
    fast = ctx.free & ok
    return fast if np.count_nonzero(fast) >= ctx.n else None


class SlowRunFilter(Filter):
    """Rejects candidates holding a GPU predicted slow (see the module's note for when it steps aside)."""

    name = "slow-run"
    reason = PREDICTED_SLOW

    def candidates(self, ctx: Context, batch: Candidates) -> np.ndarray:
        fast = _fast(ctx)
        if fast is None or batch.source == FastGPUs.name:
            return np.ones(len(batch), dtype=bool)
        return fast[batch.gpus].all(axis=1)


class FastGPUs(Source):
    """Fallback: ``n`` predicted-fast free GPUs, from the nodes with the most of them first."""

    name = "fast-gpus"
    fallback = True

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        fast = _fast(ctx)
        if fast is None:
            return
        node = ctx.facts.node
        ids = np.flatnonzero(fast)
        per_node = np.bincount(node[ids], minlength=int(node.max()) + 1)
        order = np.lexsort((ids, -per_node[node[ids]]))  # fullest node first, then lowest id
        gpus = np.sort(ids[order][: ctx.n])
        nodes = node[gpus]
        across = bool(nodes.min() != nodes.max())
        yield Candidates(self.name, np.array([-1 if across else int(nodes[0])]), gpus=gpus[None, :], across=across)


def with_slow_run_filter(base: Configuration) -> Configuration:
    """``base`` with the slow-run filter and its fallback source, named ``<base>-slow-run``."""
    return dataclasses.replace(
        base, name=f"{base.name}-slow-run", sources=(*base.sources, FastGPUs()),
        filters=(*base.filters, SlowRunFilter()),
        help=f"{base.help}; starts avoid GPUs predicted to run slow (the slow-run filter)",
    )


__all__ = ["PREDICTED_SLOW", "FastGPUs", "SlowRunFilter", "with_slow_run_filter"]
