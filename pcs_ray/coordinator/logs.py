"""What a user run printed: each rank's stdout and stderr, read back in pieces for ``pcs-ray logs``.

Ranks write ``STATE_DIR/logs/<job>/attempt-<k>/rank-<r>.log`` (``pcs_ray.executors.user_run``), rotated to
``rank-<r>.log.1`` past the operator's ``log_bytes_per_rank`` (``pcs_ray.executors.log_cap``). A reader
asks for one attempt (default: the newest) from byte offsets it got last time, so ``--follow``
fetches only what is new, and no reply is larger than ``limit`` bytes per rank.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pcs_ray.contract import UnknownJobError

CHUNK_B = 64 * 1024
METRICS = "metrics.jsonl"  # rank 0's reports, one JSON object a line (pcs_ray.executors.user_run.metrics_log)
METRICS_B = 16 * 1024 * 1024  # read of it at most
_ATTEMPT = re.compile(r"attempt-(\d+)$")
_RANK = re.compile(r"rank-(\d+)\.log$")


def attempts(root: Path, job_id: int) -> list[int]:
    folder = root / str(job_id)
    found = [int(m.group(1)) for p in folder.iterdir() if (m := _ATTEMPT.search(p.name))] if folder.is_dir() else []
    return sorted(found)


def read_logs(root: str | Path, job_id: int, attempt: int | None = None, offsets: dict | None = None,
              limit: int = CHUNK_B, metrics: bool = False) -> dict:
    """``{"job", "attempt", "attempts", "ranks": {rank: {"text", "offset", "size"}}, "metrics": [...]}`` from
    ``offsets`` (rank -> byte offset; default 0, or for a first read the last ``limit`` bytes of each log);
    ``metrics``: also its reports (rank 0's), oldest first, under ``"metrics"``."""
    root = Path(root)
    known = attempts(root, job_id)
    if attempt is None:
        attempt = known[-1] if known else None
    elif attempt not in known:
        raise UnknownJobError(f"job {job_id} has no logs of attempt {attempt}; attempts with logs: "
                              f"{', '.join(map(str, known)) or 'none'}")
    ranks: dict[str, dict] = {}
    if attempt is not None:
        folder = root / str(job_id) / f"attempt-{attempt}"
        for path in sorted(folder.glob("rank-*.log"), key=lambda p: int(_RANK.search(p.name).group(1))):
            rank = _RANK.search(path.name).group(1)
            size = path.stat().st_size
            start = (offsets or {}).get(rank)
            # An offset past the end: the log was rotated (pcs_ray.executors.log_cap) since; its new part is read from the top.
            start = max(0, size - limit) if start is None else int(start) if int(start) <= size else 0
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(limit)
            ranks[rank] = {"text": data.decode(errors="replace"), "offset": start + len(data), "size": size,
                           "skipped": start if offsets is None or rank not in offsets else 0}
    reply = {"job": job_id, "attempt": attempt, "attempts": known, "ranks": ranks}
    if metrics:
        reply["metrics"] = read_metrics(root / str(job_id) / f"attempt-{attempt}" / METRICS) if attempt is not None else []
    return reply


def read_metrics(path: Path) -> list[dict]:
    """The rows of a run's metrics log; a torn last line (the run was killed while writing) is left out."""
    if not path.is_file():
        return []
    with open(path, "rb") as f:
        lines = f.read(METRICS_B).decode(errors="replace").splitlines()
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows
