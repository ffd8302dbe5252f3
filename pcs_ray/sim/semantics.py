"""How a policy's decisions become a schedule: our continuous time, or rounds as Blox runs them.

``continuous`` (the default, PCS's evaluation): a decision at every arrival,
completion and policy review, and work conservation: a job that does not fit
is skipped and later jobs that fit run (backfilling).

``blox`` (PAL's evaluation, which ran in the Blox simulator): jobs are rigid,
in the policy's strict priority order; each takes its full demand, a higher-
priority job preempts lower-priority ones to make room, and the walk stops at
the first job that does not fit, so nothing overtakes a blocked job (no
backfilling). Decisions happen only at round boundaries (multiples of 360 s):
arrivals wait for the next boundary, and a job that finishes inside a round
holds its GPUs until the round ends, where its completion is recorded. Which
GPUs each job gets is still the placement's choice (sticky placements keep a
running job's GPUs; non-sticky ones re-place every job each round).

Blox's placements walk the order, suspend lower-priority jobs until the job
fits and stop at the first one that cannot be placed; since every placement
here can place a job whenever enough GPUs are free, the jobs that run are the
longest prefix of the order whose demands fit the cluster, which is what
:class:`StrictPriority` allocates. The round clock is the engine's: it reads
the policy's ``round_s``.
"""

from __future__ import annotations


from pcs_ray.policies.base import Allocation, SchedulingPolicy
from pcs_ray.jobs.state import Snapshot

#: Blox's round length in PAL's simulations (``--round-duration 360``).
BLOX_ROUND_S = 360.0

#: One line per semantics, for help texts and the README.
SEMANTICS: dict[str, str] = {
    "continuous": "decide at every arrival, completion and review; work-conserving (a job that does not fit "
                  "is skipped, later ones backfill); the default",
    "blox": "as PAL's evaluation in the Blox simulator: strict priority order, full demand, preemption of "
            f"lower-priority jobs, no backfilling past the first job that does not fit; {BLOX_ROUND_S:g} s "
            "rounds, arrivals admitted and completions recorded at round boundaries",
}


class StrictPriority(SchedulingPolicy):
    """``inner``'s priority order, each job at its full demand, cut at the first job that does not fit.

    ``round_s`` makes the engine decide only at its multiples (None: at every event,
    e.g. MAPA's dispatcher, which also never lets a job overtake the head of the queue).
    """

    def __init__(self, inner: SchedulingPolicy, round_s: float | None = BLOX_ROUND_S) -> None:
        if inner.order.__func__ is SchedulingPolicy.order:
            raise ValueError(f"policy {inner.name!r} has no priority order to run strictly; "
                             f"policies with one: {', '.join(ordered_policies())}")
        if round_s is not None and not round_s > 0:
            raise ValueError(f"round length must be > 0 seconds, got {round_s}")
        self.inner = inner
        self.name = inner.name
        self.reads_progress = inner.reads_progress
        self.round_s = None if round_s is None else float(round_s)

    def allocate(self, snap: Snapshot) -> Allocation:
        alloc: Allocation = {}
        free = snap.capacity
        for job in self.inner.order(snap):
            want = min(job.spec.max_gpus, snap.capacity)
            if want > free:
                break  # head-of-line blocking: nothing behind it may start
            alloc[job.spec.job_id] = want
            free -= want
        return alloc

    def order(self, snap: Snapshot):
        return self.inner.order(snap)

    def fork(self) -> "StrictPriority":
        return self.fork_around(self.inner)

    def make_index(self, jobs):
        return self.inner.make_index(jobs)

    def next_review(self, snap: Snapshot, alloc: Allocation) -> float | None:
        return self.inner.next_review(snap, alloc)

    def describe(self) -> dict:
        return {**self.inner.describe(), "semantics": "blox" if self.round_s else "strict", "round_s": self.round_s}


def ordered_policies() -> list[str]:
    """Registered policy names that are a priority order (those ``blox`` semantics can run)."""
    from pcs_ray.policies import POLICIES  # the registry imports the policies; this module is below it

    return [name for name, cls in POLICIES.items() if cls.order is not SchedulingPolicy.order]


def with_semantics(policy: SchedulingPolicy, semantics: str) -> SchedulingPolicy:
    """``policy`` run under ``semantics`` (a name of ``SEMANTICS``); a ``ValueError`` names the valid choices."""
    key = semantics.lower()
    if key == "continuous":
        return policy
    if key == "blox":
        return StrictPriority(policy, BLOX_ROUND_S)
    raise ValueError(f"unknown semantics {semantics!r}; valid: {', '.join(SEMANTICS)}")


def round_boundary(t: float, length: float, *, slack: bool = False) -> float:
    """The first multiple of ``length`` at or after ``t``. With ``slack`` a ``t`` within float
    rounding above a boundary is that boundary (a finish computed as 720.0000000001 is due at
    720), with the engine's completion tolerance."""
    if t == float("inf"):
        return t
    k = -(-t // length)  # ceil without float-to-int overflow
    if slack and k > 0:
        prev = (k - 1) * length
        if t - prev <= 1e-9 * max(1.0, prev):
            return prev
    return k * length


__all__ = ["BLOX_ROUND_S", "SEMANTICS", "StrictPriority", "ordered_policies", "round_boundary", "with_semantics"]
