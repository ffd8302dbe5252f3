"""Atomic, verified checkpoints: keep the previous one, fall back when the latest is damaged."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from pcs_ray.executors.checkpoint import (
    LATEST,
    PREVIOUS,
    CheckpointError,
    CheckpointFallbackWarning,
    capture_rng_state,
    load_checkpoint,
    peek_step,
    remove_stale_temporaries,
    restore_rng_state,
    save_checkpoint,
)


def _state(step: int) -> dict:
    return {"step": step, "model": {"w": torch.full((3,), float(step))}, "meta": {"name": "x", "lr": 0.1, "none": None}}


def test_save_keeps_previous_and_loads_latest(tmp_path):
    save_checkpoint(tmp_path, _state(1))
    save_checkpoint(tmp_path, _state(2))
    loaded = load_checkpoint(tmp_path)
    assert loaded.state["step"] == 2 and loaded.path.name == LATEST and not loaded.fell_back
    assert torch.equal(loaded.state["model"]["w"], torch.full((3,), 2.0))
    assert peek_step(tmp_path) == 2
    # the previous checkpoint is a complete, valid file of step 1
    (tmp_path / LATEST).unlink()
    with pytest.warns(CheckpointFallbackWarning):
        assert load_checkpoint(tmp_path).state["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [PREVIOUS]  # no temporary files left behind


def test_no_checkpoint_is_none(tmp_path):
    assert load_checkpoint(tmp_path) is None
    assert load_checkpoint(tmp_path / "missing") is None
    assert peek_step(tmp_path) is None


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "empty", "garbage_header"])
def test_corrupted_latest_falls_back_to_previous_with_warning(tmp_path, damage, caplog):
    save_checkpoint(tmp_path, _state(4))
    save_checkpoint(tmp_path, _state(8))
    path = tmp_path / LATEST
    data = bytearray(path.read_bytes())
    if damage == "flip_byte":
        data[-10] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"not json\n") + data
    path.write_bytes(bytes(data))
    with pytest.warns(CheckpointFallbackWarning, match="previous.ckpt"):
        loaded = load_checkpoint(tmp_path)
    assert loaded.state["step"] == 4 and loaded.fell_back and loaded.path.name == PREVIOUS
    assert any("unusable" in r.getMessage() for r in caplog.records)


def test_every_checkpoint_damaged_is_an_error_not_a_fresh_start(tmp_path):
    save_checkpoint(tmp_path, _state(1))
    save_checkpoint(tmp_path, _state(2))
    for name in (LATEST, PREVIOUS):
        (tmp_path / name).write_bytes(b"{}\n")
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        load_checkpoint(tmp_path)


def test_header_records_digest_and_step(tmp_path):
    save_checkpoint(tmp_path, _state(5))
    header = json.loads((tmp_path / LATEST).read_bytes().split(b"\n", 1)[0])
    assert header["step"] == 5 and len(header["sha256"]) == 64


def test_load_refuses_pickled_code(tmp_path):
    """weights_only=True: a payload holding an arbitrary object is rejected even with a valid digest."""
    save_checkpoint(tmp_path, {"step": 1, "obj": np.random.default_rng(0)})
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path)


def test_rng_state_round_trip():
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    state = capture_rng_state()
    expected = (torch.rand(4), np.random.rand(4), [random.random() for _ in range(4)])
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    restore_rng_state(state)
    assert torch.equal(torch.rand(4), expected[0])
    assert np.array_equal(np.random.rand(4), expected[1])
    assert [random.random() for _ in range(4)] == expected[2]


def test_rng_state_survives_a_checkpoint(tmp_path):
    state = capture_rng_state()
    save_checkpoint(tmp_path, {"step": 0, "rng": [state]})
    restored = load_checkpoint(tmp_path).state["rng"][0]
    expected = torch.rand(3)
    restore_rng_state(restored)
    assert torch.equal(torch.rand(3), expected)


def test_a_writer_killed_mid_write_leaves_the_latest_intact(tmp_path):
    save_checkpoint(tmp_path, _state(3))
    torn = tmp_path / f".{LATEST}.99999.tmp"
    torn.write_bytes(b'{"magic": "pcs-ray-checkpoint"}\n' + b"\x00" * 100)  # killed before fsync + rename
    assert load_checkpoint(tmp_path).state["step"] == 3
    assert remove_stale_temporaries(tmp_path) == [torn] and not torn.exists()
    save_checkpoint(tmp_path, _state(4))
    assert load_checkpoint(tmp_path).state["step"] == 4
