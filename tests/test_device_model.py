"""The emulated GPU's model (pcs_ray.workloads.device_model): no torch, every number sourced, the formula the runners pace by."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from pcs_ray.workloads import device_model as dm
from pcs_ray.workloads.catalog import CATALOG, WorkloadError


def test_every_registered_workload_has_a_sourced_entry_and_a_bundled_scaling_curve():
    assert set(dm.TABLE) == set(CATALOG)
    for name, entry in dm.TABLE.items():
        assert entry.source and "measured here" in entry.source and entry.curve in dm._curves()
        assert dm.reference_step_s(name, None) >= dm.MIN_STEP_S


@pytest.mark.parametrize("workload", sorted(dm.TABLE))
def test_scaling_is_one_at_one_gpu_sub_linear_and_never_decreasing(workload):
    values = [dm.scaling(workload, n) for n in range(1, 17)]
    assert values[0] == 1.0
    assert all(b >= a for a, b in zip(values, values[1:]))
    assert all(v <= n for n, v in enumerate(values, start=1)) and values[3] < 4  # sub-linear
    with pytest.raises(ValueError):
        dm.scaling(workload, 0)


def test_an_emulated_step_is_the_reference_times_the_slowdown_over_the_scaling():
    params = {"batch_size": 512}  # a large batch: each rank's share is big enough for the curve to hold
    assert dm.emulated_step_s("transformer", params, 4, 1.5) == pytest.approx(
        dm.reference_step_s("transformer", params) * 1.5 / dm.scaling("transformer", 4))
    assert dm.rank_step_s("transformer", params, 4) < dm.reference_step_s("transformer", params) / dm.scaling("transformer", 4)
    assert dm.emulated_step_s("vgg11", None, 1) == dm.reference_step_s("vgg11", None)


def test_a_data_parallel_step_is_never_shorter_than_one_nominal_gpu_computing_its_ranks_share():
    # ResNet-18 at batch 8 on 4 GPUs: 2 samples per rank, whose fixed cost the curve (measured at large batches) ignores
    params = {"batch_size": 8}
    curve = dm.reference_step_s("resnet18", params) / dm.scaling("resnet18", 4)
    share = dm.TIME_SCALE * (dm.TABLE["resnet18"].fixed_s + 2 * dm.TABLE["resnet18"].per_sample_s)
    assert dm.rank_step_s("resnet18", params, 4) == pytest.approx(share)
    assert dm.emulated_step_s("resnet18", params, 4) == pytest.approx(share) and share > 3 * curve
    assert dm.emulated_step_s("resnet18", params, 4, 2.0) == pytest.approx(2 * share)
    assert dm.rank_step_s("resnet18", params, 3) > dm.rank_step_s("resnet18", params, 4)  # ceil(8 / 3) = 3 samples


@pytest.mark.parametrize("workload", sorted(dm.TABLE))
def test_every_rank_keeps_to_the_nominal_gpus_share_of_a_core_at_any_gpu_count(workload):
    """What keeps emulation within the machine: a rank's real compute (fixed + its share on one core) is at most
    1 / TIME_SCALE of its step, whatever the GPU count, so 8 ranks need at most 0.8 of a core."""
    entry = dm.TABLE[workload]
    for batch in (8, 16, 64):
        for n in range(1, 9):
            share = entry.fixed_s + entry.per_sample_s * math.ceil(batch / n) * (
                1.0 if entry.reference_seq_len is None else 64 / entry.reference_seq_len)
            assert share / dm.emulated_step_s(workload, {"batch_size": batch}, n) <= 1 / dm.TIME_SCALE + 1e-12


def test_bigger_batches_and_longer_sequences_take_longer_and_bad_params_are_refused():
    assert dm.reference_step_s("resnet18", {"batch_size": 64}) > dm.reference_step_s("resnet18", {"batch_size": 8})
    assert dm.reference_step_s("transformer", {"seq_len": 128}) > dm.reference_step_s("transformer", {"seq_len": 64})
    with pytest.raises(WorkloadError, match="batch_size"):
        dm.reference_step_s("resnet18", {"batch_size": 0})
    with pytest.raises(WorkloadError, match="no emulated-device entry"):
        dm.reference_step_s("nope", None)


def test_the_model_imports_neither_torch_nor_ray():
    code = "import sys, pcs_ray.workloads.device_model as d; d.scaling('resnet18', 2); print('torch' in sys.modules or 'ray' in sys.modules)"
    root = Path(__file__).resolve().parent.parent  # python -c puts the working folder on the path
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"
