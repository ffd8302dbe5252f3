"""How fast jobs run and what a (re)start costs: priors at submission, refined by what runners measure.

Predictions are only as good as this model: everything the live
system pays must be in it, and every forecast charges it. It keeps

* **step times per workload shape and GPU count**: seconds per step on ``n``
  GPUs at slowdown 1 (a measured step time divided by its GPUs' slowdown),
  for the shape of the job (its workload and the parameters that change a
  step's cost: batch size, sequence length ...). Unmeasured counts follow
  from a measured one through the device model's step times of that shape
  (its scaling, floored by a rank's share of the batch: the record
  ``pcs_ray.workloads.device_model.reference``, read once per shape), or
  linearly for a workload the model lacks; an unmeasured shape starts from the
  device model's reference time, corrected by what other shapes of the same
  workload measured, else from the job's own ``step_time`` estimate (scaled
  by ``estimate_ratio``: users' guesses tend to be off in one direction),
  else ``default_step_time``. User code (a ``user:`` label, shaped by its
  ``config``) has no device model: its own ``step_time`` is taken as given,
  else a prior from earlier user jobs; its scaling is the declared one
  (linear when none) until two GPU counts are measured, then fitted to them
  (:meth:`SpeedModel._user_step_s`);
* **costs per workload**: a first start (launch to first step), a resume
  (the same plus the checkpoint restore) and a stop (request to checkpoint
  written and GPUs free). Every forecast charges them: a queued job pays its
  start when the play gives it GPUs, and every move the play makes (a
  preemption, a migration, a resize) pays stop + resume
  (``Engine.set_costs``). Starts and resumes are kept apart by the runners
  that paid them: a warm runner (the pool) costs a message and a checkpoint
  restore, a cold one a process and a torch import. A forecast charges the
  mix the pool offers (``warm_share``: the share of GPUs with a warm runner;
  a memory-bounded pool starts the rest cold). Other jobs follow a cost once
  its mean moved past ``COST_TOLERANCE`` (re-syncing them all is O(jobs));
* the spread of each measurement, for prediction ranges, and which inputs
  are still estimates.

What it learned is replayed from the journal and also kept in the state
folder (``speeds.json``, :meth:`to_dict`), so a new coordinator (or one
seeded by ``pcs-ray calibrate``) starts from it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pcs_ray.contract import JobStatus
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.jobs.jobfile import USER_PREFIX, JobFile

if TYPE_CHECKING:
    from pcs_ray.workloads.device_model import Reference

#: Work (fraction of one step) left in a job the model thinks is done but its runner has not reported:
#: only the runner says when a job has finished.
SLIVER = 0.05
#: A running job's progress since its last report is counted, at its pace, for at most this many seconds
#: or two of its steps: reports come every second or every step (``RunRequest.report_interval_s``; a sweep's
#: with its trials' results). One silent longer (a sweep whose trials wait or restart, a slow checkpoint)
#: is forecast from where it last reported, its finish moving later, instead of done by the clock alone.
EXTRAPOLATE_S = 2.0
EMA = 0.3  # weight of a new measurement
SAMPLES = 32  # measurements kept per key for the spread
#: Parameters that do not change what a step costs: jobs differing only in them share step times.
NOT_SPEED = frozenset({"seed", "lr", "momentum", "weight_decay", "data_root", "num_samples", "optimizer"})
#: Keys of a user function's ``config`` left out of its shape: those above, and how long or how often it does things.
USER_NOT_SPEED = NOT_SPEED | {"checkpoint_every", "steps", "epochs", "log_every"}
#: Where a step time that is not measured comes from, as ``estimated`` names it.
STEP_SOURCES = {"estimate": "declared", "prior": "prior", "default": "default", "reference": "device model",
                "workload": "other shapes", "scaled": "other GPU counts"}
#: The range of a prediction whose step time is still an estimate (no run of its shape measured yet).
UNMEASURED_SPREAD = (0.6, 1.6)
# A new sample moves a cost's mean a little at every start and stop; re-syncing every job's forecast for that
# costs O(jobs) (16 ms at 1,000 queued). Other jobs follow a cost once it moved this much since they last did,
# and the estimate ratio (jobs known only by their declared step time) once it moved by ESTIMATE_TOLERANCE
# (a job's guess can be off by any factor, so the ratio's EMA jumps at every new job's first report).
COST_TOLERANCE = (0.05, 0.25)  # relative, and seconds: whichever is larger
ESTIMATE_TOLERANCE = 0.05
#: Job shapes whose step times are kept, the most recently measured: a sweep gives each trial's config its
#: own shape, and every forecast of a new shape and every save of ``speeds.json`` walks them all.
SHAPES_KEPT = 1000


def shape_key(workload: str, params: Mapping | None, ignore: frozenset = NOT_SPEED) -> str:
    """What identifies a job's step cost: its workload and the parameters that change it."""
    kept = {k: v for k, v in sorted((params or {}).items()) if k not in ignore}
    return workload + (json.dumps(kept, sort_keys=True, separators=(",", ":")) if kept else "")


def spec_shape(spec: JobFile) -> str:
    """A job's shape: a built-in by its ``params``; user code by its ``config`` (a batch size or a model
    width there changes a step as much as a built-in's params do; which keys do is unknown, so all
    but :data:`USER_NOT_SPEED` count)."""
    if spec.user_code:
        return shape_key(spec.workload, spec.config, USER_NOT_SPEED)
    return shape_key(spec.workload, spec.params)


def is_user(workload: str) -> bool:
    return workload.startswith(USER_PREFIX)


def declared_scaling(spec: JobFile, n: int) -> float:
    """The speedup at ``n`` GPUs the job file declares (``scaling``), relative to one GPU; linear when
    it declares none. A curve shorter than ``n`` stays flat past its end."""
    declared = spec.scaling
    if declared == "none":
        return 1.0
    if isinstance(declared, list):
        return declared[min(n, len(declared)) - 1] / declared[0]
    return float(n)


def fit_counts(by_n: Mapping[int, "Stat"]) -> tuple[float, float]:
    """``(a, b)`` of ``t(n) = a + b / n`` (Amdahl: a serial part and a part split over the GPUs), least
    squares over the measured counts (two or more); neither part negative."""
    xs = [1.0 / n for n in by_n]
    ys = [stat.mean for stat in by_n.values()]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    if b < 0:  # slower on more GPUs than on fewer: a flat fit
        return my, 0.0
    if a < 0:  # better than linear: linear through the measured points
        return 0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    return a, b


@dataclass
class Stat:
    """A mean (exponentially weighted, or of the kept measurements) and the recent measurements (for the spread)."""

    mean: float
    samples: list[float] = field(default_factory=list)
    provisional: bool = False  # from a run's first step only: the next real measurement replaces it

    def add(self, x: float, windowed: bool = False) -> None:
        """``windowed``: the mean of the kept measurements instead, for a quantity that does not drift but
        whose measurements are noisy (a real GPU's step rate between 1-s reports varied by 19 % on an H100;
        the EMA followed that noise into every forecast)."""
        self.samples = (self.samples + [x])[-SAMPLES:]
        if windowed:
            self.mean = sum(self.samples) / len(self.samples)
        else:
            self.mean = x if len(self.samples) == 1 else (1 - EMA) * self.mean + EMA * x

    def ratio(self, q: float) -> float:
        """The ``q`` quantile of the measurements over their mean (1.0 with fewer than two)."""
        if len(self.samples) < 2 or self.mean <= 0:
            return 1.0
        xs = sorted(self.samples)
        pos = q * (len(xs) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return (xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)) / self.mean

    def to_dict(self) -> dict:
        return {"mean": self.mean, "samples": self.samples, **({"provisional": True} if self.provisional else {})}

    @classmethod
    def from_dict(cls, raw: dict) -> "Stat":
        return cls(float(raw["mean"]), [float(x) for x in raw.get("samples", [])], bool(raw.get("provisional", False)))


def _linear(n: int) -> float:
    """A step's time on ``n`` GPUs at linear scaling, relative to one GPU's: for a workload the device model lacks."""
    return 1.0 / float(n)


def _device_model():
    """``pcs_ray.workloads.device_model`` (torch-free), imported on first use."""
    from pcs_ray.workloads import device_model

    return device_model


class SpeedModel:
    """Step times, start/stop costs and scaling; see the module docstring."""

    def __init__(self, default_step_time: float = 1.0, restart_overhead: float = 3.0) -> None:
        self.default_step_time = default_step_time
        self.default_cost = restart_overhead  # a start's cost before any was measured
        self.steps: dict[str, dict[int, Stat]] = {}  # shape -> GPU count -> seconds per step at slowdown 1
        # workload -> "start" | "resume" (cold runners) | "warm_start" | "warm_resume" | "stop" -> seconds
        self.costs: dict[str, dict[str, Stat]] = {}
        self.warm_share = 0.0  # the share of GPUs with a warm runner (set by a host with a pool): future starts' kind
        self.estimate_ratio = 1.0
        self.version = 0  # bumped whenever an estimate other jobs use moves (see COST_TOLERANCE)
        self._followed: dict[tuple, float] = {}  # (kind of estimate, key) -> its value when other jobs last followed it
        self._cache: dict = {}
        self._cache_version = -1
        self._speedups: dict[tuple, tuple[float, ...]] = {}
        self._speedups_version = -1
        self._estimated = False  # whether a step time in the cache came from the estimate ratio
        self._warming: set[int] = set()  # jobs whose latest report is their run's first step alone
        self._references: dict[str, Reference | None] = {}  # shape -> the device model's record of it

    # -- priors --------------------------------------------------------------------
    def _reference(self, shape: str) -> Reference | None:
        """The device model's record of a built-in workload's shape (None: a workload it lacks), asked once
        per shape: a forecast times every GPU count of every job, and the record holds them all."""
        if shape not in self._references:
            if len(self._references) >= SHAPES_KEPT:  # bounded as the step times are; a dropped shape is asked again
                self._references.clear()
            workload, _, params = shape.partition("{")
            try:
                found = _device_model().reference(workload, json.loads("{" + params) if params else {})
            except (KeyError, ValueError):
                found = None
            self._references[shape] = found
        return self._references[shape]

    def step_s(self, spec: JobFile, n: int) -> tuple[float, str]:
        """Seconds per step of the job on ``n`` GPUs at slowdown 1, and where the figure comes from:
        ``measured`` (this shape on ``n`` GPUs), ``scaled`` (this shape on other counts, through the
        declared scaling), ``workload`` (other shapes of the workload), ``estimate`` (the job's own
        ``step_time``), ``reference`` (the device model) or ``default``."""
        n = max(1, n)
        declared = spec.scaling if spec.user_code else None
        key = (spec_shape(spec), n, spec.step_time, tuple(declared) if isinstance(declared, list) else declared)
        if self._cache_version != self.version:
            self._cache, self._cache_version, self._estimated = {}, self.version, False
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._step_s(spec, n, key[0])
            self._estimated = self._estimated or (hit[1] == "estimate" and not spec.user_code)
        return hit

    def _step_s(self, spec: JobFile, n: int, shape: str) -> tuple[float, str]:
        if spec.user_code:
            return self._user_step_s(spec, n, shape)
        device = self._reference(shape)
        at = device.step_s if device is not None else _linear
        by_n = self.steps.get(shape)
        if by_n:
            if n in by_n:
                return by_n[n].mean, "measured"
            m = min(by_n, key=lambda k: (abs(k - n), k))
            return by_n[m].mean * at(n) / at(m), "scaled"
        if device is not None:
            per_ref = self._workload_ratio(spec.workload)
            if per_ref is not None:
                return at(n) * per_ref, "workload"
        if spec.step_time:
            # the device model's step times carry a one-GPU figure to n GPUs (a rank's share of the batch included)
            return spec.step_time * self.estimate_ratio * (at(n) / at(1)), "estimate"
        if device is not None:
            return at(n), "reference"
        return self.default_step_time / float(n), "default"

    def _user_step_s(self, spec: JobFile, n: int, shape: str) -> tuple[float, str]:
        """:meth:`step_s` of code the device model does not know. Measured counts of its shape stand;
        other counts follow them: through the fit :func:`fit_counts` once two counts are measured, else
        through the declared scaling (linear when none). An unmeasured shape starts from the job's own
        ``step_time``, taken as given: a guess at code this cluster never ran shares no bias with other
        users' guesses at theirs, so no ratio learned from them corrects it, and the first report
        replaces it. Without one it starts from :meth:`user_prior`."""
        by_n = self.steps.get(shape)
        if by_n:
            if n in by_n:
                return by_n[n].mean, "measured"
            if len(by_n) >= 2:
                a, b = fit_counts(by_n)
                return a + b / n, "scaled"
            (m, stat), = by_n.items()
            return stat.mean * declared_scaling(spec, m) / declared_scaling(spec, n), "scaled"
        if spec.step_time:
            return spec.step_time / declared_scaling(spec, n), "estimate"
        prior = self.user_prior(spec.workload)
        if prior is not None:
            return prior / declared_scaling(spec, n), "prior"
        return self.default_step_time / declared_scaling(spec, n), "default"

    def user_prior(self, workload: str) -> float | None:
        """One-GPU seconds per step for user code not measured yet: the median over the shapes of earlier
        user jobs (one figure per shape, so a long job does not outweigh a short one), those of the
        same code (``workload``: its entrypoint) when any ran; None before any user job reported past
        its first step (a run's first step alone is its warm-up: on a loaded CPU a 1.5 ms step's first
        took 1.5 s)."""
        same, other = [], []
        for key, by_n in self.steps.items():
            settled = {n: stat for n, stat in by_n.items() if not stat.provisional}
            if is_user(key) and settled:
                (same if key.partition("{")[0] == workload else other).append(self._one_gpu(settled))
        figures = same or other
        if not figures:
            return None
        figures.sort()
        mid = len(figures) // 2
        return figures[mid] if len(figures) % 2 else (figures[mid - 1] + figures[mid]) / 2

    @staticmethod
    def _one_gpu(by_n: Mapping[int, Stat]) -> float:
        """A measured shape's step time on one GPU: measured, else fitted, else its one count's at linear scaling."""
        if 1 in by_n:
            return by_n[1].mean
        if len(by_n) >= 2:
            a, b = fit_counts(by_n)
            return a + b
        (m, stat), = by_n.items()
        return stat.mean * m

    def _workload_ratio(self, workload: str) -> float | None:
        """Measured over device-model step time across the workload's measured shapes (None: none measured)."""
        ratios = [stat.mean / ref for key, n, stat, ref in self._measured_refs(workload) if ref]
        return None if not ratios else sum(ratios) / len(ratios)

    def _measured_refs(self, workload: str):
        for key, by_n in self.steps.items():
            if key.partition("{")[0] != workload:
                continue
            device = self._reference(key)
            for n, stat in by_n.items():
                yield key, n, stat, None if device is None else device.step_s(n)

    # -- what the engine gets --------------------------------------------------------
    def estimate(self, spec: JobFile) -> float:
        """``t1`` of a new job: seconds per step on one nominal GPU (see :meth:`step_s`)."""
        return self.step_s(spec, 1)[0]

    def speedup(self, spec: JobFile) -> tuple[float, ...]:
        """Throughput on ``n`` GPUs relative to one, ``n`` = 0..most: measured or declared (sub-linear) scaling."""
        declared = spec.scaling if spec.user_code else None
        key = (spec_shape(spec), spec.gpus, spec.step_time, tuple(declared) if isinstance(declared, list) else declared)
        if self._speedups_version != self.version:
            self._speedups, self._speedups_version = {}, self.version
        table = self._speedups.get(key)
        if table is None:  # one per shape and width: a replay of 100,000 queued jobs asks it of each
            t1 = self.step_s(spec, 1)[0]
            table = self._speedups[key] = (0.0,) + tuple(t1 / self.step_s(spec, n)[0] for n in range(1, spec.gpus + 1))
        return table

    def cost(self, workload: str, kind: str) -> float:
        """Seconds a ``start``, ``resume`` or ``stop`` of the workload costs (``warm_start``, ``warm_resume``: on
        warm runners): measured, else the mean over workloads, else (warm) the cold cost, else the default (a stop: 0)."""
        stat = self.costs.get(workload, {}).get(kind)
        if stat is not None:
            return stat.mean
        others = [c[kind].mean for w, c in self.costs.items() if kind in c and is_user(w) == is_user(workload)]
        others = others or [c[kind].mean for c in self.costs.values() if kind in c]
        if others:
            return sum(others) / len(others)
        if kind.startswith("warm_"):
            return self.cost(workload, kind[len("warm_"):])
        if kind == "resume" and "start" in self.costs.get(workload, {}):
            return self.costs[workload]["start"].mean
        return 0.0 if kind == "stop" else self.default_cost

    def set_warm_share(self, share: float) -> None:
        """How many of the GPUs keep a warm runner (0..1): a forecast's future starts cost that mix of warm and cold."""
        share = min(1.0, max(0.0, float(share)))
        if share != self.warm_share:
            self.warm_share = share
            self.version += 1

    def _share(self, workload: str) -> float:
        """The share of the workload's future starts on warm runners: user code never enters them (its
        runs start in processes of their own, pre-started or not: one kind of cost, learned per entrypoint)."""
        return 0.0 if is_user(workload) else self.warm_share

    def _expected(self, workload: str, kind: str) -> float:
        """A future ``start`` or ``resume``: warm on the pool's share of GPUs, cold on the rest."""
        share = self._share(workload)
        warm = self.cost(workload, "warm_" + kind) if share > 0 else 0.0
        cold = self.cost(workload, kind) if share < 1 else 0.0
        return share * warm + (1 - share) * cold

    def _kinds(self, job: LiveJob) -> tuple[str, ...]:
        """The cost kinds a forecast of ``job`` charges."""
        base = ("start", "resume") if job.first_start is None else ("resume",)
        share = self._share(job.spec.workload)
        kinds = tuple(("warm_" + k) for k in base if share > 0) + (base if share < 1 else ())
        return kinds + ("stop",)

    @staticmethod
    def _run_kind(job: LiveJob) -> str:
        """What the job's current run pays: a first start or a resume, on warm or cold runners."""
        kind = "start" if job.start_step == 0 and job.preemptions == 0 and job.attempt <= 1 else "resume"
        return ("warm_" + kind) if job.runner == "warm" else kind

    def _run_cost(self, job: LiveJob) -> float:
        """What the job's current run costs before its first step; a run decided but not launched yet (its
        runners unknown: the submission's own forecast is made then) costs the pool's mix, as a future start."""
        if job.runner is None:
            return self._expected(job.spec.workload, self._run_kind(job))
        return self.cost(job.spec.workload, self._run_kind(job))

    def job_costs(self, job: LiveJob) -> tuple[float, float]:
        """(first start, every later move) for the engine: a move is a stop plus a resume."""
        workload = job.spec.workload
        start = self._expected(workload, "start") if job.first_start is None else 0.0
        return start, self.cost(workload, "stop") + self._expected(workload, "resume")

    def remaining(self, job: LiveJob, now: float, speedup: tuple[float, ...] | None = None) -> float:
        """GPU-seconds at one nominal GPU still to do, from the runner's last report.

        A running job that has reported is measured on its own GPUs: its work is expressed through
        ``speedup`` (the table its model was admitted with), so the forecast of its current run is
        exactly its measured pace (since its last report, for at most ``EXTRAPOLATE_S`` or two steps);
        any other job's through the current estimate of ``t1``.
        """
        steps_left = job.total_steps() - job.steps
        n = min(len(job.gpus), job.spec.gpus)
        if job.state == JobStatus.RUNNING and job.reported_at is not None and job.step_time and n:
            pace = self._pace(job, n)
            steps_left -= min(now - job.reported_at, max(EXTRAPOLATE_S, 2 * pace)) / pace
            table = speedup if speedup is not None else self.speedup(job.spec)
            t1 = pace / job.slowdown * table[n]
        else:
            t1 = self.estimate(job.spec)
        return max(steps_left, SLIVER) * t1

    def _pace(self, job: LiveJob, n: int) -> float:
        """The running job's seconds per step: its latest report, unless that is its run's first step
        alone (warm-up: a user loop's 4 ms step's first took 1.5 s, and the forecast spread it over all
        its steps) and its shape has settled on ``n`` GPUs before. A user loop's is its run's own pace over
        its recent reports (:meth:`LiveJob.run_pace`): its steps are uneven (an evaluation every so many,
        checkpoints, a data loader), and one report's second sees a varying share of the slow ones (a
        small CNN's 1-s reports ranged from 0.012 to 0.024 s a step)."""
        if job.spec.user_code and (pace := job.run_pace()) is not None:
            return pace
        if job.job_id in self._warming:
            stat = self.steps.get(spec_shape(job.spec), {}).get(n)
            if stat is not None and not stat.provisional:
                return stat.mean * job.slowdown
        return job.step_time

    def stall_until(self, job: LiveJob, now: float) -> float:
        """When a running job can next make progress: one that has not reported yet is still starting up.
        A queued job pays its start when the forecast gives it GPUs (``job_costs``), not here."""
        if job.state == JobStatus.RUNNING and job.reported_at is None and job.started_at is not None:
            return job.started_at + self._run_cost(job)
        return 0.0

    @property
    def restart_overhead(self) -> float:
        """The mean resume cost over measured workloads, on the pool's mix of runners (what ``status`` shows)."""
        return self._expected("", "resume")

    # -- what a prediction says about itself --------------------------------------------
    def estimates(self, job: LiveJob) -> list[str]:
        """The inputs of the job's forecast that are still estimates, not measurements."""
        return list(self.estimated(job))

    def estimated(self, job: LiveJob) -> dict[str, str]:
        """:meth:`estimates` with where each comes from: a step time ``declared`` (the job's
        ``step_time``), ``prior`` (earlier user jobs), ``default``, ``device model``, ``other shapes``
        or ``other GPU counts``; a scaling ``declared``, ``assumed linear`` or ``device model``;
        start/stop costs ``other workloads`` or ``default``. An input leaves once measured: the step
        time at the job's first report, the scaling once its shape ran on two GPU counts."""
        out = {}
        spec = job.spec
        n = len(job.gpus) or spec.gpus
        source = self.step_s(spec, n)[1]
        if not job.measured and source != "measured":
            out["step_time"] = STEP_SOURCES.get(source, source)
        if len(self.steps.get(spec_shape(spec), {})) < 2 and spec.gpus > 1:
            out["scaling"] = self._scaling_source(spec)
        missing = [k for k in self._kinds(job) if k not in self.costs.get(spec.workload, {})]
        if missing:
            elsewhere = any(k in by_kind for by_kind in self.costs.values() for k in missing)
            out["start_stop_costs"] = "other workloads" if elsewhere else "default"
        return out

    def _scaling_source(self, spec: JobFile) -> str:
        if spec.user_code:
            return "declared" if spec.scaling is not None else "assumed linear"
        return "device model" if self._reference(spec_shape(spec)) is not None else "assumed linear"

    def spread(self, job: LiveJob) -> tuple[float, float]:
        """(p10, p90) of the job's step time over its mean: the measured spread of its shape, else wide."""
        by_n = self.steps.get(spec_shape(job.spec))
        if not by_n:
            return UNMEASURED_SPREAD
        n = len(job.gpus) or job.spec.gpus
        stat = by_n.get(n) or by_n[min(by_n, key=lambda k: abs(k - n))]
        return min(stat.ratio(0.1), 1.0), max(stat.ratio(0.9), 1.0)

    # -- measurements ----------------------------------------------------------------
    def observe_start_up(self, job: LiveJob, t: float, step: int, step_time: float) -> None:
        """The first report of a run: the time since its launch not spent on its steps was its start."""
        cost = max(0.0, t - job.started_at - max(1, step - job.start_step) * step_time)
        self._add_cost(job.spec.workload, self._run_kind(job), cost)

    def observe_stop(self, job: LiveJob, seconds: float) -> None:
        """A stop request took ``seconds`` until the run ended (checkpoint written, GPUs free)."""
        self._add_cost(job.spec.workload, "stop", max(0.0, seconds))

    def _add_cost(self, workload: str, kind: str, seconds: float) -> None:
        by_kind = self.costs.setdefault(workload, {})
        if kind in by_kind:
            by_kind[kind].add(seconds)
        else:
            by_kind[kind] = Stat(seconds, [seconds])
        rel, floor = COST_TOLERANCE
        if self._moved(("cost", workload, kind), by_kind[kind].mean, rel, floor):
            self.version += 1

    def _moved(self, key: tuple, value: float, rel: float, floor: float = 0.0) -> bool:
        """Whether ``value`` moved from what other jobs last followed under ``key`` by more than
        ``rel`` of it (``floor`` at least); if so, it is what they follow now."""
        before = self._followed.get(key)
        if before is not None and abs(value - before) <= max(rel * abs(before), floor):
            return False
        self._followed[key] = value
        return True

    def observe_step_time(self, job: LiveJob, step_time: float, first_of_run: bool = False) -> bool:
        """A measured step time on the job's GPUs (a run's first report: ``first_of_run``); True when
        it moved the estimates of other jobs (then their forecasts must be re-synced)."""
        n = min(len(job.gpus), job.spec.gpus)
        normalised = step_time / job.slowdown
        (self._warming.add if first_of_run else self._warming.discard)(job.job_id)
        by_n = self._measured_shape(spec_shape(job.spec))
        new = n not in by_n or by_n[n].provisional
        if new:
            # A run's first report is its first step alone (warm-up, lazy initialisation): it stands in
            # only until a later report of some run says what a step takes.
            by_n[n] = Stat(normalised, [normalised], provisional=first_of_run)
        elif not first_of_run:
            by_n[n].add(normalised, windowed=True)
        t1 = normalised * self.speedup(job.spec)[n]
        ratio_moved = False
        if not job.measured and job.spec.step_time and not job.spec.user_code:  # see _user_step_s
            self.estimate_ratio = (1 - EMA) * self.estimate_ratio + EMA * (t1 / job.spec.step_time)
            # Only jobs known by their declared step time alone follow the ratio: where none is, it moves freely.
            ratio_moved = self._estimated and self._moved(("estimate_ratio",), self.estimate_ratio, ESTIMATE_TOLERANCE)
        job.t1, job.measured = t1, True
        if new or ratio_moved:
            self.version += 1
            return True
        return False

    def _measured_shape(self, shape: str) -> dict[int, Stat]:
        """The shape's step times, now the most recently measured; past ``SHAPES_KEPT`` the least recently
        measured shape is forgotten (its jobs then fall back as an unmeasured shape's do)."""
        by_n = self.steps.pop(shape, {})
        self.steps[shape] = by_n
        self._keep_shapes()
        return by_n

    def _keep_shapes(self) -> None:
        if len(self.steps) > SHAPES_KEPT:
            for shape in list(self.steps)[:len(self.steps) - SHAPES_KEPT]:
                del self.steps[shape]
            self.version += 1  # the estimates of jobs of those shapes move

    def forget_job(self, job_id: int) -> None:
        """A job retention forgot (``pcs_ray.coordinator.retention``)."""
        self._warming.discard(job_id)

    def learned(self, workload: str, t1: float) -> None:
        """A journaled 1-GPU measurement of an older coordinator (``measured`` events)."""
        self.steps.setdefault(workload, {}).setdefault(1, Stat(t1, [t1]))

    # -- persistence ---------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "version": 1,
            "steps": {k: {str(n): s.to_dict() for n, s in by_n.items()} for k, by_n in self.steps.items()},
            "costs": {w: {k: s.to_dict() for k, s in by_kind.items()} for w, by_kind in self.costs.items()},
            "estimate_ratio": self.estimate_ratio,
        }

    def merge(self, raw: Mapping) -> None:
        """Add what another coordinator (or ``pcs-ray calibrate``) learned, where this one knows nothing yet."""
        for key, by_n in raw.get("steps", {}).items():
            mine = self.steps.setdefault(key, {})
            for n, stat in by_n.items():
                mine.setdefault(int(n), Stat.from_dict(stat))
        self._keep_shapes()
        for workload, by_kind in raw.get("costs", {}).items():
            mine = self.costs.setdefault(workload, {})
            for kind, stat in by_kind.items():
                mine.setdefault(kind, Stat.from_dict(stat))
        self.version += 1

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` atomically (0600)."""
        path = Path(path)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f)
        os.replace(tmp, path)

    def load(self, path: str | Path) -> bool:
        """Merge a saved model; False when there is none (or it cannot be read: then it is ignored)."""
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(raw, dict):
            return False
        try:
            self.merge(raw)
        except (KeyError, TypeError, ValueError):
            return False
        return True
