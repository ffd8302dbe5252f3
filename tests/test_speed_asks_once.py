"""A submission's estimate reads the device model's record of its shape (``device_model.reference``) once,
instead of asking for each GPU count and each figure apart."""

from __future__ import annotations

import inspect

import pytest

from pcs_ray.coordinator.speed import SpeedModel
from pcs_ray.jobs.jobfile import JobFile
from pcs_ray.workloads import device_model as dm
from builders import Clock, coordinator


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    """The names of the device model's public functions, one per call into them."""
    seen: list[str] = []
    for name, fn in inspect.getmembers(dm, inspect.isfunction):
        if fn.__module__ == dm.__name__ and not name.startswith("_"):
            def counted(*args, _fn=fn, _name=name, **kwargs):
                seen.append(_name)
                return _fn(*args, **kwargs)

            monkeypatch.setattr(dm, name, counted)
    return seen


SHAPES = {
    "reference": {"params": {"batch_size": 8}},
    "declared-step-time": {"params": {"batch_size": 8}, "step_time": 1.0},
    "elastic": {"min_gpus": 1, "step_time": 0.5},
}


@pytest.mark.parametrize("fields", SHAPES.values(), ids=SHAPES.keys())
def test_a_submissions_estimate_calls_into_the_device_model_once(calls, fields):
    spec = JobFile.model_validate({"workload": "resnet18", "steps": 100, "gpus": 4, **fields})
    speed = SpeedModel()
    speed.estimate(spec)
    speed.speedup(spec)  # every GPU count the job can hold
    assert calls == ["reference"]
    speed.estimate(spec)
    assert calls == ["reference"]  # the record is kept for the shape


def test_a_coordinators_submission_calls_into_the_device_model_once(calls):
    core = coordinator(clock=Clock(), gpus=4, workloads=("resnet18",))
    core.submit({"workload": "resnet18", "steps": 100, "gpus": 4, "params": {"batch_size": 8}})
    assert calls == ["reference"]
