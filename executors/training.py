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
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import default_collate

from pcs_ray.contract import RunOutcome, RunRequest
from executors.emulation import StepBudget
from executors.checkpoint import capture_rng_state, load_checkpoint, remove_stale_temporaries, restore_rng_state, save_checkpoint
from workloads.device_model import emulated_step_s
from workloads.models import get_workload

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


@dataclass
class ProgressReporter:
    """Fire-and-forget, throttled progress reports to the coordinator.

    An emulated GPU's step takes its budget, and that is what a report says. On a real GPU a report says
    the wall-clock seconds per step since the previous report instead: the checkpoints, data loading and
    reports between steps are what a job's completion waits for too (on an H100, periodic checkpoints of
    a ResNet-18 alone added 8 % to its steps' own time). The first report of a run is its first step alone.
    """

    target: object
    job_id: str
    interval_s: float
    emulated: bool = False
    budget: StepBudget | None = None  # emulated steps: its overrun count travels with each report
    resolve: Callable[[], object] | None = None  # asked for the target at each report (a warm runner's run changes hands)
    _last: float = field(default=float("-inf"))
    _last_step: int | None = None
    _times: list = field(default_factory=list)

    def step_done(self, step: int, step_time_s: float) -> None:
        self._times.append(step_time_s)
        now = time.monotonic()
        target = self.resolve() if self.resolve is not None else self.target
        if target is None or now - self._last < self.interval_s:
            return
        if self.emulated or self._last_step is None or step <= self._last_step:
            mean = sum(self._times) / len(self._times)
        else:
            mean = (now - self._last) / (step - self._last_step)
        self._times.clear()
        self._last, self._last_step = now, step
        extra = {"emulated": self.emulated}
        if self.budget is not None and self.budget.overruns:  # only then: older reporters lack the keyword
            extra["overruns"] = self.budget.overruns
        try:
            target.report_progress.remote(self.job_id, step, mean, **extra)
        except Exception as exc:  # a dead coordinator must not stop training: its successor adopts the run
            log.warning("progress report for %s failed: %s", self.job_id, exc)


@dataclass
class TelemetryReporter:
    """Fire-and-forget, throttled NVML readings of one rank's GPU (``pcs_ray.telemetry.RunMeter``)."""

    target: object
    job_id: str
    attempt: int
    node: str
    index: int
    meter: object
    interval_s: float
    resolve: Callable[[], object] | None = None  # as ProgressReporter's: readings follow an adopting coordinator
    _last: float = field(default=float("-inf"))

    def step_done(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < self.interval_s:
            return
        self._last = now
        target = self.resolve() if self.resolve is not None else self.target
        send = getattr(target, "report_telemetry", None)  # None: no coordinator now, or an older one
        if send is None:
            return
        try:
            reading = self.meter.reading()
            if reading is not None:
                if final:
                    reading["final"] = True
                send.remote(self.job_id, self.attempt, self.node, self.index, reading)
        except Exception as exc:  # telemetry must never stop training
            log.warning("telemetry report for %s failed: %s", self.job_id, exc)


def telemetry_reporter(request: RunRequest, rank: int, sampler=None,
                       resolve: Callable[[], object] | None = None) -> TelemetryReporter | None:
    """This rank's GPU read through NVML, where it can be (a real GPU, the library, a reporter that takes
    telemetry); None otherwise: the coordinator then models the job's energy. ``resolve`` returns where
    readings go now (a warm runner's run adopted by a restarted coordinator), as for progress."""
    if request.reporter is None or rank >= len(request.gpus):
        return None
    try:
        request.reporter.report_telemetry  # noqa: B018 - an older reporter lacks it
    except AttributeError:
        return None
    from pcs_ray.telemetry import NVMLSampler, RunMeter

    slot = request.gpus[rank]
    meter = RunMeter(sampler if sampler is not None else NVMLSampler(), slot.index)
    if not meter.available:
        meter.sampler.close()
        return None
    return TelemetryReporter(request.reporter, request.job_id, request.attempt, slot.node, slot.index, meter,
                             request.report_interval_s, resolve)


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


def _stop_agreed(should_stop: Callable[[], bool], world_size: int, device: torch.device) -> bool:
    """Every rank stops at the same step boundary: stop if any rank was asked to."""
    flag = bool(should_stop())
    if world_size == 1:
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item() > 0)


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
    """Train ``request`` from its newest checkpoint to ``total_steps`` or until asked to stop.

    With ``world_size > 1`` the caller has initialised ``torch.distributed``;
    rank 0 writes the checkpoints. ``on_step(step)`` follows every step (and the
    restore); ``reporter`` returns where progress and telemetry go now, instead of ``request.reporter``.
    """
    timings = dict(timings or {})
    session = TrainingSession(request.workload, request.params, rank=rank, world_size=world_size)
    emulated = not session.real_gpu
    notes = [f"data: {session.data_source}"]
    budget = None
    if emulated:
        budget = StepBudget(emulated_step_s(request.workload, request.params, world_size, request.slowdown))
        notes.append(f"emulated GPUs: {budget.step_s:.4g} s per step (slowdown x{request.slowdown:g}, {world_size} GPU(s))")
    if rank == 0:
        remove_stale_temporaries(request.checkpoint_dir)  # a previous runner killed mid-write
    loaded = load_checkpoint(request.checkpoint_dir)
    if loaded is not None:
        session.restore(loaded.state)
        if loaded.fell_back:
            notes.append(f"latest checkpoint unusable, resumed from {loaded.path.name}")
    start_step = last_saved = session.step
    timings["restored"] = time.time()
    progress = ProgressReporter(request.reporter, request.job_id, request.report_interval_s, emulated, budget, reporter)
    telemetry = None if emulated else telemetry_reporter(request, rank, resolve=reporter)
    if on_step is not None:
        on_step(session.step)

    def checkpoint() -> None:
        nonlocal last_saved
        rng_states = session.rng_states()
        if rank == 0:
            save_checkpoint(request.checkpoint_dir, session.snapshot(rng_states, job_id=request.job_id))
        last_saved = session.step

    step_time = None
    stopped = False
    while session.step < request.total_steps:
        if _stop_agreed(should_stop, world_size, session.device):
            stopped = True
            break
        began = time.perf_counter()
        if budget is not None:
            budget.begin()
        session.train_step()
        step_time = budget.end() if budget is not None else time.perf_counter() - began
        timings["last_step_end"] = time.time()
        timings.setdefault("first_step", timings["last_step_end"])
        step = session.step
        if request.checkpoint_every and step % request.checkpoint_every == 0 and step < request.total_steps:
            checkpoint()
        if rank == 0:
            progress.step_done(step, step_time)
        if telemetry is not None:
            telemetry.step_done()
        if on_step is not None:
            on_step(step)

    if session.step != last_saved:
        checkpoint()
    if telemetry is not None:
        telemetry.step_done(final=True)
        telemetry.meter.sampler.close()
    if budget is not None and (budget.late_steps or budget.warmup_s):
        notes.append(budget.describe())
    timings["saved"] = time.time()
    return RunOutcome(
        job_id=request.job_id,
        status="preempted" if stopped else "finished",
        step=session.step,
        step_time_s=step_time,
        emulated=emulated,
        overruns=budget.overruns if budget is not None else 0,
        late_steps=budget.late_steps if budget is not None else 0,
        emulated_step_s=budget.step_s if budget is not None else None,
        start_step=start_step,
        gpus=tuple(request.gpus),
        notes=tuple(notes),
        timings=timings,
    )
