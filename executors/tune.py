"""Ray Tune sweeps scheduled by pcs-ray: the sweep is one coordinator job, the scheduler is its executor.

::

    tuner = PCSTuner(session_trainable, param_space=..., iterations=20, client=pcs_ray.client.Client())
    print(tuner.predict()["predicted_completion"])   # at once, before any trial ran
    results = tuner.fit()

:class:`PCSTuner` wraps ``tune.Tuner`` around :class:`PCSTuneScheduler`
(``pcs_ray.executors.tune_scheduler``: how trials follow the coordinator's GPU
assignment); each trial is pinned to its GPUs before the trainable runs
(:func:`pinned`, ``pcs_ray.executors.tune_pin``: a trainable needs no pcs-ray call), and
:func:`session_trainable` trains a registered workload (``pcs_ray.executors.tune_trial``).
``client`` is any :class:`~pcs_ray.contract.CoordinatorAPI`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any

from ray.tune.schedulers import TrialScheduler

from pcs_ray.executors.tune_pin import assigned_gpu_resources, pin_trial_gpus, pinned
from pcs_ray.executors.tune_ray import NotOnClusterError, join_cluster
from pcs_ray.executors.tune_scheduler import PCSTuneScheduler, SweepLog
from pcs_ray.executors.tune_trial import session_trainable
from pcs_ray.contract import CoordinatorAPI


def count_trials(param_space: dict, num_samples: int = 1) -> int:
    """Grid points x samples, as Tune's basic variant generator expands them."""
    def grids(space) -> list[int]:
        out = []
        if isinstance(space, dict):
            if set(space) == {"grid_search"}:
                return [len(space["grid_search"])]
            for v in space.values():
                out += grids(v)
        return out

    return math.prod(grids(param_space)) * num_samples


def stop_iterations(stop) -> int | None:
    """The ``training_iteration`` a Tune ``stop`` mapping ends trials at (None: it sets none)."""
    if isinstance(stop, dict) and isinstance(stop.get("training_iteration"), (int, float)):
        return max(1, int(stop["training_iteration"]))
    return None


def tune_run_config(run_config):
    """``run_config`` as a ``tune.RunConfig``: pcs-ray's own ``pcs_ray.train.RunConfig`` (a Train script's) is
    read into one (name, storage, ``max_failures``, ``verbose``); Tune's is returned as it is."""
    from pcs_ray.train.config import RunConfig

    if not isinstance(run_config, RunConfig):
        return run_config
    from ray import tune

    return tune.RunConfig(name=run_config.name, storage_path=None if run_config.storage_path is None else
                          os.fspath(run_config.storage_path), storage_filesystem=run_config.storage_filesystem,
                          failure_config=tune.FailureConfig(max_failures=run_config.max_failures),
                          verbose=run_config.verbose if run_config.verbose is not None else 0)


def check_storage(run_config) -> None:
    """A remote ``storage_path`` (``s3://...``, or one in a ``storage_filesystem``) is written to once before the
    sweep is registered; one that cannot be raises :class:`~pcs_ray.train.config.UnsupportedOptionError`."""
    from pcs_ray.train.config import RunConfig

    path = run_config.storage_path
    if path is None or (run_config.storage_filesystem is None and "://" not in os.fspath(path)):
        return  # a local folder: Tune makes it
    RunConfig(storage_path=path, storage_filesystem=run_config.storage_filesystem).result_storage()


class PCSTuner:
    """``tune.Tuner`` whose trials pcs-ray schedules and pins; the sweep is registered (and predicted) at construction.

    It takes what ``tune.Tuner`` takes (``tune_config``, ``run_config``), so a Tune script changes only
    the line that builds its tuner: its own scheduler (ASHA, PBT, ...) runs inside pcs-ray's. Or pass
    the shortcuts (``scheduler``, ``metric``, ``mode``, ``num_samples``, ``name``, ``storage_path``,
    ``callbacks``, ``max_failures``) instead of the config objects. ``iterations`` (per trial, at most;
    by default the ``training_iteration`` of ``run_config.stop``) and ``iteration_time`` (seconds,
    estimated) are what the coordinator predicts the sweep from. A trial holds ``gpus_per_trial`` of the
    sweep's GPUs (also a trial whose trainable asks for none: Tune's default) and the CPUs its trainable
    asks for (``cpus_per_trial`` overrides).
    Every trainable is wrapped with :func:`~pcs_ray.executors.tune_pin.pinned`: a trial sees only its GPUs.

    ``storage_path`` (in ``run_config`` or as the shortcut) may be a remote URI, as in Ray Tune: with
    ``s3://bucket/prefix`` the experiment folder (``<storage_path>/<name>``: its state, each trial's
    ``result.json`` and the checkpoints its trials report with ``tune.report(..., checkpoint=...)``) is kept
    in that bucket, through ``pyarrow.fs``: the driver reads S3's endpoint, region and credentials from the
    AWS variables (``AWS_ENDPOINT_URL``, ...) and hands the trials the endpoint; each node's own AWS variables
    are the trials' credentials, as for the cluster's storage. Before the sweep is registered the driver writes
    a probe object there: a path that cannot be written is one line and no sweep holds GPUs. A
    ``pcs_ray.train.RunConfig`` is taken too (read into Tune's).
    """

    def __init__(
        self,
        trainable,
        *,
        client: CoordinatorAPI,
        iterations: int | None = None,
        param_space: dict | None = None,
        tune_config=None,
        run_config=None,
        num_samples: int = 1,
        gpus_per_trial: int = 1,
        cpus_per_trial: float | None = None,
        iteration_time: float | None = None,
        trial_startup_s: float = 5.0,
        scheduler: TrialScheduler | None = None,
        metric: str | None = None,
        mode: str | None = None,
        name: str = "pcs-sweep",
        storage_path: str | None = None,
        max_failures: int = 3,
        grace_s: float = 30.0,
        callbacks: list | None = None,
    ) -> None:
        from ray import tune

        if tune_config is not None and (scheduler is not None or metric or mode or num_samples != 1):
            raise ValueError("give scheduler, metric, mode and num_samples in tune_config or as arguments, not both")
        if run_config is not None and (storage_path or callbacks):
            raise ValueError("give storage_path and callbacks in run_config or as arguments, not both")
        tune_config = tune_config or tune.TuneConfig(scheduler=scheduler, num_samples=num_samples, metric=metric,
                                                     mode=mode)
        run_config = tune_run_config(run_config) or tune.RunConfig(
            name=name, storage_path=storage_path, verbose=0, callbacks=callbacks,
            failure_config=tune.FailureConfig(max_failures=max_failures))
        param_space = param_space or {}
        iterations = iterations or stop_iterations(run_config.stop)
        if iterations is None:
            raise ValueError("PCSTuner needs iterations=N (the most iterations a trial runs): run_config.stop "
                             "gives no training_iteration to take it from")
        self.scheduler = PCSTuneScheduler(
            client, num_trials=count_trials(param_space, tune_config.num_samples), iterations=iterations,
            gpus_per_trial=gpus_per_trial, cpus_per_trial=cpus_per_trial, iteration_time=iteration_time,
            trial_startup_s=trial_startup_s, name=run_config.name or name, inner=tune_config.scheduler, grace_s=grace_s,
        )
        check_storage(run_config)  # a storage_path that cannot be written: one line, and no sweep holds GPUs
        join_cluster()  # before the sweep exists: a driver that cannot reach Ray never holds GPUs
        self.submitted_at = time.time()
        self.scheduler.register()
        self.tuner = tune.Tuner(
            pinned(trainable),
            param_space=param_space,
            tune_config=dataclasses.replace(tune_config, scheduler=self.scheduler, reuse_actors=False),
            run_config=run_config,
        )

    @property
    def job_id(self) -> int:
        return self.scheduler.job_id

    def predict(self) -> dict:
        return self.scheduler.predict()

    def fit(self):
        """``tune.Tuner.fit``. Where it raises (a ``KeyboardInterrupt`` too), or returns with trials left (Tune
        stops on a first Ctrl-C), the sweep ends at once, ``driver-failed`` with the reason in ``status``:
        its GPUs are not held until the lease runs out. The lease still bounds a driver killed outright."""
        try:
            results = self.tuner.fit()
        except BaseException as exc:
            said = " ".join(str(exc).split())
            self.scheduler.give_up(f"its driver's fit() raised {type(exc).__name__}" + (f": {said}" if said else ""))
            raise
        self.scheduler.wind_up()
        return results


def grid(**axes: list) -> dict[str, Any]:
    """``tune.grid_search`` for each axis (the sweep's points are their product)."""
    from ray import tune

    return {k: tune.grid_search(list(v)) for k, v in axes.items()}


__all__ = [
    "NotOnClusterError", "PCSTuneScheduler", "PCSTuner", "SweepLog", "assigned_gpu_resources", "count_trials", "grid", "pin_trial_gpus",
    "pinned", "session_trainable", "stop_iterations",
]
