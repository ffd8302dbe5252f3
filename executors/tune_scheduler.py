"""The Tune scheduler that runs a sweep's trials on the GPUs the pcs-ray coordinator assigns it.

Tune has no pluggable trial executor; its extension point is a
``TrialScheduler``, so :class:`PCSTuneScheduler` is one. The sweep registers
with the coordinator as an ``executor: external`` job whose most GPUs are
trials x GPUs per trial: the policy decides how many GPUs it holds, placement
which ones. The scheduler polls that assignment and maps it onto trials: a
trial runs only on GPUs of the assignment (it holds their per-GPU custom
resources, ``num_gpus=0``, and its trainable, wrapped with
``pcs_ray.executors.tune_pin.pinned`` by ``PCSTuner`` or by whoever builds the
``tune.Tuner`` around this scheduler, sets ``CUDA_VISIBLE_DEVICES`` from them
before it runs; the scheduler warns of a trainable that is not wrapped).
Trials on GPUs taken away are paused at their next result (checkpointed;
never while saving: Tune caches the decision) or, past a grace period,
stopped hard and resumed from their last reported checkpoint. When every
trial outside the kept GPUs has stopped it acknowledges, and the coordinator
hands the GPUs on. New trials are parked (PAUSED) until admitted. An inner
scheduler (ASHA, HyperBand, PBT) keeps its decisions: its STOPs (a stopped
trial shrinks the sweep's demand so its GPUs go to other jobs), its PAUSEs,
and which waiting trial runs next, where a trial that waits only for pcs-ray's
GPUs looks to it as the PENDING trial it would be under plain Tune. A trial
keeps the CPUs its trainable asks for (Tune's default: 1); a trial that asks
for no GPU still runs on a GPU of the sweep (the sweep's share of the
cluster is counted in GPUs); one that asks for more than ``gpus_per_trial``
is refused with one line. Progress (iterations x
measured time per iteration) flows back so predictions use real speeds.
The driver holds the sweep's GPUs on a lease it renews from a thread of its own
(``pcs_ray.executors.tune_lease``): a driver that dies loses them within the
coordinator's lease; one whose ``fit`` raises gives them back at once (:meth:`PCSTuneScheduler.give_up`). A sweep the coordinator ended (its lease lapsed, its time
limit, a cancel) stops the experiment, with the reason in the driver's log.

The coordinator is whatever :class:`~pcs_ray.contract.CoordinatorAPI` is
passed in (``pcs_ray.client.Client`` through Ray, or an in-process one); this
module knows nothing else of it.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from pcs_ray.executors.tune_lease import LeaseKeeper, LockedCalls
from pcs_ray.executors.tune_pin import PinnedTrainable
from pcs_ray.contract import CoordinatorAPI, JobStatus

logger = logging.getLogger(__name__)
ENDED = (Trial.TERMINATED, Trial.ERROR)


@dataclass
class _Placed:
    trial: Trial
    gpus: tuple[str, ...]
    evict_at: float | None = None  # set when its GPUs were taken away


@dataclass
class SweepLog:
    """What happened, for tests and benches: per trial, its GPU sets and its reported iterations."""

    placements: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    iterations: dict[str, list[int]] = field(default_factory=dict)
    pauses: list[tuple[float, str]] = field(default_factory=list)
    hard_stops: int = 0
    acks: int = 0
    stopped_early: list[str] = field(default_factory=list)
    startups: list[float] = field(default_factory=list)  # seconds from a first start to its first result, less the iteration
    resumes: list[float] = field(default_factory=list)  # the same for restarts from a checkpoint


class PCSTuneScheduler(TrialScheduler):
    """A Tune scheduler that runs a sweep's trials on the GPUs the pcs-ray coordinator assigns it."""

    def __init__(
        self,
        coordinator: CoordinatorAPI,
        *,
        num_trials: int,
        iterations: int,
        gpus_per_trial: int = 1,
        cpus_per_trial: float | None = None,
        iteration_time: float | None = None,
        trial_startup_s: float = 5.0,
        name: str = "tune-sweep",
        workload: str = "tune",
        job_class: str = "A",
        inner: TrialScheduler | None = None,
        grace_s: float = 30.0,
        poll_s: float = 0.2,
        report_s: float = 1.0,
    ) -> None:
        if num_trials < 1 or iterations < 1 or gpus_per_trial < 1:
            raise ValueError("a sweep needs num_trials, iterations and gpus_per_trial >= 1")
        self.coordinator = LockedCalls(coordinator)  # shared with the lease's thread
        self.lease: LeaseKeeper | None = None
        self.num_trials, self.iterations, self.gpt, self.cpus = num_trials, iterations, gpus_per_trial, cpus_per_trial
        self.iteration_time = iteration_time
        self.trial_startup_s = trial_startup_s  # actor start + restore, per trial start: estimate, then measured
        self.spec = {
            "workload": workload, "name": name, "class": job_class, "executor": "external",
            "steps": num_trials * iterations, "gpus": num_trials * gpus_per_trial, "min_gpus": gpus_per_trial,
        }
        if iteration_time:
            self.spec["step_time"] = self._gpu_seconds_per_iteration(iteration_time)
        self.inner = inner or FIFOScheduler()
        self.grace_s, self.poll_s, self.report_s = grace_s, poll_s, report_s
        self.job_id: int | None = None
        self.first_prediction: dict | None = None
        self.first_prediction_s: float | None = None  # submit -> first prediction, seconds
        self.placed: dict[str, _Placed] = {}
        self.launching: set[str] = set()
        self.order: list[Trial] = []
        self.done_iters: dict[str, int] = {}
        self.stopped: set[str] = set()  # STOP decided (inner scheduler or budget reached)
        self.held: set[str] = set()  # paused by pcs-ray (parked, or its GPUs taken), not by the inner scheduler
        self.cpus_of: dict[str, float] = {}  # what each trial's trainable asks for
        self.log = SweepLog()
        self._assignment: dict | None = None
        self._polled = -math.inf
        self._reported = -math.inf
        self._iter_time: float | None = None
        self._chosen_at: dict[str, float] = {}
        self._acked = 0
        self._finished = False
        self._demand = (self.spec["gpus"], self.spec["steps"])

    def __getstate__(self) -> dict:
        # Tune pickles its config for experiment restore; the live link to the coordinator stays here.
        return {**self.__dict__, "coordinator": None, "lease": None}

    # -- the job -----------------------------------------------------------------
    def register(self) -> dict:
        """Submit the sweep as one job; returns its first prediction (absolute times)."""
        if self.job_id is None:
            began = time.monotonic()
            handle = self.coordinator.submit(self.spec)
            self.job_id = handle.id
            self.lease = LeaseKeeper(self.coordinator, self.job_id)
            self.lease.renew()  # learns the lease's length
            self.lease.start()
            self.first_prediction = self.predict()
            self.first_prediction_s = time.monotonic() - began
        return self.first_prediction

    def predict(self) -> dict:
        """The sweep's current predicted completion and WFQ bound (``pcs-ray predict ID`` says the same)."""
        return self.coordinator.predict(self.job_id)

    def steps_done(self) -> int:
        return sum(self.done_iters.values())

    @property
    def ended(self) -> bool:
        """Whether the sweep has ended for the coordinator: its trials finished, or it was ended or given up."""
        return self._finished

    def give_up(self, reason: str) -> None:
        """End the sweep now, for good (``external_failed``): its driver runs no more of it (``PCSTuner.fit``
        raised or was interrupted). Where the coordinator cannot be reached, the lease ends it instead."""
        if self._finished or self.job_id is None:
            return
        self._finished = True
        if self.lease is not None:
            self.lease.stop()
        try:
            self.coordinator.external_failed(self.job_id, reason)
        except Exception as exc:  # the driver's own error is what its user must see
            logger.warning("could not end sweep %s at once (%s); its lease ends it", self.job_id, exc)

    # -- Tune's hooks ------------------------------------------------------------
    def set_search_properties(self, metric, mode, **spec) -> bool:
        return self.inner.set_search_properties(metric, mode, **spec)

    def on_trial_add(self, tune_controller, trial: Trial) -> None:
        self.register()
        if not self.order:
            self._check_pinned(trial)
        self.inner.on_trial_add(tune_controller, trial)
        if any(t is trial for t in self.order):
            return  # a failed trial Tune requeues (PENDING): it restarts on its own GPUs from its checkpoint
        self.cpus_of[trial.trial_id] = self._own_cpus(trial)
        if trial.status == Trial.PENDING:
            trial.set_status(Trial.PAUSED)  # parked: Tune would start every PENDING trial by itself
            self.held.add(trial.trial_id)
        self.order.append(trial)

    def _own_cpus(self, trial: Trial) -> float:
        """The CPUs the trial's trainable asks for; refuses a trial that asks for more GPUs than the sweep gives one."""
        factory = getattr(trial, "placement_group_factory", None)
        asked = factory.required_resources if factory is not None else {}
        if math.ceil(asked.get("GPU", 0)) > self.gpt:
            raise ValueError(f"trial {trial.trial_id} asks for {asked['GPU']:g} GPUs, the sweep gives each trial "
                             f"{self.gpt}: give PCSTuner(gpus_per_trial={math.ceil(asked['GPU'])})")
        return self.cpus if self.cpus is not None else float(asked.get("CPU", 1.0))

    def on_trial_result(self, tune_controller, trial: Trial, result: dict) -> str:
        tid = trial.trial_id
        it = int(result.get("training_iteration", 0))
        self._count(tid, it)
        # A trainable's own iteration time, where it reports one: Tune's time_this_iter_s of a
        # restored function trainable also holds its set-up and restore.
        took = result.get("iter_s") or result.get("time_this_iter_s")
        if took:
            self._iter_time = took if self._iter_time is None else 0.8 * self._iter_time + 0.2 * took
            chosen = self._chosen_at.pop(tid, None)
            if chosen is not None:  # first result of this start: the rest was start-up and restore
                startup = max(0.0, time.monotonic() - chosen - took)
                (self.log.resumes if len(self.log.placements.get(tid, ())) > 1 else self.log.startups).append(startup)
                self.trial_startup_s = 0.5 * self.trial_startup_s + 0.5 * startup
        decision = self.inner.on_trial_result(tune_controller, trial, result)
        self._report_progress()
        if decision == TrialScheduler.STOP or it >= self.iterations:
            if it < self.iterations:
                self.log.stopped_early.append(tid)
            self.stopped.add(tid)
            self._update_demand()
            return TrialScheduler.STOP
        self._sync(tune_controller)
        p = self.placed.get(tid)
        if p is not None and p.evict_at is not None:
            self.log.pauses.append((time.time(), tid))
            self.held.add(tid)
            return TrialScheduler.PAUSE
        return decision

    def on_trial_complete(self, tune_controller, trial: Trial, result: dict) -> None:
        it = int((result or {}).get("training_iteration", 0))
        if it and self.log.iterations.get(trial.trial_id, [None])[-1] != it:
            self._count(trial.trial_id, it)  # a result that meets a stop criterion (RunConfig.stop) comes only here
        self.inner.on_trial_complete(tune_controller, trial, result)
        self._trial_ended(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial: Trial) -> None:
        # Called before a retry as well as on the final failure: the trial's status tells later (_sync).
        self.inner.on_trial_error(tune_controller, trial)

    def on_trial_remove(self, tune_controller, trial: Trial) -> None:
        self.inner.on_trial_remove(tune_controller, trial)
        self._trial_ended(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller) -> Trial | None:
        self._sync(tune_controller)
        for tid in list(self.launching):  # idempotent: the trial chosen before, until Tune stages it
            p = self.placed.get(tid)
            if p is not None and p.trial.status == Trial.PAUSED:
                return p.trial
            self.launching.discard(tid)
        a = self._assignment
        if a is None or a["state"] != JobStatus.RUNNING:
            return None
        used = {g for p in self.placed.values() for g in p.gpus}
        free = [g for g in a["gpus"] if g not in used]
        if len(free) < self.gpt:
            return None
        trial = self._next_trial(tune_controller)
        if trial is None:
            return None
        gpus = tuple(free[: self.gpt])
        trial.update_resources({"CPU": self.cpus_of.get(trial.trial_id, self.cpus or 1.0), "GPU": 0, **{g: 1 for g in gpus}})
        self.held.discard(trial.trial_id)
        self.placed[trial.trial_id] = _Placed(trial, gpus)
        self.launching.add(trial.trial_id)
        self._chosen_at[trial.trial_id] = time.monotonic()
        self.log.placements.setdefault(trial.trial_id, []).append(gpus)
        return trial

    def debug_string(self) -> str:
        a = self._assignment or {}
        return f"pcs-ray sweep {self.job_id}: {a.get('state')} on {a.get('gpus')}; {len(self.placed)} trials placed"

    @staticmethod
    def _check_pinned(trial: Trial) -> None:
        cls = trial.get_trainable_cls() if hasattr(trial, "get_trainable_cls") else None
        if cls is not None and not issubclass(cls, PinnedTrainable):
            logger.warning("%s is not wrapped in pcs_ray.executors.tune.pinned(): its trials see every GPU of their node "
                           "unless it calls pin_trial_gpus() itself (PCSTuner wraps it)", getattr(cls, "__name__", cls))

    def _count(self, tid: str, it: int) -> None:
        self.log.iterations.setdefault(tid, []).append(it)
        self.done_iters[tid] = min(it, self.iterations)

    # -- keeping trials on the assignment ----------------------------------------
    def _next_trial(self, tc) -> Trial | None:
        """The waiting trial the inner scheduler would run next, if any.

        A trial pcs-ray holds (parked, or paused when its GPUs were taken) is one the inner scheduler
        would have running or PENDING: it sees it PENDING while it chooses. A trial the inner scheduler
        paused itself (HyperBand at a milestone, PBT between perturbations) runs when it says so.
        """
        held = [t for t in self.order if t.status == Trial.PAUSED and t.trial_id in self.held
                and t.trial_id not in self.placed and t.trial_id not in self.stopped]
        for t in held:
            t.status = Trial.PENDING
        try:
            chosen = self.inner.choose_trial_to_run(tc)
        finally:
            for t in held:
                t.status = Trial.PAUSED
        if chosen is None or chosen.status != Trial.PAUSED or chosen.trial_id in self.placed or (
                chosen.trial_id in self.stopped):
            return None
        return chosen

    def _poll(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.job_id is not None and (force or now - self._polled >= self.poll_s):
            self._assignment = self.coordinator.assignment(self.job_id)
            self._polled = now

    def _sync(self, tc) -> None:
        self._poll()
        a = self._assignment
        if a is None:
            return
        if JobStatus(a["state"]).done:
            self._ended_by_coordinator(tc, a)
            return
        if a["state"] == JobStatus.RUNNING:
            allowed = set(a["gpus"])
        elif a["state"] == JobStatus.STOPPING:
            allowed = set(a["gpus"]) & set(a["target"])
        else:
            allowed = set()
        now = time.monotonic()
        for tid, p in list(self.placed.items()):
            status = p.trial.status
            if status in ENDED or (status == Trial.PAUSED and tid not in self.launching):
                del self.placed[tid]  # its actor is stopping: the GPUs go back to the sweep
            elif not set(p.gpus) <= allowed:
                if status == Trial.PAUSED:  # chosen but not yet staged: simply not started
                    del self.placed[tid]
                    self.launching.discard(tid)
                    self.held.add(tid)
                elif p.evict_at is None:
                    # A trial that has not reported since it started has nothing newer to save: stop it now.
                    p.evict_at = now if tid in self._chosen_at else now + self.grace_s
                if p.evict_at is not None and now >= p.evict_at and status == Trial.RUNNING and not p.trial.is_saving:
                    # Past the grace period: stop now, resume from the last reported checkpoint.
                    tc.pause_trial(p.trial, should_checkpoint=False)
                    self.held.add(tid)
                    self._chosen_at.pop(tid, None)
                    self.log.hard_stops += 1
                    p.evict_at = math.inf
        if any(t.status == Trial.ERROR and t.trial_id not in self.stopped for t in self.order):
            for t in self.order:
                if t.status == Trial.ERROR and t.trial_id not in self.stopped:
                    self._trial_ended(tc, t)  # failed for good (retries spent)
            return  # the assignment may have changed: the next step looks again
        if a["state"] == JobStatus.STOPPING and a["attempt"] != self._acked and all(
            set(p.gpus) <= allowed for p in self.placed.values()
        ):
            self._acked = a["attempt"]
            self.log.acks += 1
            self._assignment = self.coordinator.external_ended(
                self.job_id, a["attempt"], "preempted", self.steps_done(), self._step_time(a))
            self._polled = time.monotonic()

    def _ended_by_coordinator(self, tc, a: dict) -> None:
        """The coordinator ended the sweep while trials remain: stop the experiment, saying why."""
        if self._finished:
            return
        self._finished = True
        if self.lease is not None:
            self.lease.stop()
        job = next((j for j in self.coordinator.status()["jobs"] if j["id"] == self.job_id), {})
        why = (job.get("end_reason") or {}).get("text") or job.get("error") or "no reason given"
        logger.error("pcs-ray ended sweep %s (%s): %s; stopping its trials", self.job_id, a["state"], why)
        tc.request_stop_experiment()

    def _trial_ended(self, tc, trial: Trial) -> None:
        self.stopped.add(trial.trial_id)
        self.placed.pop(trial.trial_id, None)
        self.launching.discard(trial.trial_id)
        if self._finished:
            return
        if len(self.order) >= self.num_trials and all(t.status in ENDED or t.trial_id in self.stopped for t in self.order):
            self._end_finished()
            return
        self._update_demand()

    def _end_finished(self) -> None:
        self._finished = True
        if self.lease is not None:
            self.lease.stop()
        self._poll(force=True)
        a = self._assignment
        if JobStatus(a["state"]).holds_gpus:
            self.coordinator.external_ended(self.job_id, a["attempt"], "finished", self.steps_done(), self._step_time(a))
        else:
            self.coordinator.cancel(self.job_id)

    def wind_up(self) -> None:
        """The driver's Tune run returned: end the sweep now if it has not ended. Finished where every trial
        it saw ended (Tune made fewer than it counted), else given up (a first Ctrl-C stops Tune with trials
        left: :meth:`give_up`)."""
        if self._finished or self.job_id is None:
            return
        if self.order and all(t.trial_id in self.stopped for t in self.order):
            self._end_finished()
        else:
            self.give_up("its driver's Tune run returned with trials unfinished (interrupted, or stopped)")

    def _update_demand(self) -> None:
        live = self.num_trials - len(self.stopped)
        if live <= 0:
            return
        steps = self.steps_done() + sum(
            self.iterations - self.done_iters.get(t.trial_id, 0) for t in self.order if t.trial_id not in self.stopped
        ) + self.iterations * max(0, self.num_trials - len(self.order))
        demand = (live * self.gpt, max(1, steps))
        if demand != self._demand:
            self._demand = demand
            self._assignment = self.coordinator.set_demand(self.job_id, gpus=demand[0], steps=demand[1])
            self._polled = time.monotonic()

    def _gpu_seconds_per_iteration(self, iteration_time: float) -> float:
        """One trial iteration's GPU-seconds, each trial's start-up spread over its iterations."""
        return (iteration_time + self.trial_startup_s / self.iterations) * self.gpt

    def _step_time(self, a: dict | None) -> float | None:
        """Seconds per sweep step on its GPUs, so that x GPUs = GPU-seconds per trial iteration."""
        if self._iter_time is None or not a or not a.get("gpus"):
            return None
        return self._gpu_seconds_per_iteration(self._iter_time) / len(a["gpus"])

    def _report_progress(self) -> None:
        now = time.monotonic()
        if self.job_id is None or now - self._reported < self.report_s:
            return
        self._reported = now
        self.coordinator.report_progress(self.job_id, self.steps_done(), self._step_time(self._assignment))
