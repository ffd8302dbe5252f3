"""The emulated GPU: how long one optimizer step of a workload takes on a logical GPU (no torch, no Ray).

A node without real GPUs offers *logical* GPUs. Their runners share the
node's few CPU cores, so a measured step time there says how many jobs share
the machine, not how fast a GPU is. Instead every logical GPU emulates one
independent **nominal GPU**: a step takes exactly :func:`emulated_step_s`
seconds (the runner trains the real step inside that budget and waits the
rest, see ``pcs_ray.executors.emulation``), whatever else runs on the machine.

The nominal GPU (``TIME_SCALE``): a device :data:`TIME_SCALE` times slower
than one core of this 2-core machine (threads = 1) alone, with steps of at
least :data:`MIN_STEP_S`. Why 10: the demo (``pcs-ray demo``) runs up to 8
ranks at once on 2 cores. Training flat out, 8 processes make a step 8-13x
slower than alone (22x for ``tiny_cnn``, whose step is mostly fixed
overhead; measured with ``bench/device_steps.py --contended 8``, load
average 2.9 from other work before it). An emulated rank computes only
1/``TIME_SCALE`` of its budget and sleeps the rest, so 8 ranks keep
8/10 = 0.8 of the 2 cores busy: under half the machine, which leaves room
for Ray, the coordinator, DDP's all-reduce and noise, and makes the
flat-out contention above a case that emulation avoids. A slower nominal GPU
(a larger scale) would fit more safely but stretch every demo job; a run
whose real step still overruns says so (``RunOutcome.overruns``). A
data-parallel step is never shorter than one nominal GPU computing its
rank's share of the batch (:func:`rank_step_s`), so every rank keeps to
that tenth of a core at any GPU count.

Every number below carries its source: the reference step times are
measurements made here (reproduce with
``PYTHONPATH=. nice -n 10 python bench/device_steps.py --contended 8``),
the scaling curves are the published per-iteration times bundled in
``pcs_ray/data/pcs/speedup-curves.json`` (PCS artifact, from Hwang et al.'s
AFS measurements on GPUs) for the most comparable model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

from pcs_ray.workloads.catalog import CATALOG, WorkloadError

#: How many times slower the nominal emulated GPU is than one CPU core of this machine (see the module docstring).
TIME_SCALE = 10.0
#: The shortest step of the nominal GPU. Steps keep a schedule (``pcs_ray.executors.emulation``): a step the OS
#: delayed is caught up by the next ones, and only a run over one step behind its device overruns. So a
#: step must outlast the descheduling a runner sees on the 2 shared cores: a lone tiny_cnn at load 2 had
#: steps of 7 ms median and up to 66 ms (11 of 1,500 over 31 ms); in the 20-job replay at load 6-9 a
#: 31 ms budget let 2 of 1,452 steps fall over a step behind (15 late). At 50 ms a 66 ms step stays under
#: one step of lag, but the 20-job replay (2026-11-23, load 2) then showed a starved second: tiny_cnn's
#: 5 ms step took 53-86 ms for 15 steps in a row, and 17 steps fell over a step behind (the runner's
#: logged overruns; a run before it had 3, one after the DDP fix below 0). At 100 ms such a second is caught up.
MIN_STEP_S = 0.1
#: The shortest data-parallel step (two GPUs or more): its gradient all-reduce (gloo, between processes
#: on this machine's shared cores) needs every rank scheduled at once. Measured: tiny_cnn on 4 GPUs at
#: 0.018 s overran 74-155 of its 500 steps (no catch-up); at 0.05 s with catch-up, 17 of 1,670 steps in
#: the 20-job replay at load 6-9 fell over a step behind. 0.1 s gives twice that room.
MIN_DDP_STEP_S = 0.1
NOMINAL_DEVICE = (f"a nominal GPU {TIME_SCALE:g}x slower than one CPU core of the 2-core development machine "
                  f"(threads=1), steps of at least {MIN_STEP_S:g} s")


@dataclass(frozen=True)
class DeviceEntry:
    """One workload on one CPU core alone: ``fixed_s + per_sample_s * batch`` seconds per step, and its scaling curve."""

    fixed_s: float
    per_sample_s: float
    curve: str  # a model in speedup-curves.json
    source: str
    reference_seq_len: int | None = None  # per-sample cost is proportional to seq_len relative to this


# Fitted to `bench/device_steps.py` medians (threads=1, num_samples=1024) at two batch sizes, two runs
# on 2026-11-22 (load average 2.9 and 5.7 from other helpers; the lower-load run is weighted).
TABLE: dict[str, DeviceEntry] = {
    "tiny_cnn": DeviceEntry(
        0.0013, 0.000225, "ChatbotModel256",
        "measured here: 0.0031 s at batch 8, 0.0049 s at 16 (second run 0.0035, 0.0087); scaling: the flattest "
        "bundled curve (Chatbot, 1.73x at 4): a tiny model's DDP step is all fixed cost and gradient exchange"),
    "resnet18": DeviceEntry(
        0.14, 0.0025, "Resnet50Model128",
        "measured here: 0.162 s at batch 8, 0.157 s at 16 (second run, load 5.7: 0.25 at 4, 0.35 at 8, 0.32 at 16, "
        "0.41 at 32; per-sample cost from its 8->32 slope); scaling: ResNet-50, the nearest ResNet"),
    "mobilenet_v2": DeviceEntry(
        0.107, 0.0036, "GooglenetModel128",
        "measured here: 0.136 s at batch 8, 0.165 s at 16 (second run 0.147, 0.219); scaling: GoogLeNet, "
        "the nearest compute-light CNN"),
    "vgg11": DeviceEntry(
        0.237, 0.0092, "VggnetModel256",
        "measured here: 0.311 s at batch 8, 0.385 s at 16 (second run 0.371, 0.544); scaling: VGG"),
    "transformer": DeviceEntry(
        0.0256, 0.0024, "TransformerModel256",
        "measured here at seq_len 64: 0.064 s at batch 16, 0.102 s at 32 (second run 0.055, 0.122); "
        "scaling: Transformer", reference_seq_len=64),
}


def _entry(workload: str) -> DeviceEntry:
    try:
        return TABLE[workload]
    except KeyError:
        raise WorkloadError(f"no emulated-device entry for workload {workload!r}; known: {', '.join(sorted(TABLE))}") from None


@dataclass(frozen=True)
class Reference:
    """One workload shape (the workload and its params) on nominal GPUs: all it takes to time its step at
    any GPU count, so a caller that times many counts asks the model once (:func:`reference`)."""

    workload: str
    fixed_s: float  # one CPU core's fixed cost of a step
    per_sample_s: float  # one CPU core's cost of a sample, at this shape's sequence length
    batch_size: int
    speedups: tuple[float, ...]  # the scaling at 1, 2, ... GPUs: never decreasing, flat past its end

    def nominal_s(self, n_gpus: int) -> float:
        """One nominal GPU's time for its ceil(batch / n_gpus) samples of a step (no floor)."""
        return TIME_SCALE * (self.fixed_s + self.per_sample_s * math.ceil(self.batch_size / max(1, n_gpus)))

    def scaling(self, n: int) -> float:
        """The speedup at ``n`` GPUs over one (1.0 at n=1; never decreasing; flat past the curve's end)."""
        if n < 1:
            raise ValueError(f"scaling needs at least one GPU, got {n}")
        return self.speedups[min(n, len(self.speedups)) - 1]

    def step_s(self, n_gpus: int, slowdown: float = 1.0) -> float:
        """What one step takes on ``n_gpus`` of these GPUs whose placement costs ``slowdown``."""
        step = max(MIN_STEP_S, self.nominal_s(1)) / self.scaling(n_gpus)
        if n_gpus > 1:
            step = max(step, self.nominal_s(n_gpus), MIN_DDP_STEP_S)
        return step * float(slowdown)


def reference(workload: str, params: Mapping | None = None) -> Reference:
    """The record of ``workload`` with ``params`` (a :class:`WorkloadError` for a workload the model lacks
    or params it does not accept)."""
    entry = _entry(workload)
    resolved = CATALOG[workload].resolve(params)
    per_sample = entry.per_sample_s
    if entry.reference_seq_len is not None:
        per_sample *= resolved["seq_len"] / entry.reference_seq_len
    return Reference(workload, entry.fixed_s, per_sample, resolved["batch_size"], _speedups(entry.curve))


def reference_step_s(workload: str, params: Mapping | None = None) -> float:
    """Seconds per global-batch optimizer step of ``workload`` with ``params`` on ONE nominal GPU."""
    return reference(workload, params).step_s(1)


def rank_step_s(workload: str, params: Mapping | None, n_gpus: int) -> float:
    """What one nominal GPU needs for one rank's share of the global batch on ``n_gpus``: the fixed cost
    of a step plus its ceil(batch / n) samples. A data-parallel step can be no shorter: each rank is a
    nominal GPU. The scaling curves were measured at batches where that share is large; at the small
    batches jobs here use, the fixed cost dominates it (ResNet-18 at batch 8 on 4 GPUs: 1.45 s against
    the curve's 0.44 s), and a step paced by the curve alone asked each rank for a third of a core, not
    the tenth the nominal GPU stands for: eight such ranks overran the machine."""
    return reference(workload, params).nominal_s(n_gpus)


@lru_cache(maxsize=None)
def _curves() -> dict:
    from pcs_ray.workloads.demand import load_speedup_curves
    from pcs_ray.workloads.traces import default_curves_path

    return load_speedup_curves(default_curves_path())


@lru_cache(maxsize=None)
def _speedups(curve: str) -> tuple[float, ...]:
    """A bundled curve's speedups at 1 .. its last GPU count, each the best at that count or fewer."""
    demand = _curves()[curve]
    return tuple(accumulate((demand.speedup(k) for k in range(1, len(demand.iteration_times) + 1)), max))


def scaling(workload: str, n: int) -> float:
    """The speedup of ``workload`` at ``n`` GPUs over one (:meth:`Reference.scaling`)."""
    return reference(workload).scaling(n)


def emulated_step_s(workload: str, params: Mapping | None, n_gpus: int, slowdown: float = 1.0) -> float:
    """What one step takes on ``n_gpus`` emulated GPUs whose placement costs ``slowdown``."""
    return reference(workload, params).step_s(n_gpus, slowdown)


def describe() -> dict:
    """The device model as data (for reports): the nominal device and each workload's entry."""
    return {
        "nominal_device": NOMINAL_DEVICE, "time_scale": TIME_SCALE, "min_step_s": MIN_STEP_S, "min_ddp_step_s": MIN_DDP_STEP_S,
        "workloads": {name: {"reference_step_s": reference_step_s(name, None), "curve": e.curve, "source": e.source,
                             "scaling": [round(scaling(name, n), 3) for n in (1, 2, 4, 8)]}
                      for name, e in TABLE.items()},
    }
