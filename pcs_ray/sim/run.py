"""Running a trace through the engine: arrivals in order, decisions, forward plays at each arrival.

``simulate`` is what the CLI, the solver and the benches call; with ``workers > 1`` it spreads the
forward plays over processes that each replay the (cheap, deterministic) schedule themselves.
"""

from __future__ import annotations

import math
import multiprocessing
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from pcs_ray.forecast.chain import PlayChain
from pcs_ray.jobs.spec import JobSpec
from pcs_ray.policies.base import SchedulingPolicy
from pcs_ray.sim.engine import Engine, JobRecord, SimResult
from pcs_ray.sim.forecast_fold import FoldedForecasts, apply_forecasts

INF = math.inf


def simulate(
    jobs: Sequence[JobSpec],
    capacity: int,
    policy: SchedulingPolicy,
    *,
    predict: bool = True,
    overhead: float = 0.0,
    placement=None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
    energy=None,
    incremental: bool = True,
    observers: Sequence = (),
) -> SimResult:
    """Replay ``jobs`` through ``policy`` on ``capacity`` GPUs.

    With ``predict``, every arrival plays the current state forward (same
    policy, no future arrivals) and refreshes every active job's predicted
    finish; predictions run on a fork and never change the schedule.

    ``workers > 1`` spreads the forward plays over that many processes. Each
    process replays the whole (cheap, deterministic) schedule itself and plays
    forward only every ``workers``-th arrival, so nothing but the forecasts
    crosses a process boundary and the result is identical to ``workers=1``.
    With a placement, the other processes place on copies of it and this one on
    ``placement`` itself, so its log and explanations cover the whole schedule,
    as in one process. Progress is then reported only at the end.

    ``energy`` (a ``pcs_ray.power.meter.EnergyMeter``) integrates system power
    over the schedule; its summary lands in ``result.extra["energy"]``.

    ``observers``: objects whose ``observe(t, running_jobs)`` sees the allocation after every decision
    (as ``energy`` does), e.g. a per-tenant ledger of GPUs held.

    ``incremental=False`` plays every forecast on a full fork (the reference the incremental
    plays are tested against); forecasts are the same either way.
    """
    started = time.perf_counter()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    arrivals = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
    ids = [j.job_id for j in arrivals]
    if len(set(ids)) != len(ids):
        raise ValueError("job ids must be unique")
    for spec in arrivals:
        if spec.min_gpus > capacity:
            raise ValueError(f"job {spec.job_id} needs at least {spec.min_gpus} GPUs; the cluster has {capacity}")
    workers = min(workers, len(arrivals)) if predict else 1
    if workers > 1 and (energy is not None or observers):
        raise ValueError("energy accounting and observers run in one process: use workers=1")
    if workers > 1:
        result = _simulate_parallel(arrivals, capacity, policy, overhead, placement, workers, incremental)
        if progress is not None:
            progress(len(arrivals), len(arrivals))
    else:
        meters = [m for m in (energy, *observers) if m is not None]
        result, forecasts = _replay(arrivals, capacity, policy, overhead, placement, (0, 1) if predict else None, progress,
                                    meters, incremental)
        apply_forecasts(result, forecasts)
        if energy is not None:
            result.extra["energy"] = energy.summary(len(arrivals))
    result.wall_s = time.perf_counter() - started
    return result


def _replay(
    arrivals: list[JobSpec],
    capacity: int,
    policy: SchedulingPolicy,
    overhead: float,
    placement,
    plays: tuple[int, int] | None,
    progress: Callable[[int, int], None] | None = None,
    meters: Sequence = (),
    incremental: bool = True,
) -> tuple[SimResult, list[dict[int, float]]]:
    """The schedule itself; forward plays for arrivals ``k`` with ``k % n == r`` where ``plays == (r, n)``.

    Returns the result and the forecasts in arrival order; with ``plays == (0, 1)`` they are already folded
    into the records (the list comes back empty).
    """
    engine = Engine(capacity, policy, overhead=overhead, placement=placement, incremental=incremental)
    records = {
        s.job_id: JobRecord(s.job_id, s.submit_time, s.service, s.max_gpus, s.min_runtime) for s in arrivals
    }
    area_at_submit: dict[int, float] = {}
    timeline: list[tuple[float, int]] = []
    # Serially every play is folded into the records as it completes; shares of a parallel run return theirs.
    serial = plays == (0, 1)
    forecasts = FoldedForecasts(records) if serial else []
    i, total = 0, len(arrivals)
    finished = 0
    # Successive plays share their past where the policy allows it (every arrival played, in one process).
    form = policy.queue_form()
    chain = (
        PlayChain(form) if incremental and placement is None and serial and form is not None
        and not policy.round_s else None
    )
    while i < total or engine.active:
        t = engine.next_event(arrivals[i].submit_time if i < total else INF)
        done = engine.advance(t)
        for job in done:
            rec = records[job.spec.job_id]
            rec.finish = t
            rec.start = job.start_time
            rec.preemptions = job.preemptions
            life = t - rec.submit
            rec.avg_active = (engine.area - area_at_submit.pop(job.spec.job_id)) / life if life > 0 else 1.0
        engine.remove(done)
        finished += len(done)
        arrived = []  # (arrival index, job)
        before = engine.prev_alloc
        while i < total and arrivals[i].submit_time <= t:
            job = engine.admit(arrivals[i])
            area_at_submit[job.spec.job_id] = engine.area
            arrived.append((i, job))
            i += 1
            if not policy.round_s:
                # One submission at a time, as users submit: simultaneous arrivals each get their
                # own prediction, made before the next one lands. In rounds (Blox) every arrival
                # of the round is admitted before the one decision, and they share a forecast.
                break
        engine.reallocate()
        for meter in meters:
            meter.observe(t, engine.running.values())
        if not timeline or timeline[-1][1] != engine.busy:
            timeline.append((t, engine.busy))
        if arrived and plays is not None:
            forecast = None
            for k, job in arrived:
                snap = engine.snapshot()
                reads = policy.bound_reads(snap, job)
                if reads is None:
                    engine.settle_all()
                else:
                    engine.settle_each(reads)
                records[job.spec.job_id].bound = policy.completion_bound(snap, job)
                if chain is not None:
                    chain.play(engine, job, not done and engine.prev_alloc == before, forecasts)
                elif k % plays[1] == plays[0]:
                    if forecast is None:
                        # Serially every forecast is folded at once, in turn: a final one need bring only changes.
                        forecast = engine.play_ahead_changes() if serial and incremental else engine.play_ahead()
                    forecasts.append(forecast)
        if progress is not None and (done or arrived):
            progress(finished, total)
    if chain is not None:
        chain.finish(forecasts)
    result = SimResult(
        policy=policy.describe(),
        capacity=capacity,
        records=[records[s.job_id] for s in arrivals],
        utilization_timeline=timeline,
        events=engine.events,
        predictions=len(forecasts) if isinstance(forecasts, FoldedForecasts) else 0,
    )
    return result, forecasts if isinstance(forecasts, list) else []


def _replay_share(setup: bytes, plays: tuple[int, int]) -> tuple[SimResult | None, list[dict[int, float]]]:
    """Another process's share: ``_replay_plays`` of the pickled setup."""
    arrivals, capacity, policy, overhead, placement, incremental = pickle.loads(setup)
    return _replay_plays(arrivals, capacity, policy, overhead, placement, plays, incremental)


def _replay_plays(arrivals, capacity, policy, overhead, placement, plays, incremental):
    """The schedule and the forward plays of share ``plays``; the result only for share 0, which carries it."""
    result, forecasts = _replay(arrivals, capacity, policy, overhead, placement, plays, None, (), incremental)
    return (result if plays[0] == 0 else None), forecasts


def _start_method() -> str:
    """fork when this process has a single thread (starts in milliseconds instead of re-importing
    everything); spawn otherwise, since fork would copy other threads' locks (Ray, a progress bar) mid-state."""
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "spawn"


def _simulate_parallel(arrivals, capacity, policy, overhead, placement, workers: int, incremental: bool) -> SimResult:
    ctx = multiprocessing.get_context(_start_method())
    # Pickled here, before share 0 starts: the pool pickles its calls in a thread of its own, which would
    # otherwise read the policy and the placement while share 0 changes them.
    setup = pickle.dumps((arrivals, capacity, policy, overhead, placement, incremental))
    # This process takes share 0 itself while the others run: one process fewer to start and
    # no result to ship back for the share that carries the schedule.
    with ProcessPoolExecutor(max_workers=workers - 1, mp_context=ctx) as pool:
        others = [pool.submit(_replay_share, setup, (r, workers)) for r in range(1, workers)]
        shares = [_replay_plays(arrivals, capacity, policy, overhead, placement, (0, workers), incremental)]
        shares += [f.result() for f in others]
    result = shares[0][0]
    # Process r played arrivals r, r + workers, ...: arrival k is its (k // workers)-th forecast.
    total = sum(len(forecasts) for _, forecasts in shares)
    apply_forecasts(result, [shares[k % workers][1][k // workers] for k in range(total)])
    return result
