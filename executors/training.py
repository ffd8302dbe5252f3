"""One rank's deterministic, preemptible training loop.

Determinism is what makes preemption free: a seeded CPU job that is stopped,
checkpointed and resumed (on any GPUs) ends with weights bitwise identical to
the same job run without interruption. That needs

- the sample order to be a function of (seed, position) only: epoch ``e`` is
  ``randperm(N)`` seeded by ``(seed, e)`` and the position (samples consumed)
  is checkpointed;
- every RNG the step may draw from (torch, CUDA, NumPy, Python) saved and
  restored, per rank;
- a fixed CPU thread count (``threads`` parameter) and deterministic kernels.

Data parallelism: the global batch (``batch_size``) is split into contiguous
shards, one per rank, and each rank's loss is ``sum(losses) * world / batch``
so DDP's gradient average is the global-batch mean for any world size.

What a changed world size guarantees: the same samples in the same order,
the same global batch, the same number of optimizer steps and no lost or
repeated step. It does not guarantee bitwise-equal weights: float sums
reassociate differently across shards, BatchNorm statistics are per shard,
and rank ``r``'s RNG state is restored only if rank ``r`` existed before
(new ranks are seeded from ``(seed, rank, step)``). With an unchanged world
size (any GPUs) the result is bitwise identical on CPU.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import default_collate

from pcs_ray.executors.progress import ProgressReporter, TelemetryReporter, telemetry_reporter  # noqa: F401  (re-exported)
from pcs_ray.contract import RunOutcome, RunRequest
from pcs_ray.executors.checkpoint import capture_rng_state, load_checkpoint, restore_rng_state, save_checkpoint
from pcs_ray.workloads.models import get_workload

log = logging.getLogger(__name__)


class DataStream:
    """The global sample order: seeded per-epoch permutations, positioned by samples consumed."""

    def __init__(self, size: int, seed: int, samples_seen: int = 0):
        if size <= 0:
            raise ValueError("dataset is empty")
        self.size, self.seed, self.samples_seen = size, seed, samples_seen
        self._epoch, self._perm = -1, None

    def _permutation(self, epoch: int) -> torch.Tensor:
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.size, generator=generator)
        return self._perm

    def next_batch(self, batch_size: int) -> list[int]:
        """The next ``batch_size`` global sample indices (crossing epochs as needed)."""
        out = []
        for k in range(self.samples_seen, self.samples_seen + batch_size):
            out.append(int(self._permutation(k // self.size)[k % self.size]))
        self.samples_seen += batch_size
        return out

    def state(self) -> dict:
        return {"samples_seen": self.samples_seen, "epoch": self.samples_seen // self.size, "offset": self.samples_seen % self.size}


def shard(indices: list[int], rank: int, world_size: int) -> list[int]:
    """Rank ``rank``'s contiguous share of a global batch (sizes differ by at most one)."""
    bounds = np.linspace(0, len(indices), world_size + 1).round().astype(int)
    return indices[bounds[rank] : bounds[rank + 1]]


def uses_real_gpu() -> bool:
    """True when this process sees a CUDA device (then nothing is emulated)."""
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def _build_optimizer(params: dict, model: torch.nn.Module) -> torch.optim.Optimizer:
    if params["optimizer"] == "adam":
        return torch.optim.Adam(model.parameters(), lr=params["lr"], weight_decay=params["weight_decay"])
    return torch.optim.SGD(model.parameters(), lr=params["lr"], momentum=params["momentum"], weight_decay=params["weight_decay"])


def _seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


#: cuBLAS reads it when a process creates its first handle: deterministic GEMMs need it set before then.
CUBLAS_WORKSPACE = ":4096:8"


def warm_cuda() -> None:
    """Create this process's CUDA context and its cuBLAS and cuDNN handles now, before any run needs them.

    A warm runner calls it while idle, so that the first job it takes does not pay for them (on an
    H100 the first run of a fresh runner took seconds longer than the next ones). Only constant tensors:
    no random number generator moves. Without a CUDA device it does nothing.
    """
    if not uses_real_gpu():
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    x = torch.ones(2, 3, 8, 8, device=device, requires_grad=True)
    y = F.conv2d(x, torch.ones(4, 3, 3, 3, device=device)).flatten(1)
    (y @ torch.ones(y.shape[1], 2, device=device)).sum().backward()
    torch.cuda.synchronize(device)


def _configure_determinism(threads: int, real_gpu: bool) -> None:
    torch.set_num_threads(max(1, int(threads)))
    if real_gpu:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)


class TrainingSession:
    """One rank's model, optimizer, data position and RNG: build, restore, step, snapshot.

    The runner loop below and the Ray Tune trainable of ``bench/live_overhead.py``
    both drive this class, so they train the very same way.
    """

    def __init__(self, workload_name: str, params: dict | None, *, rank: int = 0, world_size: int = 1):
        self.workload_name, self.rank, self.world_size = workload_name, rank, world_size
        workload = get_workload(workload_name)
        self.params = workload.resolve(params)
        self.real_gpu = uses_real_gpu()
        self.device = torch.device("cuda", 0) if self.real_gpu else torch.device("cpu")
        if self.real_gpu:
            torch.cuda.set_device(self.device)
        _configure_determinism(self.params["threads"], self.real_gpu)
        self.seed = int(self.params["seed"])
        _seed_everything(self.seed)
        self.model = workload.build_model(self.params).to(self.device)
        self.optimizer = _build_optimizer(self.params, self.model)
        self.dataset = workload.build_dataset(self.params)
        self.stream = DataStream(len(self.dataset), self.seed)
        self.batch_size = int(self.params["batch_size"])
        self.step = 0
        # Each rank draws its own dropout masks; the model init above was common to all ranks.
        _seed_everything(self.seed + rank)
        self.net = self.model
        if world_size > 1:
            self.net = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=[0] if self.real_gpu else None)
        self.net.train()

    @property
    def data_source(self) -> str:
        return getattr(self.dataset, "source", type(self.dataset).__name__)

    def restore(self, state: dict) -> None:
        """Continue from a checkpoint ``state`` (see :meth:`snapshot`)."""
        if state.get("workload") != self.workload_name:
            raise ValueError(f"checkpoint is for workload {state.get('workload')!r}, not {self.workload_name!r}")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.stream.samples_seen = int(state["data"]["samples_seen"])
        self.step = int(state["step"])
        rng = state["rng"]
        if self.rank < len(rng):
            restore_rng_state(rng[self.rank])
        else:  # a rank that did not exist before: seeded from where it joins
            _seed_everything(self.seed * 7919 + self.rank * 104729 + self.step)

    def train_step(self) -> None:
        """One optimizer step on this rank's shard of the next global batch."""
        indices = shard(self.stream.next_batch(self.batch_size), self.rank, self.world_size)
        inputs, targets = default_collate([self.dataset[i] for i in indices])
        inputs, targets = inputs.to(self.device), targets.to(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.net(inputs), targets, reduction="sum") * (self.world_size / self.batch_size)
        loss.backward()
        self.optimizer.step()
        if self.real_gpu:
            torch.cuda.synchronize(self.device)
        self.step += 1

    def rng_states(self) -> list:
        """Every rank's RNG states (a collective when distributed)."""
        mine = capture_rng_state()
        if self.world_size == 1:
            return [mine]
        gathered: list = [None] * self.world_size
        dist.all_gather_object(gathered, mine)
        return gathered

    def snapshot(self, rng_states: list, **extra) -> dict:
        """The checkpoint payload: model, optimizer, RNG states of every rank, data position, step."""
        return {
            **extra,
            "workload": self.workload_name,
            "step": self.step,
            "world_size": self.world_size,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": rng_states,
            "data": self.stream.state(),
        }


def builtin_loop(config: dict) -> None:
    """A built-in workload's training, written against the contract any user's loop is (its session:
    what ``pcs_ray.train``'s functions call), so built-ins and user code share one training path.

    ``config``: ``workload``, its ``params`` and ``checkpoint_every``. Checkpoints are this module's
    verified files (``pcs_ray.executors.checkpoint``) inside the folders the contract commits; a damaged
    newest one falls back to the one before it.
    """
    import pcs_ray.train.session as train_session

    run = train_session.current()
    ctx = run.context
    session = TrainingSession(config["workload"], config.get("params"), rank=ctx.world_rank, world_size=ctx.world_size)
    run.notes.append(f"data: {session.data_source}")
    loaded = load_checkpoint(run.checkpoint_dir) if run.checkpoint_dir else None
    if loaded is not None:
        session.restore(loaded.state)
        if loaded.fell_back:
            run.notes.append(f"latest checkpoint unusable, resumed from {loaded.path.parent.name}/{loaded.path.name}")
    run.last_checkpoint_step = last_saved = run.step = session.step
    run.timings["start_step"] = session.step  # a damaged newest checkpoint: the one before it
    run.timings["restored"] = time.time()
    every = int(config.get("checkpoint_every") or 0)

    def checkpoint() -> None:
        nonlocal last_saved
        rng_states = session.rng_states()  # a collective: every rank
        folder = None
        if ctx.world_rank == 0:
            folder = run.staging_dir()
            save_checkpoint(folder, session.snapshot(rng_states, job_id=ctx.job_id))
        last_saved = session.step
        run.report({}, session.step, folder)

    while session.step < ctx.total_steps:
        if run.should_checkpoint():
            if session.step == last_saved:
                run.report({}, session.step)  # nothing new to keep: the run ends here
            checkpoint()
        run.step_begins()
        session.train_step()
        if every and session.step % every == 0 and session.step < ctx.total_steps:
            checkpoint()
        else:
            run.report({}, session.step)
    if session.step != last_saved:
        checkpoint()


def run_training(
    request: RunRequest,
    should_stop: Callable[[], bool] = lambda: False,
    *,
    rank: int = 0,
    world_size: int = 1,
    timings: dict[str, float] | None = None,
    on_step: Callable[[int], None] | None = None,
    reporter: Callable[[], object] | None = None,
) -> RunOutcome:
    """Train ``request`` (a built-in workload) from its newest checkpoint to ``total_steps`` or until asked to stop.

    The same path as the user's own code (``pcs_ray.executors.user_run.run_rank`` calling :func:`builtin_loop`).
    With ``world_size > 1`` the caller has initialised ``torch.distributed``. ``on_step(step)`` follows
    every step (and the restore); ``reporter`` returns where progress and telemetry go now, instead of
    ``request.reporter``.
    """
    from pcs_ray.executors.user_run import run_rank

    return run_rank(request, should_stop, rank, world_size, None, dict(timings or {}), on_step=on_step,
                    reporter=reporter, distributed=False)
