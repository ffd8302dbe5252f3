"""Ray Tune's own examples, copied from the installed wheel with only their tuner lines changed, each run to
completion (``--smoke-test``) under ``PCSTuner`` on one shared ``pcs-ray up --local`` cluster: one node, 2
logical GPUs, token auth, stopped by PID (``pcs-ray down``'s record) in the fixture.

The tuner lines, as ``examples/user-code/TUNE.md`` changes them: ``from pcs_ray.executors.tune import PCSTuner`` and
``from pcs_ray.client import Client`` after ``from ray import tune``; ``tune.Tuner(`` becomes ``PCSTuner(``;
``client=Client(),`` after the trainable (and ``iterations=`` where the script's ``stop`` gives no
``training_iteration``). One more line where a script's smoke test starts a Ray of its own,
``ray.init(num_cpus=2)``: Ray itself refuses ``num_cpus`` when it joins a running cluster (pcs-ray's or any
other), so it becomes ``ray.init()``. Each test asserts the diff is exactly these lines.

Together they run function and class trainables, with and without checkpoints, at Tune's default resources
(1 CPU, no GPU) and CPU-only ones, under ASHA, HyperBand (class and function), PBT (class and function),
PB2 and no scheduler, with a logger callback and a callback that asks for checkpoints.

The suite runs :data:`IN_SUITE` (a class trainable and a checkpointing function trainable: about 2
minutes); ``PCS_RAY_TUNE_EXAMPLES=all`` runs every example in :data:`RUNS` (HyperBand,
PBT and PB2 add about 15 minutes, mostly a fresh Tune actor per resumed trial).

The wheel's other examples cannot run here, for reasons outside pcs-ray (:data:`NOT_RUN` says the same per
file; a test asserts the two lists cover the folder, that each is named here, and that each library named
is indeed not installed):

* a library not installed: ``ax_example.py`` (ax), ``bayesopt_example.py`` (bayes_opt), ``bohb_example.py``
  (ConfigSpace, hpbandster), ``hyperopt_conditional_search_space_example.py`` (hyperopt),
  ``lightgbm_example.py`` (lightgbm), ``mlflow_example.py`` (mlflow), ``mlflow_ptl.py`` (mlflow, and an MNIST download),
  ``mnist_ptl_mini.py`` (datasets, and an MNIST download), ``nevergrad_example.py`` (nevergrad),
  ``optuna_define_by_run_example.py``, ``optuna_example.py``, ``optuna_multiobjective_example.py`` (optuna),
  ``pb2_ppo_example.py`` and ``pbt_ppo_example.py`` (gymnasium, for RLlib's PPO), ``pbt_memnn_example.py``,
  ``pbt_tune_cifar10_with_keras.py``, ``tf_mnist_example.py``, ``tune_mnist_keras.py`` (tensorflow),
  ``xgboost_dynamic_resources_example.py``, ``xgboost_example.py`` (xgboost);
* a download: ``cifar10_pytorch.py`` (CIFAR-10), ``mnist_pytorch.py``, ``mnist_pytorch_trainable.py``,
  ``pbt_convnet_example.py``, ``pbt_convnet_function_example.py`` (MNIST),
  ``pbt_dcgan_mnist/pbt_dcgan_mnist_func.py``, ``pbt_dcgan_mnist/pbt_dcgan_mnist_trainable.py`` (MNIST and a
  pretrained classifier), ``pbt_transformers/pbt_transformers.py`` (GLUE and a pretrained model);
* not examples: ``__init__.py``, ``utils.py``, ``pbt_dcgan_mnist/common.py``, ``pbt_transformers/utils.py``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from local_up import private_env, status, up_local
from tune_examples import EXAMPLES, IMPORTS, OWN_RAY, changed_lines, port

pytestmark = [pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the local launcher reads /proc"),
              pytest.mark.slow]  # a local Ray cluster through the CLI, and ten Tune drivers


#: The examples that run: file -> (what the port adds after ``client=Client(),``, the sweep's name).
RUNS = {
    "async_hyperband_example.py": ("", "asynchyperband_test"),
    "custom_checkpointing_with_callback.py": ("", "smart_checkpoint_test"),
    "custom_func_checkpointing.py": ("", "hyperband_test"),
    "hyperband_example.py": ("", "hyperband_test"),
    "hyperband_function_example.py": ("", "hyperband_test"),
    "logging_example.py": ("", "hyperband_test"),
    "pb2_example.py": ("", "pbt_test"),
    "pbt_example.py": ("", "pbt_class_api_example"),
    "pbt_function.py": ("", "pbt_function_api_example"),
    "tune_basic_example.py": (" iterations=5 if args.smoke_test else 100,", "pcs-sweep"),
}

#: The examples the default suite runs; the others need ``PCS_RAY_TUNE_EXAMPLES=all``.
IN_SUITE = ("custom_checkpointing_with_callback.py", "custom_func_checkpointing.py")
RUN_NOW = sorted(RUNS) if os.environ.get("PCS_RAY_TUNE_EXAMPLES") == "all" else sorted(IN_SUITE)

#: The wheel's other example files, and why each does not run here: a library not installed, or a download.
NOT_RUN = {
    "__init__.py": "not an example",
    "utils.py": "not an example (helpers for the Keras examples)",
    "ax_example.py": "needs ax",
    "bayesopt_example.py": "needs bayes_opt",
    "bohb_example.py": "needs ConfigSpace, hpbandster",
    "cifar10_pytorch.py": "downloads CIFAR-10",
    "hyperopt_conditional_search_space_example.py": "needs hyperopt",
    "lightgbm_example.py": "needs lightgbm",
    "mlflow_example.py": "needs mlflow",
    "mlflow_ptl.py": "needs mlflow; downloads MNIST (Hugging Face datasets)",
    "mnist_ptl_mini.py": "needs datasets; downloads MNIST (Hugging Face datasets)",
    "mnist_pytorch.py": "downloads MNIST",
    "mnist_pytorch_trainable.py": "downloads MNIST",
    "nevergrad_example.py": "needs nevergrad",
    "optuna_define_by_run_example.py": "needs optuna",
    "optuna_example.py": "needs optuna",
    "optuna_multiobjective_example.py": "needs optuna",
    "pb2_ppo_example.py": "needs gymnasium (RLlib's PPO)",
    "pbt_convnet_example.py": "downloads MNIST",
    "pbt_convnet_function_example.py": "downloads MNIST",
    "pbt_memnn_example.py": "needs tensorflow",
    "pbt_ppo_example.py": "needs gymnasium (RLlib's PPO)",
    "pbt_tune_cifar10_with_keras.py": "needs tensorflow",
    "tf_mnist_example.py": "needs tensorflow",
    "tune_mnist_keras.py": "needs tensorflow",
    "xgboost_dynamic_resources_example.py": "needs xgboost",
    "xgboost_example.py": "needs xgboost",
    "pbt_dcgan_mnist/__init__.py": "not an example",
    "pbt_dcgan_mnist/common.py": "not an example (the DCGAN examples' helpers: MNIST download)",
    "pbt_dcgan_mnist/pbt_dcgan_mnist_func.py": "downloads MNIST and a pretrained classifier",
    "pbt_dcgan_mnist/pbt_dcgan_mnist_trainable.py": "downloads MNIST and a pretrained classifier",
    "pbt_transformers/__init__.py": "not an example",
    "pbt_transformers/utils.py": "not an example (helpers: a GLUE download)",
    "pbt_transformers/pbt_transformers.py": "downloads GLUE and a pretrained model",
}

def test_every_example_in_the_wheel_is_run_or_listed_with_why_not():
    found = {p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.py") if "__pycache__" not in p.parts}
    assert found == set(RUNS) | set(NOT_RUN), "Ray's examples changed: run each new one, or say why it cannot run"
    assert not set(RUNS) & set(NOT_RUN)
    for name, why in NOT_RUN.items():
        if why.startswith("needs "):
            libs = re.findall(r"\b(\w+)\b", why.split(";")[0].removeprefix("needs ").split("(")[0])
            present = [lib for lib in libs if importlib.util.find_spec(lib) is not None]
            assert not present, f"{name}: {present} is installed now; run the example"
        assert f"``{name.rsplit('/', 1)[-1] if name.endswith('__init__.py') else name}``" in __doc__, name


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_port_changes_only_the_tuner_lines(name):
    original = (EXAMPLES / name).read_text()
    removed, added = changed_lines(original, port(original, RUNS[name][0]))
    own_ray = [line for line in removed if OWN_RAY.search(line)]
    assert removed == ["tuner = tune.Tuner(", *own_ray] or removed == [*own_ray, "tuner = tune.Tuner("]
    assert sorted(added) == sorted([*IMPORTS, "tuner = PCSTuner(", f"client=Client(),{RUNS[name][0]}",
                                    *(OWN_RAY.sub("ray.init()", line) for line in own_ray)])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tune-examples")
    env, began = private_env(tmp), time.monotonic()
    try:
        with up_local(env, tmp / "state", "--nodes", 1, "--gpus-per-node", 2) as info:
            home = tmp / "home"  # Tune writes its results under ~/ray_results
            home.mkdir()
            yield {"env": {**env, "RAY_ADDRESS": info["address"], "PCS_RAY_API": info["api"]},
                   "driver_env": {**env, "RAY_ADDRESS": info["address"], "RAY_AUTH_MODE": "token", "HOME": str(home)},
                   "tmp": tmp}
    finally:
        print(f"\ntune examples: module wall time {time.monotonic() - began:.0f} s")


def test_the_suites_examples_are_examples_that_run():
    assert set(IN_SUITE) <= set(RUNS)


@pytest.mark.parametrize("name", RUN_NOW)
def test_rays_tune_example_runs_under_pcs_tuner_with_only_its_tuner_lines_changed(cluster, name):
    extra, sweep = RUNS[name]
    script = cluster["tmp"] / name
    script.write_text(port((EXAMPLES / name).read_text(), extra))
    before = {j["id"] for j in status(cluster["env"])["jobs"]}
    began = time.monotonic()
    run = subprocess.run([sys.executable, str(script), "--smoke-test"], env=cluster["driver_env"],
                         capture_output=True, text=True, timeout=900, cwd=script.parent, check=False)
    took = time.monotonic() - began
    print(f"\n{name}: {took:.0f} s")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "Best hyperparameters" in run.stdout  # each example prints its best trial's config last
    [job] = [j for j in status(cluster["env"])["jobs"] if j["id"] not in before]  # its sweep: one job
    assert job["name"] == sweep and job["state"] == "finished", job
    assert job["steps"] > 0 and job["segments"] and job["gpus"] == []
