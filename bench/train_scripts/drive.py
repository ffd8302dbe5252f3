"""Run one integration's script under Ray Train or pcs-ray on the Ray cluster at ``RAY_ADDRESS`` and print the
wall time of ``fit()`` as JSON: ``python drive.py FRAMEWORK SCRIPT [CONFIG_JSON]``.

A script may define ``trainer_options(framework, config)``: more ``TorchTrainer`` arguments (datasets, their
``DataConfig``), built by the driver before ``fit()`` from the same config the loop gets."""

import importlib
import json
import sys
import time

import ray


def main() -> None:
    framework, script = sys.argv[1], sys.argv[2]
    config = {"framework": framework, **json.loads(sys.argv[3] if len(sys.argv) > 3 else "{}")}
    train = importlib.import_module(f"{framework}.train")
    trainer_cls = importlib.import_module(f"{framework}.train.torch").TorchTrainer
    module = importlib.import_module(script)
    options = {}
    if framework == "ray":
        import ray.cloudpickle

        ray.init()
        ray.cloudpickle.register_pickle_by_value(module)  # Ray Train's workers get the script's code with the function
        scaling = train.ScalingConfig(num_workers=config.pop("workers", 2), use_gpu=False)
        options["run_config"] = train.RunConfig(name=f"bench-{script}", storage_path=config.pop("storage"))
    else:
        scaling = train.ScalingConfig(num_workers=config.pop("workers", 2), use_gpu=True)
        config.pop("storage")
        options["run_config"] = train.RunConfig(name=f"bench-{script}")
    if hasattr(module, "trainer_options"):
        options.update(module.trainer_options(framework, config))
    trainer = trainer_cls(module.train_func, train_loop_config=config, scaling_config=scaling, **options)
    began = time.perf_counter()
    result = trainer.fit()
    wall = time.perf_counter() - began
    print(json.dumps({"framework": framework, "script": script, "wall_s": round(wall, 3),
                      "metrics": {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))}}))


if __name__ == "__main__":
    main()
