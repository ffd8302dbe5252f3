"""``TorchTrainer``: Ray Train's driver under its names, submitting the same job a :class:`Trainer` does.

::

    from pcs_ray.train import RunConfig, ScalingConfig, FailureConfig
    from pcs_ray.train.torch import TorchTrainer

    trainer = TorchTrainer(train_func, train_loop_config={"lr": 0.01},
                           scaling_config=ScalingConfig(num_workers=(1, 4)),          # elastic: 1 to 4 GPUs
                           run_config=RunConfig(name="mlp", failure_config=FailureConfig(max_failures=2)),
                           steps=400, job_class="B")                                  # pcs-ray's own, beside Ray's
    handle = trainer.submit()       # at once: job_id, predicted_completion, bound (trainer.predict() refreshes it)
    result = trainer.fit()          # blocks: result.metrics, result.checkpoint, result.metrics_dataframe

``RunConfig(storage_path="s3://bucket/runs", name="mlp")`` (or ``storage_filesystem=``, as in Ray Train) keeps
the result in ``s3://bucket/runs/mlp`` (``Result.path``, its ``result.json``), checked by a probe object before
the job is submitted; ``Result.checkpoint`` is the job's newest checkpoint where the cluster keeps it: a URI in
the cluster's storage (``pcs-ray start --storage``), whose ``to_directory()`` downloads it, or without one a
folder of the cluster's ``STATE_DIR`` (said once, as a warning). A local ``storage_path`` also gets a copy
of the checkpoint.

``datasets={"train": ds, ...}`` with ``dataset_config=DataConfig(datasets_to_split=...)`` (default: all split)
are written once at submission where every node reads them and deleted when ``fit()`` sees the job end; each
rank reads ``train.get_dataset_shard(name)`` (``pcs_ray.train.datasets``).

Ray's options that mean nothing here are refused with one line
(:class:`~pcs_ray.train.config.UnsupportedOptionError`) saying what to do instead.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pcs_ray.train.config import CheckpointConfig, RunConfig, ScalingConfig, TorchConfig, refuse
from pcs_ray.train.result import Result
from pcs_ray.train.trainer import Trainer, TrainingFailedError

REFUSED = {
    "resume_from_checkpoint": "a pcs-ray job resumes from its own checkpoints; to start from another one, pass its "
                              "folder in train_loop_config and load it in the training function",
    "metadata": "pcs-ray keeps no checkpoint metadata; put what you need in the checkpoint's folder",
}


def torch_spec_of(torch_config: Any) -> dict | None:
    """The job spec's ``torch_config`` of a :class:`~pcs_ray.train.config.TorchConfig` (or Ray's own, read by its
    fields); None: pcs-ray's default (NCCL on GPUs, gloo on logical ones)."""
    if torch_config is None:
        return None
    if not isinstance(torch_config, TorchConfig):
        try:
            torch_config = TorchConfig(torch_config.backend, torch_config.init_method, torch_config.timeout_s)
        except AttributeError:
            raise refuse("TorchTrainer(torch_config)", f"expected a pcs_ray.train.torch.TorchConfig, got "
                         f"{type(torch_config).__name__}; build one") from None
    return torch_config.to_spec()


def checked_datasets(datasets: Any, dataset_config: Any) -> dict:
    """``datasets`` as a dict by name (Ray's ``{"train": ds, ...}``), checked before anything is written."""
    from pcs_ray.train.datasets import DataConfig

    if dataset_config is not None and not isinstance(dataset_config, DataConfig):
        raise refuse("TorchTrainer(dataset_config)", f"expected a pcs_ray.train.DataConfig, got "
                     f"{type(dataset_config).__name__}")
    if datasets is None:
        return {}
    if not isinstance(datasets, dict) or not all(isinstance(k, str) and k and "/" not in k for k in datasets):
        raise refuse("TorchTrainer(datasets)", "expected a dict of datasets by name; give {'train': ds, ...}")
    for name, dataset in datasets.items():
        if not (hasattr(dataset, "iter_batches") or type(dataset).__name__ in ("Table", "DataFrame")):
            raise refuse("TorchTrainer(datasets)", f"{name!r} is a {type(dataset).__name__}; give a ray.data.Dataset, "
                                                   "pyarrow.Table or pandas.DataFrame per name")
    return dict(datasets)


_said: set[str] = set()


def _say_once(message: str) -> None:
    """A warning printed once per process, whatever the filters say."""
    if message not in _said:
        _said.add(message)
        warnings.warn(message, UserWarning, stacklevel=3)


class TorchTrainer:
    """Ray Train's ``TorchTrainer`` signature, then pcs-ray's own fields (as :class:`Trainer`'s):
    ``steps`` (the job's total, in the loop's report steps), ``job_class``, ``tenant``, ``step_time``,
    ``checkpoint_every``, ``min_runtime_s``, ``max_runtime_s`` (a time limit, as Slurm's ``--time``),
    ``report_timeout_s`` (silence that counts as a hang), ``working_dir``, ``scaling`` and ``client``."""

    def __init__(self, train_loop_per_worker: Callable | str, *, train_loop_config: dict | None = None,
                 torch_config: Any = None, scaling_config: ScalingConfig | None = None,
                 run_config: RunConfig | None = None, datasets: Any = None, dataset_config: Any = None,
                 resume_from_checkpoint: Any = None, metadata: Any = None,
                 steps: int | None = None, job_class: str = "A", tenant: str | None = None,
                 step_time: float | None = None, checkpoint_every: int = 0, min_runtime_s: float | None = None,
                 max_runtime_s: float | None = None, report_timeout_s: float | None = None,
                 working_dir: str | Path | None = None, scaling: Any = None, client: Any = None) -> None:
        given = {"resume_from_checkpoint": resume_from_checkpoint, "metadata": metadata}
        for name, value in given.items():
            if value is not None:
                raise refuse(f"TorchTrainer({name})", REFUSED[name])
        self.scaling_config = scaling_config if scaling_config is not None else ScalingConfig()
        self.run_config = run_config if run_config is not None else RunConfig()
        if not self.scaling_config.use_gpu:
            warnings.warn("ScalingConfig(use_gpu=False): each pcs-ray worker holds one GPU of the cluster all the "
                          "same, and its device is that GPU (the CPU on a logical GPU)", stacklevel=2)
        min_gpus, gpus = self.scaling_config.gpu_range()
        # What the ranks need beyond the loop's own config: their process group's options and the checkpoint policy.
        travels = {"torch_config": torch_spec_of(torch_config),
                   "checkpoint_config": (self.run_config.checkpoint_config or CheckpointConfig()).to_spec()}
        self._storage_checked = False  # a remote storage_path is written to once before the job is submitted
        self.trainer = Trainer(
            train_loop_per_worker, config=train_loop_config, steps=steps, gpus=gpus, min_gpus=min_gpus,
            name=self.run_config.name or "", working_dir=working_dir, step_time=step_time, job_class=job_class,
            checkpoint_every=checkpoint_every, runtime_env=self.run_config.worker_runtime_env, scaling=scaling,
            client=client, tenant=tenant, min_runtime_s=min_runtime_s, max_failures=self.run_config.max_failures,
            max_runtime_s=max_runtime_s, report_timeout_s=report_timeout_s,
            **{name: spec for name, spec in travels.items() if spec is not None})
        self.datasets = checked_datasets(datasets, dataset_config)
        self.dataset_config = dataset_config
        self._staged: dict | None = None  # where submit() wrote the datasets (pcs_ray.train.datasets)

    def spec(self) -> dict:
        """The job spec it submits: the one :class:`Trainer` makes of the same fields."""
        return self.trainer.spec()

    def submit(self):
        """Submit once; returns at once with ``job_id``, ``predicted_completion`` and ``bound``. A remote
        ``RunConfig(storage_path=...)`` is checked first (a probe object written and deleted): one that cannot be
        written raises :class:`~pcs_ray.train.config.UnsupportedOptionError` and nothing is submitted."""
        if self.trainer.handle is None and self.run_config.remote and not self._storage_checked:
            self.run_config.result_storage()
            self._storage_checked = True
        if self.trainer.handle is None and self.datasets and self._staged is None:
            self._stage_datasets()
        try:
            return self.trainer.submit()
        except BaseException:
            if self.trainer.handle is None:
                self._unstage_datasets()
            raise

    def _stage_datasets(self) -> None:
        """Write the datasets where every node reads them; the job spec says where."""
        from pcs_ray.train import datasets as staging

        root = staging.data_root(self.trainer.client.status())
        self._staged = staging.stage(self.datasets, self.dataset_config, root)
        self.trainer.fields["datasets"] = self._staged  # the job spec's datasets: each run's ranks get them

    def _unstage_datasets(self) -> None:
        if self._staged is not None:
            from pcs_ray.train import datasets as staging

            staging.unstage(self._staged)
            self._staged = None

    @property
    def job_id(self) -> int | None:
        return self.trainer.job_id

    def predict(self) -> dict:
        """The job's refreshed prediction (``pcs-ray predict``)."""
        return self.trainer.predict()

    def fit(self, timeout: float | None = None) -> Result:
        """Submit if not yet and block until the job ends: its :class:`Result`, or
        :class:`~pcs_ray.train.trainer.TrainingFailedError` with the loop's last error line. With
        ``RunConfig(storage_path=...)`` the result is also kept in ``storage_path/name`` (``Result.path``):
        ``result.json``, and in a local folder a copy of the checkpoint (``pcs_ray.train.result``)."""
        self.submit()
        try:
            result = self.trainer.fit(timeout)
        except TrainingFailedError:
            self._unstage_datasets()  # the job ended: no run reads them again
            raise
        self._unstage_datasets()
        if self.run_config.storage_path is None:
            return result
        name = self.run_config.name or f"job-{result.job_id}"
        if not self.run_config.remote:
            return result.keep_in(Path(self.run_config.local_folder()) / name)
        if result.checkpoint is not None and not result.checkpoint.remote:
            _say_once(f"RunConfig(storage_path={os.fspath(self.run_config.storage_path)!r}): the cluster has no "
                      "storage (pcs-ray start --storage), so checkpoints stay in its STATE_DIR; only result.json "
                      "is written there")
        return result.keep_in(name, self.run_config.result_storage(None, check=False))  # the storage's own retry time
