"""A Ray Train training function, ported to pcs-ray by changing its imports (and nothing else).

The original two import lines were::

    import ray.train as train
    from ray.train.torch import prepare_data_loader, prepare_model

The body is unchanged Ray Train code: ``get_context().get_world_size()``, ``get_checkpoint()`` with
``as_directory()``, ``report(metrics, checkpoint=Checkpoint.from_directory(d))`` (without ``step``,
every report counts one step: set the job's ``steps`` to the number of reports).
Submit it with ``pcs-ray submit examples/user-code/ray-train-port.yaml``.
"""

import os
import tempfile

import torch
from torch.utils.data import DataLoader, TensorDataset

import pcs_ray.train as train
from pcs_ray.train.torch import prepare_data_loader, prepare_model


def train_func(config):
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = prepare_data_loader(DataLoader(data, batch_size=config["batch_size"], shuffle=False))
    model = prepare_model(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    start_epoch = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "model.pt"), weights_only=True)
            model.load_state_dict(state["model"])
            start_epoch = state["epoch"] + 1
    for epoch in range(start_epoch, config["epochs"]):
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if train.get_context().get_world_rank() == 0:
                torch.save({"model": model.state_dict(), "epoch": epoch}, os.path.join(d, "model.pt"))
                checkpoint = train.Checkpoint.from_directory(d)
            train.report({"loss": loss.item(), "epoch": epoch}, checkpoint=checkpoint)
