"""A whole forward play that keeps where a later arrival can join it: a new job's forecast then plays
only from there to its own finish, not the whole queue ahead of it (the live coordinator's refresh).

A job that arrives at time t at the tail of queue q leaves every decision where it cannot count
(``QueuePlay.quiet``) as it is, so the play with it is the play without it until the first decision,
at or after t, where it would count; there the play branches (``QueuePlay.branch``), as ``PlayChain``
does for ``simulate``. This holds only where the play's state at t leaves the job waiting: the last
decision before t was quiet for q.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pcs_ray.forecast.queue_play import QueuePlay
from pcs_ray.jobs.state import JobState


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

    def branch(self, job: JobState, now: float, earlier: Sequence[tuple[float, JobState]] = ()) -> dict[int, float] | None:
        """Finishes, from ``now`` on, of the play with ``job`` (admitted at ``now``, holding nothing) up to
        its own. ``earlier``: (arrival, job) of the jobs admitted since the play started that still wait;
        those of ``job``'s queue join it too, each at its arrival. None where the play's state at an
        arrival would not leave that job waiting. The branch point is stepped on to the arrivals (on a
        copy), each joining at the first decision, at or after it, that it would change."""
        policy = self.policy
        q = policy.queue_of(job)
        since, point, jid = self.quiet_from[q], self.points[q], job.spec.job_id
        arrivals = sorted(((t, e) for t, e in earlier if policy.queue_of(e) == q), key=lambda a: a[0])
        arrivals.append((now, job))
        if not self.done or since is None or point is None or arrivals[0][0] < since:
            return None
        if any(e.spec.job_id in self._known for _, e in arrivals):
            return None
        trunk, quiet, i = point.copy(only_alive=False), True, 0  # decisions before the point were quiet
        while trunk.pending or trunk.completions():
            decision = trunk.decide()
            if arrivals[i][0] <= trunk.now:
                if not quiet:
                    return None  # the state the job arrived in would not have left it waiting
                if not trunk.quiet(decision, q):
                    while i < len(arrivals) and arrivals[i][0] <= trunk.now:
                        trunk.admit(arrivals[i][1])
                        i += 1
                    if i == len(arrivals):
                        return {j: t for j, t in trunk.run(until=jid).items() if t >= now}
                    continue  # decided again, with them
            quiet = trunk.quiet(decision, q)
            trunk.commit(decision)
        return None

    def held(self) -> int:
        """Jobs the branch points hold in all (each copy only those still in its play)."""
        return sum(len(p.jobs) for p in self.points if p is not None)


__all__ = ["BranchPoints"]
