"""Forward plays of successive arrivals that share their common past (what ``simulate`` makes per arrival)."""

from __future__ import annotations

import math

from pcs_ray.forecast.decision import Decision
from pcs_ray.forecast.queue_play import QueuePlay
from pcs_ray.jobs.state import JobState

INF = math.inf


class PlayChain:
    """Forward plays of successive arrivals (``simulate``) that share their common past.

    The play made at arrival k (the trunk) is stepped only as far as the next arrival needs.
    Until job j's arrival, the trunk is the schedule itself; after it, while every decision
    leaves j where it cannot change anything (``QueuePlay.quiet``), the play with j is the
    trunk plus a waiting j. At the first decision where j would count, the trunk branches:
    the copy with j becomes the new trunk, and the old one plays out its own forecast. Where
    that does not hold (a decision that j changed after all, or completions at j's very
    arrival) the new play starts afresh from the engine.
    """

    def __init__(self, policy) -> None:
        self.policy = policy
        self.trunk: QueuePlay | None = None
        self.slot = -1  # the forecast the trunk will complete
        self.noisy: list[float] = []  # per queue, the latest trunk decision a job arriving there would have changed
        self.memo: dict = {}

    def play(self, engine: "Engine", job: JobState, calm: bool, forecasts: list) -> None:
        """Forecast for ``job``'s arrival (appended to ``forecasts``; filled in when complete).
        ``calm``: the engine decided nothing new at this arrival (no completion, same counts)."""
        t, trunk, policy = engine.now, self.trunk, self.policy
        q = policy.queue_of(job)
        forecasts.append(None)
        final = engine.final_changes()
        if final is not None:  # nothing to play: every job holds all it can use
            if trunk is not None:
                forecasts[self.slot] = trunk.run()
                self.trunk = None
            forecasts[-1] = final
            return
        child = None
        if trunk is not None and calm and self.noisy[q] < t:
            child = self._branch(trunk, job, q, t)
        if trunk is not None:
            forecasts[self.slot] = trunk.run()
        if child is None:
            child = QueuePlay.start(engine, policy, self.memo)
            if child is None:
                self.trunk = None
                forecasts[-1] = engine.fork().play_forward()
                return
            self.noisy = [-INF] * len(child.queues)
        self.trunk, self.slot = child, len(forecasts) - 1

    def _branch(self, trunk: QueuePlay, job: JobState, q: int, t: float) -> QueuePlay | None:
        while trunk.pending or trunk.completions():
            decision = trunk.decide()
            if trunk.now >= t and not trunk.quiet(decision, q):
                child = trunk.branch(job, t)
                trunk.commit(decision)  # the old trunk's own decision: no longer the shared past
                return child
            self._commit(trunk, decision)
        return None

    def _commit(self, trunk: QueuePlay, decision: Decision) -> None:
        for q in range(len(self.noisy)):
            if not trunk.quiet(decision, q):
                self.noisy[q] = trunk.now
        trunk.commit(decision)

    def finish(self, forecasts: list) -> None:
        if self.trunk is not None:
            forecasts[self.slot] = self.trunk.run()
            self.trunk = None


__all__ = ["PlayChain"]
