"""Runs of the user's own code: one fresh Ray worker process per rank, started for that run alone.

User code never enters the warm pool: one user's imports and global state must not reach another
user's job, so each rank is a new actor with the job's ``runtime_env`` (its ``working_dir``
shipped by Ray to the rank's node, its ``env_vars`` and ``pip``), ended when the run ends. Each
rank is pinned as the built-in runners are (the GPU's custom resource, ``CUDA_VISIBLE_DEVICES``)
and also sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA's index 0 is NVML's index for that GPU.

A rank sends its stdout and stderr to ``<log_dir>/rank-<r>.log`` (``pcs-ray logs``; rotated past the
operator's ``log_bytes_per_rank``, ``pcs_ray.executors.log_cap``; a fatal signal's stacks and, past the job's
report timeout, a hung rank's stacks are written there too, ``pcs_ray.executors.hang_dump``), installs a
:class:`pcs_ray.train.session.Session`, joins ``torch.distributed`` when the run has several ranks,
and calls the user's function with the job's ``config``. How the call ends is the run's outcome:

* it returns: ``finished`` at the step it last reported (a note says so when that is short of
  ``total_steps``);
* :class:`~pcs_ray.train.session.RunStopped` (a checkpoint reported after ``should_checkpoint``):
  ``preempted`` at that checkpoint's step;
* anything else it raises: ``failed`` and ``fatal`` (a retry would raise again), with the last
  lines of its traceback.

On logical GPUs (no CUDA device) the user's step is real CPU compute, so the emulated GPU's
slowdown is applied in proportion: after each report the rank waits ``(slowdown - 1)`` times the
compute since the previous one.
"""

from __future__ import annotations

import base64
import dataclasses
import faulthandler
import importlib
import importlib.util
import inspect
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import ray

import pcs_ray
from pcs_ray.executors import hang_dump, log_cap
from pcs_ray.executors.handle import RunHandle, failed_outcome, rendezvous_address, watch_ranks
from pcs_ray.contract import GPUSlot, RunOutcome, RunRequest
from pcs_ray.cluster.resources import gpu_resource

TRACEBACK_LINES = 12  # of the user's traceback kept in the outcome (the status view shows them)
#: pcs-ray's own folders: a traceback's frames there are not the user's (whose folders may share their names).
OUR_FOLDERS = tuple(str(Path(p).resolve().parent) + os.sep for p in (__file__, pcs_ray.__file__))


def runtime_env(request: RunRequest) -> dict:
    """The Ray ``runtime_env`` of the run's rank processes: the job's own, with its working_dir shipped."""
    code = request.code or {}
    env = {k: v for k, v in (code.get("runtime_env") or {}).items()}
    env["env_vars"] = {**env.get("env_vars", {}), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if code.get("working_dir"):
        env["working_dir"] = code["working_dir"]
        env = ship_working_dir(env)
    return env


def ship_working_dir(env: dict) -> dict:
    """``env`` with its local ``working_dir`` uploaded to the cluster and named by its ``gcs://`` URI.

    Ray takes a local folder only in a job's own ``runtime_env`` (``ray.init``/``ray job submit``);
    an actor's needs a URI. This is the packaging step Ray's job SDK runs: the package is named by
    a hash of its content, so a folder that has not changed is uploaded once. Excludes (``.gitignore``,
    ``runtime_env.excludes``) are honoured as Ray does.
    """
    import tempfile

    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    with tempfile.TemporaryDirectory(prefix="pcs-ray-package-") as scratch:
        env = upload_working_dir_if_needed(dict(env), include_gitignore=True, scratch_dir=scratch)
    env.pop("excludes", None)
    return env


def load_function(code: dict):
    """The user's function: by value (cloudpickle), from a file in the working dir, or from a module."""
    if code.get("function"):
        import cloudpickle

        return cloudpickle.loads(base64.b64decode(code["function"]))
    target, _, name = code["entrypoint"].rpartition(":")
    if target.endswith(".py"):
        path = Path(os.getcwd()) / target  # Ray starts the process in the unpacked working_dir
        if not path.is_file() and code.get("working_dir"):
            path = Path(code["working_dir"]) / target
        module_name = "pcs_ray_user_" + Path(target).with_suffix("").as_posix().replace("/", "_").replace("-", "_")
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        sys.path.insert(0, str(path.parent))
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, name)


def _user_traceback(exc: BaseException) -> str:
    """The last lines of the traceback, from the first frame outside pcs-ray on."""
    frames = traceback.extract_tb(exc.__traceback__)
    while len(frames) > 1 and os.path.realpath(frames[0].filename).startswith(OUR_FOLDERS):
        frames.pop(0)
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).rstrip().splitlines()
    return "\n".join(text[-TRACEBACK_LINES:])


class UserRank:
    """One rank of one run of the user's code, in a process of its own.

    Created for its run (``gpu`` given), or ahead of it as a spare (``pcs_ray.executors.user_spares``):
    then torch and the contract are imported before any run needs them, and :meth:`assign` pins
    it to its GPU when a run takes it. Importing torch does not touch CUDA, so the pinning set
    afterwards still decides which device the run sees.
    """

    def __init__(self, gpu: GPUSlot | None = None, rank: int = 0, world_size: int = 1, log_dir: str | None = None,
                 log_bytes: int | None = None, logs_to: tuple | None = None):
        self.created = time.time()
        self._stop = threading.Event()
        self.log_path = None
        self.log_upload = None
        self.gpu = None
        if gpu is None:
            import torch  # noqa: F401  (the import a run would wait for)

            import pcs_ray.train.session  # noqa: F401  (and the contract's package with it)
        self.warmed = time.time()
        if gpu is not None:
            self.assign(gpu, rank, world_size, log_dir, log_bytes, logs_to)

    def ready(self) -> bool:
        return True

    def assign(self, gpu: GPUSlot, rank: int, world_size: int, log_dir: str | None, log_bytes: int | None = None,
               logs_to: tuple | None = None) -> None:
        """Pin this process to ``gpu`` as rank ``rank`` of ``world_size`` and send its output to ``log_dir``
        (rotated past ``log_bytes``, ``pcs_ray.executors.log_cap``). ``logs_to``: (storage URI, job, attempt)
        where the cluster keeps its logs in a storage: the log is written in this node's cache and uploaded."""
        if self.gpu is not None:
            raise RuntimeError("a user rank process runs one run only")
        self.gpu, self.rank, self.world_size = gpu, rank, world_size
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu.index)
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        if log_dir and logs_to is not None:
            log_dir = str(upload_logs(self, *logs_to))
        if log_dir:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            self.log_path = Path(log_dir) / f"rank-{rank}.log"
            log_cap.open_log(self.log_path)
            if log_bytes:
                log_cap.LogCap(self.log_path, log_bytes).start()  # ends with this process, which serves one run
            faulthandler.enable(file=2, all_threads=True)  # a fatal signal's stacks go to the log (rank_death reads them)

    def rendezvous(self) -> tuple[str, int]:
        return rendezvous_address()

    def environment(self) -> dict:
        """What this rank was given: its GPU visibility and ordering, node, process, working dir."""
        return {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"), "pid": os.getpid(),
                "cwd": os.getcwd(), "node_id": ray.get_runtime_context().get_node_id(), "rank": self.rank}

    def request_stop(self) -> None:
        self._stop.set()

    def run(self, request: RunRequest, master: tuple[str, int] | None = None, after: object = None,
            launched: float | None = None, assignment: tuple | None = None) -> RunOutcome:
        """Run the user's function; ``assignment`` (gpu, rank, world size, log dir) pins a spare first
        (passed here, not in a call of its own: a threaded actor's calls may run in any order)."""
        if assignment is not None:
            self.assign(*assignment)
        timings = {"actor_created": self.created, "warmed": self.warmed, "run_called": time.time()}
        if launched is not None:
            timings["launched"] = launched
        try:
            return run_rank(request, self._stop.is_set, self.rank, self.world_size, master, timings)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            if self.log_upload is not None:
                self.log_upload.close()


RemoteUserRank = ray.remote(UserRank)

#: Seconds a log upload retries an unreachable storage before the next flush tries again.
LOG_RETRY_S = 10.0


def upload_logs(rank: UserRank, storage_uri: str, job_id: str, attempt: int) -> Path:
    """Start uploading this attempt's logs folder (on this node) to the storage; returns the folder."""
    from pcs_ray.storage import open_storage
    from pcs_ray.storage.folders import FolderUpload
    from pcs_ray.train.remote_store import local_paths

    folder = local_paths(storage_uri, job_id, attempt)[1]
    folder.mkdir(parents=True, exist_ok=True)
    rank.log_upload = FolderUpload(open_storage(storage_uri, retry_s=LOG_RETRY_S), f"logs/{job_id}/attempt-{attempt}",
                                   folder)
    rank.log_upload.start()
    return folder


def logs_to(request: RunRequest) -> tuple | None:
    """What :meth:`UserRank.assign` needs to upload the run's logs (None: they stay in ``log_dir``)."""
    return (request.storage, request.job_id, request.attempt) if request.storage and request.log_dir else None


#: The built-in workloads' loop (``pcs_ray.executors.training.builtin_loop``), run through the same contract.
BUILTIN_ENTRYPOINT = "pcs_ray.executors.training:builtin_loop"


class _Pace:
    """What every report triggers on the runner's side: the emulated device's pace on logical GPUs,
    progress to the coordinator (rank 0), NVML readings on real GPUs, and the warm runner's step hook.

    A built-in workload's step takes its device model's time (``budget``, started by the loop's
    ``step_begins``); the user's own step is real compute, stretched by the GPUs' slowdown.
    """

    def __init__(self, request: RunRequest, rank: int, emulate: bool, timings: dict, budget=None,
                 on_step=None, resolve=None):
        from pcs_ray.executors.progress import ProgressReporter, telemetry_reporter

        self.slowdown = request.slowdown if emulate and budget is None else 1.0
        self.budget, self.on_step, self.rank, self.timings = budget, on_step, rank, timings
        self.report_timeout_s = request.report_timeout_s
        self.progress = ProgressReporter(request.reporter, request.job_id, request.report_interval_s, emulate,
                                         budget, resolve) if rank == 0 else None
        if self.progress is not None:
            self.progress.began(timings.get("start_step", 0))
        self.last_step: int | None = None
        self.step_time: float | None = None
        self.began = False
        self.mark = time.monotonic()
        # On a real GPU every rank reads its GPU's energy through NVML.
        self.telemetry = None if emulate else telemetry_reporter(request, rank, resolve=resolve)

    def begin(self) -> None:
        if self.budget is not None:
            self.budget.begin()
            self.began = True
        self.mark = time.monotonic()

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        if self.telemetry is not None:
            self.telemetry.step_done(final=True)
            self.telemetry.meter.sampler.close()
            self.telemetry = None

    def __call__(self, step: int, metrics) -> None:
        if self.last_step is not None and step <= self.last_step:
            return  # a checkpoint reported at the step already counted
        now = time.monotonic()
        steps = step - self.last_step if self.last_step is not None else max(1, step - self.timings.get("start_step", 0))
        if self.budget is not None and self.began:
            self.step_time = self.budget.end()
            self.began = False
        else:
            if self.slowdown > 1.0:
                time.sleep((self.slowdown - 1.0) * (now - self.mark))
            self.step_time = (time.monotonic() - self.mark) / max(1, steps)
        self.timings["last_step_end"] = time.time()
        self.timings.setdefault("first_step", self.timings["last_step_end"])
        hang_dump.arm(self.report_timeout_s)
        if self.progress is not None:
            self.progress.step_done(step, self.step_time)
        if self.telemetry is not None:
            self.telemetry.step_done()
        if self.on_step is not None:
            self.on_step(step)
        self.last_step = step
        self.mark = time.monotonic()


def _device() -> str:
    """``cuda:0`` (made current) when this process sees a CUDA device, else ``cpu`` (a logical GPU)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        torch.cuda.set_device(0)
        return "cuda:0"
    return "cpu"


def group_options(torch_config: dict | None, device: str, notes: list[str]) -> tuple[str, float | None]:
    """The process group's backend and timeout from the job's ``torch_config`` (``TorchConfig``): NCCL on a GPU and
    gloo on a logical one unless it names one; NCCL asked on a logical GPU is gloo, said in the run's notes."""
    torch_config = torch_config or {}
    backend = torch_config.get("backend") or ("nccl" if device != "cpu" else "gloo")
    if backend == "nccl" and device == "cpu":
        notes.append("TorchConfig(backend='nccl') on a logical GPU (the CPU): gloo instead")
        backend = "gloo"
    return backend, torch_config.get("timeout_s")


#: What Ray Train's workers are told of their process group, and libraries built on torchrun's names read.
GROUP_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


def process_group_environment(rank: int, world_size: int, master: tuple[str, int] | None) -> None:
    """Set torchrun's variables for the user's code (Lightning, accelerate and the Hugging Face Trainer find the
    run's process group by them); a run without a group clears them, since its process may be a reused one."""
    if master is None:
        for name in GROUP_VARIABLES:
            os.environ.pop(name, None)
        return
    values = (rank, world_size, 0, 1, rank, master[0], master[1])
    os.environ.update({name: str(value) for name, value in zip(GROUP_VARIABLES, values)})


def run_rank(request: RunRequest, should_stop, rank: int, world_size: int, master: tuple[str, int] | None,
             timings: dict, *, on_step=None, reporter=None, distributed: bool = True) -> RunOutcome:
    """One rank of a run in this process, the user's code or a built-in workload's loop; every way it
    can end becomes an outcome. ``distributed``: join the run's process group here (False: the caller
    has); ``on_step`` and ``reporter`` as for a warm runner (``pcs_ray.executors.pool``)."""
    import pcs_ray.train.session as train_session
    import pcs_ray.train.store as store
    from pcs_ray.executors.checkpoint import peek_step

    builtin = request.code is None
    code = request.code or {"entrypoint": BUILTIN_ENTRYPOINT, "config": {
        "workload": request.workload, "params": dict(request.params), "checkpoint_every": request.checkpoint_every}}
    device = "cpu"
    dist = None
    storage = None
    notes: list[str] = []
    if request.storage:
        from pcs_ray.storage import open_storage
        import pcs_ray.train.remote_store as remote_store

        storage = open_storage(request.storage)
        checkpoints, logs = remote_store.local_paths(request.storage, request.job_id, request.attempt)
        request = dataclasses.replace(request, checkpoint_dir=str(checkpoints),
                                      log_dir=str(logs) if request.log_dir else None)
    if rank == 0:
        store.remove_leftovers(request.checkpoint_dir)
    start_step = peek_step(request.checkpoint_dir) or 0
    timings["start_step"] = start_step
    session = pace = budget = None
    hang_dump.arm(request.report_timeout_s)  # start-up counts: a run that never reports is a hang too
    try:
        if storage is not None:
            start_step, pulled = remote_store.pull(storage, request.job_id, request.checkpoint_dir)
            start_step = timings["start_step"] = start_step or 0
            notes.extend(pulled)
        device = _device()
        if device == "cpu" and builtin:
            from pcs_ray.executors.emulation import StepBudget
            from pcs_ray.workloads.device_model import emulated_step_s

            budget = StepBudget(emulated_step_s(request.workload, request.params, world_size, request.slowdown))
            notes.append(f"emulated GPUs: {budget.step_s:.4g} s per step (slowdown x{request.slowdown:g}, {world_size} GPU(s))")
        if world_size > 1 and distributed:
            import torch.distributed as dist

            from pcs_ray.executors.rendezvous import join_group

            backend, timeout_s = group_options(code.get("torch_config"), device, notes)
            join_group(backend, master, rank, world_size, timeout_s)
        if not builtin:
            process_group_environment(rank, world_size, master if world_size > 1 and distributed else None)
        context = train_session.TrainContext(
            world_size=world_size, world_rank=rank, local_rank=0, device=device, job_id=request.job_id,
            attempt=request.attempt, total_steps=request.total_steps, start_step=start_step)
        pace = _Pace(request, rank, emulate=device == "cpu", timings=timings, budget=budget, on_step=on_step,
                     resolve=reporter)
        session = train_session.Session(context, request.checkpoint_dir, should_stop, pace, step=start_step,
                                        last_checkpoint_step=start_step, timings=timings, on_step_begin=pace.begin,
                                        metrics_log=metrics_log(request, rank), storage=storage,
                                        keep=code.get("checkpoint_config"))
        train_session.install(session)
        if on_step is not None:
            on_step(start_step)
        function = load_function(code)
        timings["imported"] = time.time()
        pace.mark = time.monotonic()
        takes_config = bool(inspect.signature(function).parameters)
        function(dict(code.get("config") or {})) if takes_config else function()
        if request.total_steps is not None and session.step < request.total_steps:
            notes.append(f"returned early: at step {session.step} of {request.total_steps}")
        return _outcome(request, "finished", session, start_step, timings, notes, device, pace, budget)
    except train_session.RunStopped as stop:
        session.step = stop.step
        return _outcome(request, "preempted", session, start_step, timings, notes, device, pace, budget)
    except BaseException as exc:  # the run's code: any error (SystemExit included) fails the run
        if builtin:
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        else:
            print(f"pcs-ray: the training function raised:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            error = _user_traceback(exc)
        fatal = not builtin and session is not None and not isinstance(exc, KeyboardInterrupt) and \
            not peer_lost(exc, world_size)
        return failed_outcome(request, error, start_step=start_step, timings=timings, fatal=fatal)
    finally:
        hang_dump.disarm()
        if pace is not None:
            pace.close()
        train_session.install(None)
        if session is not None:
            session.close()
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()


#: What gloo and NCCL say in a collective whose peer went away (its process, or its machine).
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Connection refused", "Broken pipe",
             "Timed out waiting", "NCCL communicator was aborted", "remote process exited")


def peer_lost(exc: BaseException, world_size: int) -> bool:
    """Whether the user's code failed in a collective because another rank is gone: the run, not the code,
    failed, and a retry on the GPUs left resumes it (never counted as the code's own failure)."""
    if world_size < 2:
        return False
    try:
        import torch.distributed as dist

        if isinstance(exc, dist.DistError):
            return True
    except (ImportError, AttributeError):
        pass
    return any(word in str(exc) for word in PEER_LOST)


def metrics_log(request: RunRequest, rank: int) -> str | None:
    """Where rank 0 of a user run logs its reports (``pcs_ray.coordinator.logs.METRICS``); None elsewhere."""
    if rank != 0 or request.code is None or not request.log_dir:
        return None
    Path(request.log_dir).mkdir(parents=True, exist_ok=True)
    return str(Path(request.log_dir) / "metrics.jsonl")


def _outcome(request: RunRequest, status: str, session, start_step: int, timings: dict, notes: list, device: str,
             pace, budget) -> RunOutcome:
    timings["saved"] = time.time()
    if budget is not None and (budget.late_steps or budget.warmup_s):
        notes.append(budget.describe())
    return RunOutcome(job_id=request.job_id, status=status, step=session.step, start_step=timings.get("start_step", start_step),
                      gpus=tuple(request.gpus), notes=tuple(session.notes + notes), timings=timings,
                      emulated=device == "cpu", step_time_s=pace.step_time if pace is not None else None,
                      overruns=budget.overruns if budget is not None else 0,
                      late_steps=budget.late_steps if budget is not None else 0,
                      emulated_step_s=budget.step_s if budget is not None else None,
                      metrics=plain_metrics(session.metrics) if request.code is not None else None)


def plain_metrics(metrics: dict) -> dict:
    """The metrics as JSON numbers, strings and booleans (a tensor's item; other values as text)."""
    out = {}
    for key, value in list(metrics.items())[:100]:
        if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
            value = value.item()
        if isinstance(value, bool) or isinstance(value, str):
            out[str(key)] = value
        elif isinstance(value, (int, float)):
            out[str(key)] = value if value == value and abs(value) != float("inf") else None
        else:
            out[str(key)] = str(value)[:200]
    return out


def _spare(node_id: str, env: dict):
    """A rank process of this runtime env waiting on that node: no GPU held, torch imported."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return RemoteUserRank.options(
        num_cpus=0, num_gpus=0, max_concurrency=2, max_restarts=0, runtime_env=env,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote()


def launch_user(request: RunRequest, after: ray.ObjectRef | None = None, spares=None):
    """Start a run of the user's code on exactly ``request.gpus``: a fresh rank process per GPU, taken
    from ``spares`` (pre-started for this runtime env on that node) where one waits, else started now.
    Either way the process serves this run only; ``spares`` then starts the next ones."""
    from pcs_ray.executors.user_spares import SPARES, env_key

    launched = time.time()  # the working dir's packaging counts as start-up too
    spares = SPARES if spares is None else spares
    env = runtime_env(request)
    key = env_key(env)
    world_size = len(request.gpus)
    actors, assignments = [], []
    nodes = spares.nodes_of(request.gpus) if spares.per_key > 0 else {}
    for rank, slot in enumerate(request.gpus):
        actor = spares.take(nodes.get(slot), key)
        uploads = logs_to(request)
        assignments.append(None if actor is None else (slot, rank, world_size, request.log_dir, request.log_bytes, uploads))
        if actor is None:
            actor = RemoteUserRank.options(
                num_cpus=0, num_gpus=0, resources={gpu_resource(slot.node, slot.index): 1},
                max_concurrency=2, max_restarts=0, runtime_env=env,
            ).remote(slot, rank, world_size, request.log_dir, request.log_bytes, uploads)
        actors.append(actor)
    spares.refill([nodes.get(slot) for slot in request.gpus], key, lambda node: _spare(node, env))
    master = actors[0].rendezvous.remote() if world_size > 1 else None
    runs = [actor.run.remote(request, master, after, launched, assigned) for actor, assigned in zip(actors, assignments)]
    kind = "spare" if all(assignments) else "cold"
    return RunHandle(request, actors, watch_ranks.remote(request, actors, runs), runner=kind)


