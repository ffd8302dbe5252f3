"""An epoch's one global order of samples, and where a job stands in it, kept across preemptions and resizes.

A job pcs-ray preempts and resizes must not see a sample twice in an epoch, or miss one, because its run
stopped mid-epoch or came back on another world size. So every epoch has one seeded global order of the
dataset's indices (the same on every rank and in every run), the job's *position* is the number of samples
of that order its ranks have consumed together, and each checkpoint records ``(epoch, position)``. A run on
any world size takes its share from there: global batch ``k`` is the next ``world_size * batch_size``
samples of the order, split into one contiguous chunk per rank.

At an epoch's end the last global batch is split as evenly as the ranks allow (chunks differ by at most one
sample), so every rank gets the same number of batches (DDP needs that) and every sample is seen once; a
final global batch smaller than the world is merged into the one before it. With ``drop_last`` the samples
that do not fill a whole global batch are left out, as ``DistributedSampler(drop_last=True)`` does. Only a
run that starts an epoch's tail with fewer samples left than ranks (the world grew near an epoch's end) has
some ranks re-read one of those samples there, so that every rank has a batch and none waits on the others.

:class:`DataStream` holds a stream's state; the session writes every stream's state into each checkpoint
(``STATE_FILE``), and a stream created in a resumed run reads its state back by name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

STATE_FILE = ".pcs-ray-data.json"  # in a checkpoint's folder: every stream's epoch and position


def epoch_order(size: int, epoch: int, seed: int = 0, shuffle: bool = True) -> np.ndarray:
    """The epoch's global order of ``range(size)``: a permutation seeded by ``(seed, epoch)``, or in order."""
    if not shuffle:
        return np.arange(size, dtype=np.int64)
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch)]).permutation(size).astype(np.int64)


def global_batches(remaining: int, world_size: int, batch_size: int, drop_last: bool = False) -> list[int]:
    """The sizes of the global batches that consume ``remaining`` samples on ``world_size`` ranks."""
    if remaining <= 0:
        return []
    full = world_size * batch_size
    count, tail = divmod(remaining, full)
    sizes = [full] * count
    if tail and not drop_last:
        if tail < world_size and sizes:
            sizes[-1] += tail  # too few to give every rank one: the batch before takes them
        else:
            sizes.append(tail)
    return sizes


@dataclass(frozen=True)
class Batch:
    """One rank's batch: its dataset indices, and the job's position once the global batch is consumed."""

    indices: np.ndarray
    position_after: int


def rank_batches(order: np.ndarray, position: int, world_size: int, rank: int, batch_size: int,
                 drop_last: bool = False) -> list[Batch]:
    """This rank's batches of ``order`` from ``position`` on (see the module's doc)."""
    batches, start = [], position
    for size in global_batches(len(order) - position, world_size, batch_size, drop_last):
        chunk = np.array_split(order[start:start + size], world_size)[rank]
        if not len(chunk):  # fewer samples than ranks: this rank re-reads one rather than leave DDP waiting
            chunk = order[start + rank % size:start + rank % size + 1]
        start += size
        batches.append(Batch(chunk, start))
    return batches


class DataStream:
    """A named stream of epochs over ``size`` samples: which epoch it is in, and how far into it the job is.

    :meth:`begin` starts a pass: the first pass after a restore continues the restored epoch from its
    position; every other pass starts the next epoch at 0 (a pass left before its end counts as its epoch).
    :meth:`consumed` moves the position as the loop takes each batch; the end of a pass moves to the next
    epoch. :meth:`state` is what a checkpoint keeps.
    """

    def __init__(self, name: str, size: int, *, seed: int = 0, shuffle: bool = True, batch_size: int = 1,
                 drop_last: bool = False, world_size: int = 1, rank: int = 0, state: dict | None = None):
        self.name, self.size, self.seed, self.shuffle = name, int(size), int(seed), bool(shuffle)
        self.batch_size, self.drop_last, self.world_size, self.rank = int(batch_size), drop_last, world_size, rank
        self.epoch, self.position, self.in_pass, self.resumed = 0, 0, False, False
        self.current: list[Batch] | None = None  # the pass under way
        self.restore(state)

    def restore(self, state: dict | None) -> None:
        """Continue from a checkpoint's state (a stream of another size starts its epoch over)."""
        if not state:
            return
        self.epoch = int(state.get("epoch", 0))
        same = int(state.get("size", -1)) == self.size and int(state.get("seed", self.seed)) == self.seed
        self.position = min(int(state.get("position", 0)), self.size) if same else 0
        self.in_pass = self.resumed = True

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "size": self.size, "seed": self.seed}

    def begin(self) -> list[Batch]:
        """This rank's batches for the pass about to start."""
        if self.in_pass and not self.resumed:
            self.epoch, self.position = self.epoch + 1, 0  # the last pass was left early
        self.in_pass, self.resumed = True, False
        self.current = rank_batches(epoch_order(self.size, self.epoch, self.seed, self.shuffle), self.position,
                                    self.world_size, self.rank, self.batch_size, self.drop_last)
        return self.current

    def consumed(self, batch: Batch) -> None:
        self.position = batch.position_after

    def ended(self) -> None:
        """The pass reached its end: the next one is the next epoch."""
        self.epoch, self.position, self.in_pass, self.current = self.epoch + 1, 0, False, None

    def batches_per_pass(self) -> int:
        """How many batches this rank gets in the pass under way, else in the coming one (a loader's ``len``)."""
        if self.in_pass and self.current is not None:
            return len(self.current)
        position = self.position if self.resumed else 0
        return len(global_batches(self.size - position, self.world_size, self.batch_size, self.drop_last))


def write_states(folder: str | os.PathLike, streams: dict[str, DataStream]) -> None:
    """Record every stream's state in the checkpoint ``folder``."""
    if streams:
        path = os.path.join(os.fspath(folder), STATE_FILE)
        with open(path, "w") as f:
            json.dump({name: stream.state() for name, stream in streams.items()}, f)


def read_states(folder: str | os.PathLike | None) -> dict[str, dict]:
    """The streams' states a checkpoint recorded ({} for none, or a checkpoint that recorded none)."""
    if folder is None:
        return {}
    try:
        with open(os.path.join(os.fspath(folder), STATE_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
