"""A Ray Data loop as Ray's ``torch_regression_example.py`` has it (``get_dataset_shard(...).iter_torch_batches``
each epoch, a split train dataset, a validation dataset read whole by rank 0, a checkpoint per epoch), written
once and run under Ray Train or pcs-ray by ``config["framework"]``. The driver builds the same synthetic datasets
for both (``trainer_options``): only the import of ``DataConfig`` differs."""

import importlib
import os
import tempfile

import numpy as np
import torch

FEATURES = 100


def modules(framework: str):
    """``(train, train.torch)`` of ``ray`` or ``pcs_ray``: what a ported script's imports give it."""
    return importlib.import_module(f"{framework}.train"), importlib.import_module(f"{framework}.train.torch")


def make_rows(rows: int, seed: int) -> list[dict]:
    """Synthetic regression rows (the example reads a CSV from S3; no download here): ``x`` 100 floats, ``y`` one."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    y = (x @ rng.standard_normal(FEATURES).astype(np.float32)).reshape(-1, 1)
    return [{"x": x[i], "y": y[i]} for i in range(rows)]


def trainer_options(framework: str, config: dict) -> dict:
    """The datasets and their ``DataConfig``, built by the driver after it joined the cluster (pcs-ray's
    ``TorchTrainer`` does not connect Ray itself, so it is joined here for Ray Data, at ``RAY_ADDRESS``)."""
    import ray

    if not ray.is_initialized():
        ray.init()
    train = importlib.import_module(f"{framework}.train")
    rows = config["rows"]
    datasets = {"train": ray.data.from_items(make_rows(rows, 0), override_num_blocks=4),
                "validation": ray.data.from_items(make_rows(rows // 4, 1), override_num_blocks=1)}
    return {"datasets": datasets, "dataset_config": train.DataConfig(datasets_to_split=["train"])}


def train_func(config):
    train, train_torch = modules(config["framework"])
    torch.manual_seed(0)
    model = train_torch.prepare_model(torch.nn.Sequential(torch.nn.Linear(FEATURES, 256), torch.nn.ReLU(),
                                                          torch.nn.Linear(256, 1)))
    loss_fn = torch.nn.L1Loss()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    train_shard, validation = train.get_dataset_shard("train"), train.get_dataset_shard("validation")
    device = train_torch.get_device()
    rank = train.get_context().get_world_rank()
    for epoch in range(config["epochs"]):
        model.train()
        for batch in train_shard.iter_torch_batches(batch_size=config["batch"]):
            loss = loss_fn(model(batch["x"].float().to(device)), batch["y"].float().to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        result = {"epoch": epoch, "threads": torch.get_num_threads()}
        if rank == 0:
            model.eval()
            total, batches = 0.0, 0
            with torch.no_grad():
                for batch in validation.iter_torch_batches(batch_size=config["batch"]):
                    total += loss_fn(model(batch["x"].float().to(device)), batch["y"].float().to(device)).item()
                    batches += 1
            result["loss"] = total / max(batches, 1)
        with tempfile.TemporaryDirectory() as d:
            torch.save(getattr(model, "module", model).state_dict(), os.path.join(d, "model.pt"))
            train.report(result, checkpoint=train.Checkpoint.from_directory(d))
