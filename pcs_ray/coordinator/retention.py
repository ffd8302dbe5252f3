"""How long the coordinator keeps an ended job: its journal events, its place in ``status``, its checkpoints and logs.

Without a bound, a cluster that runs for months keeps every job it ever ran: in memory (``status``
lists them all), in the journal (every restart replays them all) and on disk (each job's last two
checkpoints and its ranks' logs). The operator's policy (:class:`Retention`, ``--limit``): a job that
ended (finished, failed, cancelled, timed out) is *forgotten* once it ended ``ended_job_s`` ago, or once
more than ``ended_jobs_kept`` jobs have ended after it, whichever comes first. Forgetting a job
deletes its events from the journal in one transaction (a ``compacted`` record keeps the next job id,
so ids are never reused), drops it from memory, and deletes its checkpoints and logs. A finished job's
record stays in the job history (``history.jsonl``, which the solver reads), and what the speed model
learned from it stays in ``speeds.json``. Jobs that have not ended are never touched. The job history
itself is rotated past ``history_bytes`` (the older part kept as ``history.jsonl.1``).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from pcs_ray.coordinator.jobs import LiveJob

#: How often (seconds) the coordinator looks for jobs to forget: the bound is kept to within this much.
CHECK_EVERY_S = 60.0


@dataclass(frozen=True)
class Retention:
    """The operator's retention of ended jobs (None: no bound of that kind)."""

    ended_job_s: float | None = 7 * 24 * 3600.0
    ended_jobs_kept: int | None = 10_000
    history_bytes: int | None = 64 * 1024 * 1024  # the job history rotates past this (pcs_ray.workloads.history)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")


def due(jobs: Iterable[LiveJob], now: float, retention: Retention) -> list[int]:
    """The ended jobs to forget at ``now`` (seconds since the epoch, as ``LiveJob.finish``), oldest end first."""
    ended = sorted((j for j in jobs if j.done and j.finish is not None), key=lambda j: (j.finish, j.job_id))
    cut = 0
    if retention.ended_jobs_kept is not None:
        cut = max(0, len(ended) - retention.ended_jobs_kept)
    if retention.ended_job_s is not None:
        while cut < len(ended) and now - ended[cut].finish >= retention.ended_job_s:
            cut += 1
    return [j.job_id for j in ended[:cut]]


def delete_files(job_ids: Iterable[int], checkpoints: Path, logs: Path, storage: str | None = None,
                 datasets: Iterable[str] = ()) -> None:
    """Delete each job's checkpoints and its ranks' logs, and the Ray Data datasets its driver staged (by their
    tokens, under ``datasets/`` of the storage or of ``STATE_DIR``, never where a spec says), here and in the
    cluster's storage; what is gone already is fine, and a storage that does not answer keeps them (they are
    only space)."""
    job_ids = list(job_ids)
    tokens = [t for t in datasets if re.fullmatch(r"[0-9a-f]{8,64}", t)]
    for root in (checkpoints, logs):
        for jid in job_ids:
            shutil.rmtree(Path(root) / str(jid), ignore_errors=True)
    for token in tokens:
        shutil.rmtree(Path(checkpoints).parent / "datasets" / token, ignore_errors=True)
    if storage:
        from pcs_ray.storage import StorageError, open_storage

        try:
            kept = open_storage(storage, retry_s=10.0)
            for jid in job_ids:
                kept.delete_prefix(f"checkpoints/{jid}")
                kept.delete_prefix(f"logs/{jid}")
            for token in tokens:
                kept.delete_prefix(f"datasets/{token}")
        except StorageError:
            pass
