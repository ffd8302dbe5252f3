"""What one event of a queue play decides, named: the play computes it (``QueuePlay.decide``) without
changing itself, so that a chain of plays can ask whether a new arrival would change it before committing."""

from __future__ import annotations

from dataclasses import dataclass

from pcs_ray.jobs.state import JobState


@dataclass(slots=True)
class Front:
    """Where a queue's FIFO pass that used its whole share can resume at the next event.

    Either no job was passed over (``passed`` is None): ``job`` is the last job served and ``left`` its
    count; or the pass first passed ``job`` over with ``left`` GPUs still free there, and ``passed``
    holds the jobs served after it (served afresh when the pass resumes). ``at`` is where ``job``
    probably is in its queue, kept up to date as jobs ahead of it finish.
    """

    share: int
    job: JobState
    left: int
    passed: frozenset | None
    at: int


@dataclass(slots=True)
class Decision:
    """One event's decision in a queue play.

    ``shares`` and ``fill``: each queue's share and how the water-filling ended (``WFQPolicy.water_fill``
    plus each queue's head then); ``total``: GPUs each queue's own decision hands out before any top-up;
    ``front`` and ``stopped``: per queue, where its pass can resume and whether it ran out of GPUs
    before its jobs; ``qalloc``: each queue's counts; ``patches``: (queue, changed counts, jobs served
    afresh) for queues whose pass resumed; ``spread``: whether GPUs were topped up across queues (the
    next event then decides every queue afresh); ``moved``: (job, new count) of every job whose count
    changes; ``merged``: the whole allocation in ``WFQPolicy.allocate``'s order when it was decided
    as one, else None.
    """

    shares: list[int]
    fill: list
    total: list[int]
    front: list[Front | None]
    stopped: list[bool]
    qalloc: list[dict[int, int]]
    patches: list[tuple[int, list, object]]
    spread: bool
    moved: list[tuple[int, int]]
    merged: dict[int, int] | None
