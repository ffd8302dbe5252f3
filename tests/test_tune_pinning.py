"""A Tune trial scheduled by pcs-ray sees only its assigned GPUs, and its trainable calls nothing of pcs-ray.

The first tests take the wrapper apart without Ray (the assigned resources are
stubbed); the last run real Tune trials on the session's local Ray, whose
logical GPUs are the ``node0_gpu*`` custom resources, with the coordinator
core in-process: each trial reports the ``CUDA_VISIBLE_DEVICES`` it started
with, which must name the GPU index the scheduler placed it on.
"""

from __future__ import annotations

import inspect
import os

import pytest

import pcs_ray.executors.tune_pin as tune_pin
from pcs_ray.executors.tune_pin import PinnedTrainable, pin_trial_gpus, pinned
from pcs_ray.coordinator.local import LocalCoordinator
from builders import coordinator


@pytest.fixture
def held(monkeypatch):
    """Stub the trial's per-GPU resources; the CUDA variables are restored after the test."""
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.setenv(var, "")  # records the value to restore, even "unset"
        monkeypatch.delenv(var)
    names: list[str] = []
    monkeypatch.setattr(tune_pin, "assigned_gpu_resources", lambda: list(names))
    return names


def _seen() -> tuple[str | None, str | None]:
    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER")


def test_a_pinned_function_sees_its_gpus_when_it_starts_and_keeps_tunes_wrappers(held):
    from ray import tune
    from ray.tune.trainable.function_trainable import wrap_function

    held += ["node1_gpu2", "node1_gpu10"]

    def train(config, scale=1):
        return {"seen": _seen(), "scale": scale}

    wrapped = tune.with_resources(tune.with_parameters(train, scale=3), {"cpu": 2})
    run = pinned(wrapped)
    assert run.__name__ == "train" and run._resources is wrapped._resources
    assert inspect.signature(run) == inspect.signature(wrapped)
    cls = wrap_function(run)
    assert cls.default_resource_request({}) == wrap_function(wrapped).default_resource_request({})
    assert issubclass(cls, PinnedTrainable) and not issubclass(wrap_function(wrapped), PinnedTrainable)
    assert issubclass(wrap_function(tune.with_parameters(run, scale=4)), PinnedTrainable)  # wrapped again, still pinned
    assert _seen() == (None, None)  # nothing happens until the trial calls it
    assert train({})["seen"] == (None, None)
    assert pinned(train)({})["seen"] == ("2,10", "PCI_BUS_ID")
    assert pinned(run) is run


def test_a_pinned_generator_stays_a_generator_and_pins_before_its_first_line(held):
    held.append("node0_gpu3")

    def train(config):
        yield {"seen": _seen()}

    run = pinned(train)
    assert inspect.isgeneratorfunction(run)  # Tune reports what a generator yields
    assert [r["seen"] for r in run({})] == [("3", "PCI_BUS_ID")]


def test_a_pinned_class_pins_before_setup_and_keeps_its_name(held):
    from ray import tune

    held.append("node0_gpu1")

    class Trainable(tune.Trainable):
        def setup(self, config):
            self.seen = _seen()

        def step(self):
            return {"done": True}

    cls = pinned(Trainable)
    assert issubclass(cls, Trainable) and issubclass(cls, PinnedTrainable) and cls.__name__ == "Trainable"
    assert pinned(cls) is cls
    assert cls({}).seen == ("1", "PCI_BUS_ID")


def test_pin_trial_gpus_is_safe_to_call_again_and_a_no_op_outside_pcs_ray(held, monkeypatch):
    assert pin_trial_gpus() == [] and _seen() == (None, None)  # plain Tune: the env stays as Ray set it
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert pin_trial_gpus() == [] and _seen() == ("5", None)
    held.append("node0_gpu2")
    assert pin_trial_gpus() == pin_trial_gpus() == ["node0_gpu2"] and _seen() == ("2", "PCI_BUS_ID")
    assert pinned("PPO") == "PPO"  # a registered name is left to Tune


def test_the_scheduler_warns_of_a_trainable_that_is_not_pinned(tmp_path, caplog):
    from ray.tune.trainable.function_trainable import wrap_function

    from pcs_ray.executors.tune_scheduler import PCSTuneScheduler

    class Trial:  # what on_trial_add reads of a Tune trial
        def __init__(self, cls) -> None:
            self.trial_id, self.status, self.cls = "t0", "PENDING", cls

        def set_status(self, status) -> None:
            self.status = status

        def get_trainable_cls(self):
            return self.cls

    def train(config):
        pass

    warned = []
    for cls in (wrap_function(pinned(train)), wrap_function(train)):  # the classes Tune makes of each
        caplog.clear()
        sched = PCSTuneScheduler(_coordinator(tmp_path, 1), num_trials=1, iterations=1)
        sched.on_trial_add(None, Trial(cls))
        warned.append(any("is not wrapped in pcs_ray.executors.tune.pinned()" in r.message for r in caplog.records))
    assert warned == [False, True]


def _coordinator(tmp_path, gpus: int) -> LocalCoordinator:
    return LocalCoordinator(coordinator(gpus=gpus, checkpoint_root=tmp_path / "ckpt", workloads=("tiny_cnn",)))


def _index(resources) -> str:
    return ",".join(g.rsplit("_gpu", 1)[1] for g in resources)


def test_function_trials_are_pinned_without_calling_anything(ray_local, tmp_path):
    from ray import tune

    from pcs_ray.executors.tune import PCSTuner

    link = _coordinator(tmp_path, gpus=4)
    with link.lock:  # FIFO: an earlier job holds two GPUs, so the sweep's are not simply the first ones
        link.core.submit({"workload": "tiny_cnn", "steps": 1000, "gpus": 2, "step_time": 0.01})

    def train(config, offset):  # knows nothing of pcs-ray, except the trial that plays old code
        if config["old"]:
            from pcs_ray.executors.tune_trial import pin_trial_gpus

            pin_trial_gpus()
        tune.report({"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "order": os.environ.get("CUDA_DEVICE_ORDER"),
                     "value": config["x"] + offset})

    tuner = PCSTuner(
        tune.with_resources(tune.with_parameters(train, offset=10), {"cpu": 1, "gpu": 0}),
        param_space={"x": tune.grid_search([1, 2]), "old": tune.grid_search([False, True])},
        iterations=1, client=link, iteration_time=0.1, storage_path=str(tmp_path / "tune"),
    )
    sweep_gpus = set(link.assignment(tuner.job_id)["gpus"])
    assert len(sweep_gpus) == 2
    grid = tuner.fit()
    assert not grid.errors, grid.errors
    placements = tuner.scheduler.log.placements
    seen = []
    for result in grid:
        m = result.metrics
        gpus = placements[m["trial_id"]][-1]  # the start that reported (a choice can be withdrawn before it)
        assert set(gpus) <= sweep_gpus
        assert m["cvd"] == _index(gpus) and m["order"] == "PCI_BUS_ID", (m, gpus)
        assert m["value"] == result.config["x"] + 10  # tune.with_parameters still passes its objects
        seen.append(m["cvd"])
    assert len(seen) == 4 and set(seen) != {"0"}


def test_class_trials_on_two_gpus_are_pinned_to_both(ray_local, tmp_path):
    from ray import tune

    from pcs_ray.executors.tune import PCSTuner

    class Train(tune.Trainable):
        def setup(self, config):
            self.seen = os.environ.get("CUDA_VISIBLE_DEVICES")

        def step(self):
            return {"cvd": self.seen, "done": True}

        def save_checkpoint(self, checkpoint_dir):  # Tune saves a class trainable at its end
            return None

        def load_checkpoint(self, checkpoint):
            pass

    link = _coordinator(tmp_path, gpus=2)
    tuner = PCSTuner(Train, param_space={}, iterations=1, client=link, gpus_per_trial=2, iteration_time=0.1,
                     storage_path=str(tmp_path / "tune"))
    grid = tuner.fit()
    assert not grid.errors, grid.errors
    [result] = list(grid)
    gpus = tuner.scheduler.log.placements[result.metrics["trial_id"]][-1]
    assert result.metrics["cvd"] == _index(sorted(gpus)) == "0,1"


def test_tuner_takes_tunes_own_configs_or_the_shortcuts_not_both(tmp_path):
    from ray import tune

    from pcs_ray.executors.tune import PCSTuner

    with pytest.raises(ValueError, match="not both"):
        PCSTuner(lambda config: None, iterations=1, client=_coordinator(tmp_path, 1),
                 tune_config=tune.TuneConfig(num_samples=2), num_samples=3)
