"""A plain PyTorch training loop written against pcs-ray's contract (one GPU or several, DDP).

Run it on pcs-ray with ``pcs-ray submit examples/user-code/mlp.yaml`` (a job file naming
``train_mlp.py:train_loop``), or try it here as a plain script: ``python train_mlp.py``.

What pcs-ray asks of a loop: start from ``get_checkpoint()`` when there is one, report progress
with ``report(metrics, step=...)`` in the job's own units, and when ``should_checkpoint()`` says so,
report a checkpoint (the run ends there and resumes from it, on whatever GPUs come next).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

import pcs_ray.train as train


def make_data(n: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 1, generator=g)
    return x, (x @ w + 0.1 * torch.randn(n, 1, generator=g))


def train_loop(config: dict) -> None:
    ctx = train.get_context()
    torch.manual_seed(config.get("seed", 0))
    dim, batch = config.get("dim", 32), config.get("batch_size", 64)
    model = torch.nn.Sequential(torch.nn.Linear(dim, config.get("hidden", 128)), torch.nn.ReLU(),
                                torch.nn.Linear(config.get("hidden", 128), 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.get("lr", 0.01))
    x, y = make_data(config.get("samples", 4096), dim, config.get("seed", 0))
    step = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        state = torch.load(os.path.join(checkpoint, "state.pt"), weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        print(f"rank {ctx.world_rank}: resumed at step {step} on {ctx.world_size} GPU(s)", flush=True)
    model = train.prepare_model(model)
    device = torch.device(ctx.device)
    every = config.get("checkpoint_every", 0)
    total = ctx.total_steps or config.get("steps", 100)  # the job file's steps; a plain run's own
    while step < total:
        # The global batch for this step, the same on every rank whatever the world size; each rank takes its share.
        rows = torch.arange(step * batch, (step + 1) * batch) % len(x)
        mine = rows[ctx.world_rank::ctx.world_size]
        loss = F.mse_loss(model(x[mine].to(device)), y[mine].to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if train.should_checkpoint() or (every and step % every == 0) or step == total:
            folder = None
            if ctx.world_rank == 0:  # one rank writes it; every rank reports at this step
                folder = train.checkpoint_dir()
                inner = model.module if hasattr(model, "module") else model
                torch.save({"model": inner.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                           os.path.join(folder, "state.pt"))
            train.report({"loss": loss.item()}, step=step, checkpoint=folder)
        else:
            train.report({"loss": loss.item()}, step=step)
    print(f"rank {ctx.world_rank}: done at step {step}, loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":  # a plain run, outside pcs-ray: the local stand-in answers
    train_loop({"lr": 0.05, "steps": 50})
