"""A whole forward play that keeps where a later arrival can join it: a new job's forecast then plays
only from there to its own finish, not the whole queue ahead of it (the live coordinator's refresh).

A job that arrives at time t at the tail of queue q leaves every decision where it cannot count
(``QueuePlay.quiet``) as it is, so the play with it is the play without it until the first decision,
at or after t, where it would count; there the play branches (``QueuePlay.branch``), as ``PlayChain``
does for ``simulate``. This holds only where the play's state at t leaves the job waiting: the last
decision before t was quiet for q.
"""

from __future__ import annotations

from collections.abc import Callable

from pcs_ray.forecast.queue_play import QueuePlay
from pcs_ray.state import JobState


class BranchPoints:
    """A queue play run to its end (``run``), keeping per queue one copy: the play just before the
    queue's first decision that a new job would change, after a stretch where it would have changed
    none (``quiet_from``: where that stretch began). Copies hold only the jobs still in the play.
    ``branch`` forecasts a new job from them; the play's own finishes are ``run``'s result."""

    def __init__(self, play: QueuePlay) -> None:
        self.started = play.now  # the time of the state the play started from
        self.policy = play.policy
        self.points: list[QueuePlay | None] = [None] * len(play.queues)
        self.quiet_from: list[float | None] = [None] * len(play.queues)
        self.done = False
        self._play = play
        self._known = frozenset(play.jobs)  # a job already in the play does not arrive again

    def run(self, between: Callable[[], None] | None = None) -> dict[int, float]:
        """The whole play's finishes (``QueuePlay.run``), keeping the branch points on the way."""
        play, points, quiet_from = self._play, self.points, self.quiet_from
        first = play.decide()  # the state as it stands: nothing moves if the engine's last decision holds
        if not first.moved:
            for q in range(len(points)):
                if play.quiet(first, q):
                    quiet_from[q] = play.now
        open_ = set(range(len(points)))
        while play.pending or play.completions():
            if between is not None:
                between()
            decision = play.decide()
            for q in list(open_):
                if play.quiet(decision, q):
                    if quiet_from[q] is None:
                        quiet_from[q] = play.now
                elif quiet_from[q] is not None:
                    points[q] = play.copy()
                    open_.discard(q)
            play.commit(decision)
        self._play, self.done = None, True
        return play.finish

    def branch(self, job: JobState, now: float) -> dict[int, float] | None:
        """Finishes of the play with ``job`` (admitted at ``now``, holding nothing), up to its own, as
        they are from its branch point on; None where the play's state at ``now`` would not leave the
        job waiting. A branch point before ``now`` is stepped on to ``now`` first (on a copy)."""
        q = self.policy.queue_of(job)
        since, point, jid = self.quiet_from[q], self.points[q], job.spec.job_id
        if not self.done or jid in self._known or since is None or point is None or now < since:
            return None
        if now <= point.now:
            return point.branch(job, now).run(until=jid)
        trunk, quiet = point.copy(), False  # the point's own decision is one the job would have changed
        while trunk.pending or trunk.completions():
            decision = trunk.decide()
            if trunk.now < now:
                quiet = trunk.quiet(decision, q)
            elif not quiet:
                return None
            elif not trunk.quiet(decision, q):
                return trunk.branch(job, now).run(until=jid)
            trunk.commit(decision)
        return None

    def held(self) -> int:
        """Jobs the branch points hold in all (each copy only those still in its play)."""
        return sum(len(p.jobs) for p in self.points if p is not None)


__all__ = ["BranchPoints"]
