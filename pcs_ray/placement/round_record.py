"""What a re-placing round gave, by position, so that the next round reads only where something changed.

``Placement.replace_all`` walks a round's jobs in placement order. A job keeps its GPUs without deciding
again when the free GPUs it sees differ from those of the last round only in ways it cannot prefer
(``Configuration.keeps``); over a stretch of jobs at the last round's next positions that all keep, the
GPUs held and freed since that point of the last round stay the same. So the round jumps over such
stretches with array operations on this record (totals, classes, counts by position, and each GPU's
holder's position) and runs the per-job rule only at jobs that are new, changed, moved or could prefer
what moved.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pcs_ray.jobs.state import JobState

#: the holder position of a GPU that no job of the round holds
NOWHERE = np.iinfo(np.int64).max
#: the holder position of a GPU held when the round started, by a job not in it
BEFORE = -1


def mask_to_bits(mask: np.ndarray) -> int:
    """A boolean array as an integer with bit g set where ``mask[g]``."""
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")


def bits_to_mask(bits: int, num_gpus: int) -> np.ndarray:
    """``bits`` (bit g = GPU g) as a boolean array of ``num_gpus``."""
    raw = np.frombuffer(bits.to_bytes((num_gpus + 7) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(raw, count=num_gpus, bitorder="little").view(bool)


class RoundRecord:
    """One round, by position in its placement order: each job's id (``job_at``: the job), its GPUs, count,
    decision total, whether a freed GPU must score strictly above that total to leave it (``strict``), its class
    (as a code), and whether the round decided it (else it kept its GPUs); per GPU, its holder's position
    (``owner``: ``BEFORE`` for GPUs held when the round started, ``NOWHERE`` for free ones). Never changed once
    made, except ``decided``, which the live placement sets where it makes a kept job's decision on request."""

    __slots__ = ("by_id", "cls", "decided", "gpus", "ids", "n", "num_gpus", "owner", "sorter", "start", "strict",
                 "total")

    def __init__(self, num_gpus: int, start: int, by_id: Mapping[int, JobState], ids: np.ndarray, gpus: np.ndarray,
                 n: np.ndarray, total: np.ndarray, strict: np.ndarray, cls: np.ndarray, owner: np.ndarray,
                 decided: np.ndarray) -> None:
        self.num_gpus, self.start, self.by_id, self.ids = num_gpus, start, by_id, ids
        self.gpus, self.n, self.total, self.strict, self.cls = gpus, n, total, strict, cls
        self.owner, self.decided = owner, decided
        self.sorter = np.argsort(ids, kind="stable")  # ids in increasing order, for ``positions``

    @classmethod
    def empty(cls, num_gpus: int, start: int) -> RoundRecord:
        """A round of no jobs that started with ``start`` held (what the first round compares with)."""
        owner = np.full(num_gpus, NOWHERE, dtype=np.int64)
        owner[bits_to_mask(start, num_gpus)] = BEFORE
        return cls(num_gpus, start, {}, np.empty(0, dtype=np.int64), np.empty(0, dtype=object),
                   np.empty(0, dtype=np.int64), np.empty(0), np.empty(0, dtype=bool), np.empty(0, dtype=np.int64), owner,
                   np.empty(0, dtype=bool))

    def job_at(self, q: int) -> JobState:
        """The job at position ``q``, from the round's id -> job map (the caller's, as it is now: a job that left
        it was released, and its release read what it needed of this record then)."""
        return self.by_id[int(self.ids[q])]

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Each of ``ids``' position in this round, -1 where it was not in it (array operations, not a dict
        rebuilt every round)."""
        if not len(self.ids):
            return np.full(len(ids), -1, dtype=np.int64)
        sorter = self.sorter
        where = sorter[np.minimum(np.searchsorted(self.ids, ids, sorter=sorter), len(sorter) - 1)]
        return np.where(self.ids[where] == ids, where, -1)

    def position(self, job_id: int) -> int | None:
        """Job ``job_id``'s position in this round, or None."""
        p = int(self.positions(np.array([job_id], dtype=np.int64))[0])
        return None if p < 0 else p

    def held_before(self, k: int) -> int:
        """The GPUs held at position ``k`` of the round, before its job took any: at the start or by earlier jobs."""
        return mask_to_bits(self.owner < k)

    def held_between(self, lo: int, hi: int) -> int:
        """The GPUs the jobs at positions ``lo`` to ``hi - 1`` held."""
        owner = self.owner
        return mask_to_bits((owner >= lo) & (owner < hi))

    def holders(self, bits: int) -> np.ndarray:
        """The positions of the jobs holding the GPUs of ``bits`` (``BEFORE``/``NOWHERE`` for others)."""
        return self.owner[bits_to_mask(bits, self.num_gpus)]


__all__ = ["BEFORE", "NOWHERE", "RoundRecord", "bits_to_mask", "mask_to_bits"]
