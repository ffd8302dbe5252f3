"""``Trainer``: submit a training function through pcs-ray from a driver, get its prediction, wait for it.

::

    from pcs_ray.train import Trainer
    from train_mlp import train_loop          # a top-level function of a file: shipped as an entrypoint

    trainer = Trainer(train_loop, config={"lr": 0.02}, steps=400, gpus=4, min_gpus=1, name="mlp")
    handle = trainer.submit()                 # at once: job_id, predicted_completion, bound
    result = trainer.fit()                    # blocks; a pcs_ray.train.Result: metrics, checkpoint, path ...

The function travels as an entrypoint (``FILE.py:FUNCTION`` in its folder, which becomes the
``working_dir``) when it is a top-level function of a file; otherwise (a function defined in the
driver script itself, a closure) by value, with cloudpickle, as Ray does. So
``ray job submit --working-dir DIR -- python driver.py`` runs the user's own code under pcs-ray.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any, Callable

from pcs_ray.client import Client, JobHandle
from pcs_ray.train.result import Result
from pcs_ray.train.session import CheckpointPath


def job_folder(checkpoint: str) -> str:
    """Where a job's checkpoints are kept, from its newest one's folder or URI (``Result.path`` without a
    ``storage_path``): ``STATE_DIR/checkpoints/<job>`` or ``<storage>/checkpoints/<job>``."""
    if "://" in checkpoint:
        from pcs_ray.train.remote_store import job_url

        return job_url(checkpoint)
    return str(Path(checkpoint).parent)


class TrainingFailedError(RuntimeError):
    """The job ended without finishing (failed, cancelled or timed out); the message carries why."""


def entrypoint_of(function: Callable, working_dir: str | Path | None) -> tuple[str, str] | None:
    """``(entrypoint, working_dir)`` for a top-level function of an importable file, else None.

    A function of the script being run (``__main__``) is never named by file: importing the
    driver inside the run would run the driver again.
    """
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    if module is None or module.__name__ == "__main__" or "." in function.__qualname__ or "<" in function.__qualname__:
        return None
    source = getattr(module, "__file__", None)
    if not source or getattr(module, function.__name__, None) is not function:
        return None
    path = Path(source).resolve()
    if working_dir is not None:
        root = Path(working_dir).resolve()
        if not path.is_relative_to(root):
            return None
        return f"{path.relative_to(root).as_posix()}:{function.__name__}", str(root)
    depth = module.__name__.count(".")
    root = path.parents[depth] if path.name != "__init__.py" else path.parents[depth + 1]
    if depth == 0:
        return f"{path.name}:{function.__name__}", str(root)
    return f"{module.__name__}:{function.__name__}", str(root)


class Trainer:
    """A training function, its config and its GPU demand, as one pcs-ray job (see the module doc).

    ``tenant``: the tenant whose quota it runs on (default: the client's, ``$PCS_RAY_TENANT``); the job's user is
    the client's (``$PCS_RAY_USER``, else the OS login). ``min_runtime_s``, ``max_failures`` (times a loop
    that raises is restarted from its newest checkpoint), ``max_runtime_s`` (a time limit) and ``report_timeout_s``
    (silence that counts as a hang): as in a job file. ``torch_config`` (the ranks' ``torch.distributed`` backend
    and timeout) and ``checkpoint_config`` (which checkpoints the job keeps): as in a job file, the specs
    ``pcs_ray.jobs.train_options`` checks.
    """

    def __init__(self, train_loop: Callable | str, *, config: dict | None = None, steps: int | None = None,
                 gpus: int = 1, min_gpus: int | None = None, name: str = "", working_dir: str | Path | None = None,
                 step_time: float | None = None, job_class: str = "A", checkpoint_every: int = 0,
                 runtime_env: dict | None = None, scaling: Any = None, client: Any = None,
                 tenant: str | None = None, min_runtime_s: float | None = None, max_failures: int = 0,
                 max_runtime_s: float | None = None, report_timeout_s: float | None = None,
                 torch_config: dict | None = None, checkpoint_config: dict | None = None) -> None:
        self.train_loop, self.working_dir = train_loop, working_dir
        self.fields = {"steps": steps, "gpus": gpus, "min_gpus": min_gpus, "name": name, "step_time": step_time,
                       "class": job_class, "checkpoint_every": checkpoint_every, "config": dict(config or {}),
                       "runtime_env": runtime_env, "scaling": scaling, "tenant": tenant,
                       "min_runtime_s": min_runtime_s, "max_failures": max_failures or None,
                       "max_runtime_s": max_runtime_s, "report_timeout_s": report_timeout_s,
                       "torch_config": torch_config, "checkpoint_config": checkpoint_config}
        self._client = client
        self.handle: JobHandle | None = None

    @property
    def client(self):
        if self._client is None:
            self._client = Client()
        return self._client

    def spec(self) -> dict:
        """The job spec this trainer submits (checked by the client and the coordinator as a job file)."""
        spec = {k: v for k, v in self.fields.items() if v is not None}
        if isinstance(self.train_loop, str):
            spec["entrypoint"] = self.train_loop
            spec["working_dir"] = str(Path(self.working_dir or ".").resolve())
            return spec
        if not callable(self.train_loop):
            raise TypeError(f"train_loop must be a function or 'FILE.py:FUNCTION', got {type(self.train_loop).__name__}")
        named = entrypoint_of(self.train_loop, self.working_dir)
        if named is not None:
            spec["entrypoint"], spec["working_dir"] = named
            return spec
        import cloudpickle

        spec["function"] = base64.b64encode(cloudpickle.dumps(self.train_loop)).decode()
        if self.working_dir is not None:
            spec["working_dir"] = str(Path(self.working_dir).resolve())
        if not spec.get("name"):
            spec["name"] = getattr(self.train_loop, "__name__", "train")
        return spec

    def submit(self) -> JobHandle:
        """Submit once; returns at once with ``job_id``, ``predicted_completion`` and ``bound``."""
        if self.handle is None:
            self.handle = self.client.submit(self.spec())
        return self.handle

    @property
    def job_id(self) -> int | None:
        return None if self.handle is None else self.handle.id

    def predict(self) -> dict:
        """The job's refreshed prediction (``pcs-ray predict``): completion, range, bound, estimates."""
        return self.client.predict(self.submit().id)

    def fit(self, timeout: float | None = None) -> Result:
        """Submit if not yet, block until the job ends; its metrics and checkpoint, or an error."""
        handle = self.submit()
        view = self.client.wait(handle.id, timeout=timeout)
        if view["state"] != "finished":
            why = (view.get("error") or "").strip().splitlines()
            raise TrainingFailedError(f"job {handle.id} {view['state']}" + (f": {why[-1]}" if why else ""))
        folder = view.get("checkpoint")  # a folder of STATE_DIR, or a URI in the cluster's storage
        return Result(view.get("metrics") or {}, CheckpointPath(folder) if folder else None,
                      path=job_folder(folder) if folder else None, job_id=handle.id, state=view["state"],
                      view=view, history=lambda: self.history(handle.id))

    def history(self, job_id: int) -> list[dict]:
        """Every report of every run of the job, oldest first (rank 0's, as its runs logged them)."""
        reply = self.client.logs(job_id, metrics=True)
        rows = []
        for attempt in reply.get("attempts", []):
            rows += (reply if reply.get("attempt") == attempt else self.client.logs(job_id, attempt, metrics=True))["metrics"]
        return rows
