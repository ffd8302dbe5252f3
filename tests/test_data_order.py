"""An epoch's global order and a job's position in it: every sample once per epoch, whatever the stops and sizes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pcs_ray.train.data_order import DataStream, epoch_order, global_batches, rank_batches


def play(size, batch_size, epochs, runs, drop_last=False, seed=3):
    """Train ``epochs`` epochs in runs of ``(world_size, batches)``: each run's ranks read from the state the
    previous run's checkpoint (taken after its last batch) recorded. Returns the ids each epoch saw."""
    seen: dict[int, list[int]] = {}
    state, short = None, set()  # epochs whose tail began with fewer samples left than ranks
    for world, batches in runs:
        streams = [DataStream("train", size, seed=seed, batch_size=batch_size, drop_last=drop_last, world_size=world,
                              rank=r, state=state) for r in range(world)]
        taken = 0
        while taken < batches and streams[0].epoch < epochs:
            passes = [iter(s.begin()) for s in streams]
            if 0 < size - streams[0].position < world:
                short.add(streams[0].epoch)
            for step in zip(*passes, strict=True):
                for stream, batch in zip(streams, step):
                    stream.consumed(batch)
                    seen.setdefault(stream.epoch, []).extend(batch.indices.tolist())
                taken += 1
                if taken == batches:
                    break
            else:
                for stream in streams:
                    stream.ended()
        states = {s.rank: s.state() for s in streams}
        assert len({tuple(sorted(v.items())) for v in states.values()}) == 1  # every rank agrees
        state = states[0]
    return seen, state, short


def test_three_preemptions_and_two_resizes_see_every_sample_once_per_epoch():
    runs = [(2, 7), (2, 5), (1, 9), (1, 4), (3, 6), (3, 1000)]
    seen, state, _ = play(size=101, batch_size=4, epochs=3, runs=runs)
    assert sorted(seen) == [0, 1, 2] and state["epoch"] == 3
    for ids in seen.values():
        assert sorted(ids) == list(range(101))


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 60), batch=st.integers(1, 7),
       runs=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 9)), min_size=1, max_size=6))
def test_any_sequence_of_world_sizes_and_stops_sees_each_sample_once_per_epoch(size, batch, runs):
    seen, state, short = play(size, batch, epochs=2, runs=runs + [(2, 10_000)])
    assert sorted(seen) == [0, 1] and state["epoch"] == 2
    for epoch, ids in seen.items():
        if epoch in short:  # a world grew past what the epoch's tail had left: some ranks re-read one sample
            assert set(ids) == set(range(size))
        else:
            assert sorted(ids) == list(range(size))


def test_every_rank_gets_the_same_number_of_batches_and_the_tail_is_split_evenly():
    order = epoch_order(23, 0, seed=1)
    per_rank = [rank_batches(order, 0, 3, r, 4) for r in range(3)]
    assert len({len(b) for b in per_rank}) == 1
    last = [len(b[-1].indices) for b in per_rank]
    assert max(last) - min(last) <= 1 and sum(len(x.indices) for b in per_rank for x in b) == 23
    assert global_batches(25, 3, 4) == [12, 13]  # a tail smaller than the world joins the batch before
    assert global_batches(25, 3, 4, drop_last=True) == [12, 12]


def test_the_order_is_one_per_epoch_and_seed_and_not_shuffled_when_asked():
    assert np.array_equal(epoch_order(50, 2, 7), epoch_order(50, 2, 7))
    assert not np.array_equal(epoch_order(50, 2, 7), epoch_order(50, 3, 7))
    assert epoch_order(5, 4, shuffle=False).tolist() == [0, 1, 2, 3, 4]


def test_a_pass_left_early_counts_as_its_epoch_and_a_restored_one_continues():
    stream = DataStream("d", 10, batch_size=2)
    first = stream.begin()
    stream.consumed(first[0])
    assert stream.state()["position"] == 2
    again = DataStream("d", 10, batch_size=2, state=stream.state())
    assert [b.indices.tolist() for b in again.begin()] == [b.indices.tolist() for b in first[1:]]
    stream.begin()
    assert stream.epoch == 1 and stream.position == 0
    other_size = DataStream("d", 12, batch_size=2, state={"epoch": 4, "position": 6, "size": 10, "seed": 0})
    assert (other_size.epoch, other_size.position) == (4, 0)


def test_a_tail_shorter_than_the_world_gives_every_rank_a_batch():
    order = epoch_order(10, 0, seed=2)
    per_rank = [rank_batches(order, 9, 3, r, 4) for r in range(3)]
    assert [len(b) for b in per_rank] == [1, 1, 1]  # no rank without a batch: none left waiting in DDP
    assert {b[0].indices.tolist()[0] for b in per_rank} == {order[9]} and per_rank[0][0].position_after == 10


@pytest.mark.parametrize("world", [1, 2, 3])
def test_a_loaders_length_is_the_batches_of_the_pass(world):
    stream = DataStream("d", 17, batch_size=3, world_size=world, rank=0)
    assert stream.batches_per_pass() == len(stream.begin())
