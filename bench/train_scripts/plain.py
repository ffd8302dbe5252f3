"""A plain Ray Train loop (``prepare_model``, ``prepare_data_loader``, a checkpoint per epoch), written once and
run under Ray Train or pcs-ray by ``config["framework"]``: the two differ in their import lines only."""

import importlib
import os
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def modules(framework: str):
    """``(train, train.torch)`` of ``ray`` or ``pcs_ray``: what a ported script's imports give it."""
    return importlib.import_module(f"{framework}.train"), importlib.import_module(f"{framework}.train.torch")


def train_func(config):
    began = time.perf_counter()  # the loop's own time, beside fit()'s: what each framework adds around it
    train, train_torch = modules(config["framework"])
    torch.manual_seed(0)
    x = torch.randn(config["samples"], 32)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = train_torch.prepare_data_loader(DataLoader(data, batch_size=16, shuffle=True))
    model = train_torch.prepare_model(torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(),
                                                          torch.nn.Linear(256, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(config["epochs"]):
        if train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with tempfile.TemporaryDirectory() as d:
            torch.save(getattr(model, "module", model).state_dict(), os.path.join(d, "model.pt"))
            train.report({"loss": loss.item(), "epoch": epoch, "threads": torch.get_num_threads(),
                          "loop_s": time.perf_counter() - began},
                         checkpoint=train.Checkpoint.from_directory(d))
