"""Checks of what only a real NVIDIA GPU can show, with an exit code: 0 when every check passed.

Each check prints one ``PASS``/``FAIL``/``SKIP`` line with its seconds, after one JSON object of its
figures; a summary line ends the output. Exit status: 0 all passed, 1 any failed (a check that could
not run, for want of CUDA, NVML or time, fails), 2 a bad option.

* ``user_pinning``: a user-code job (``examples/user-code/train_mlp.py`` behind a probe) run as pcs-ray
  runs it (a fresh Ray actor per rank, ``pcs_ray.executors.user_run.launch_user``) on one GPU: inside the run,
  ``CUDA_VISIBLE_DEVICES`` is that GPU's index, ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and the loop's device
  is ``cuda:0``; the run finishes its steps.
* ``pinned_uuid``: the UUID of CUDA device 0 inside that run (torch's, cross-checked with NVML's for
  the device's PCI bus id) equals NVML's UUID for the index the job was pinned to.
* ``user_resume``: the same user job stopped through ``should_checkpoint()`` and resumed from its
  checkpoint in a fresh process ends with weights bitwise equal to an uninterrupted run's; the resume
  starts at the stopped run's step and the loop loads exactly that checkpoint (no step lost or redone).
  The loop is an MLP on cuBLAS GEMMs with ``CUBLAS_WORKSPACE_CONFIG`` set and
  ``torch.use_deterministic_algorithms(True)`` (errors, not warnings), so bitwise equality is expected.
* ``builtin_resume:<workload>``: each built-in workload (``pcs_ray.executors.training.run_training``) stopped and
  resumed is bitwise equal to its uninterrupted run; kernels torch flags as nondeterministic are named.
* ``preflight``: the product's GPU preflight (``pcs-ray doctor``) passes on every GPU of this machine:
  a process pinned to each sees one CUDA device whose UUID is NVML's for that index.
* ``energy_builtin`` / ``energy_user``: ``pcs-ray up --local`` on this machine (its GPUs through NVML),
  one built-in and one user-code job submitted and waited for; each job's view in ``status`` reports
  ``energy.source == "nvml"`` with joules > 0.

``--quick`` (the default) is sized for about 3 minutes on one H100 and starts nothing after
``--budget-s`` (330 s: checks not reached then fail; the cluster's ``down`` gets 60 s more).
``--full`` runs longer jobs and adds the older figures (device step times, a warm-pool resume);
``--cli`` adds the README's live quick start (three ResNet-18 jobs, their predictions against their
JCTs). ``--only user,energy`` (groups: builtin, preflight, user, energy) runs only those checks, the
others being SKIP lines: a rerun after a fix costs only the checks it needs. ``--cpu`` rehearses on a
machine without a GPU: the checks that CPU processes can run (pinning env, both resumes) run for real
on logical GPUs and the GPU-only ones are ``SKIP`` lines, never passes; its exit status says whether
the rehearsed checks passed.

    PYTHONPATH=. python bench/real_gpu.py            # on the GPU machine
    PYTHONPATH=. python bench/real_gpu.py --cpu      # a rehearsal anywhere
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common import ROOT, Cli, cli_env, start_ray, up_local
from pcs_ray.api import strict_json
from pcs_ray.cluster.preflight import normal_uuid, pinning_problems, uuid_problems
from pcs_ray.contract import TERMINAL

EXAMPLE_LOOP = ROOT / "examples" / "user-code" / "train_mlp.py"
DEFAULT_WORKLOADS = "tiny_cnn,resnet18,mobilenet_v2,vgg11,transformer"
CUBLAS_WORKSPACE = ":4096:8"  # as pcs_ray.executors.training: deterministic cuBLAS GEMMs need it before the first handle

#: What a pinned user run records about itself, then the example loop it runs (paced so a stop lands mid-run).
PROBE_SOURCE = '''"""pcs-ray real-GPU check: what this rank sees of its GPU, then examples/user-code/train_mlp.py's loop."""
import importlib.util
import json
import os
import time
from pathlib import Path

import torch

import pcs_ray.train as train
from pcs_ray.executors.preflight import seen_here
from pcs_ray.api import strict_json


def _seen():
    """What this rank sees of its GPU (the preflight's record), with the run's own context."""
    ctx = train.get_context()
    out = seen_here()
    out.update(device=ctx.device, job_id=ctx.job_id, attempt=ctx.attempt, rank=ctx.world_rank,
               cublas_workspace_config=os.environ.get("CUBLAS_WORKSPACE_CONFIG"), resumed_from_step=None)
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        state = torch.load(os.path.join(checkpoint, "state.pt"), map_location="cpu", weights_only=True)
        out["resumed_from_step"] = int(state["step"])
    return out


class _Paced:
    """pcs_ray.train with a pause before each report: the run lasts long enough to be stopped mid-way."""

    def __init__(self, module, pace_s):
        self._module, self._pace_s = module, pace_s

    def __getattr__(self, name):
        return getattr(self._module, name)

    def report(self, *args, **kwargs):
        time.sleep(self._pace_s)
        return self._module.report(*args, **kwargs)


def loop(config):
    ctx = train.get_context()
    folder = Path(config["probe_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    seen = _seen()
    (folder / f"{ctx.job_id}-{ctx.attempt}-{ctx.world_rank}.json").write_text(strict_json.dumps(seen))
    spec = importlib.util.spec_from_file_location("pcs_ray_check_train_mlp", Path(__file__).with_name("train_mlp.py"))
    mlp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mlp)
    if config.get("pace_s"):
        mlp.train = _Paced(train, float(config["pace_s"]))
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        mlp.train_loop(config)
    finally:
        torch.use_deterministic_algorithms(was)
'''


@dataclass
class Check:
    """One check's verdict: ``PASS``, ``FAIL`` or ``SKIP`` (never counted as a pass), a one-line detail."""

    name: str
    status: str
    detail: str
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.status} {self.name} ({self.seconds:.1f} s): {' '.join(self.detail.split())}"


def verdict(name: str, problems: list[str], passed: str, seconds: float = 0.0, figures: dict | None = None) -> Check:
    """``FAIL`` with every problem on the one line, or ``PASS`` with ``passed``."""
    return Check(name, "FAIL" if problems else "PASS", "; ".join(problems) if problems else passed, round(seconds, 2),
                 figures or {})


def _error_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400]


def run_problems(label: str, run: dict, status: str, step: int | None, want_cuda: bool) -> list[str]:
    """What is wrong with one run's summary (``_run_summary``) against the status and step it should end at."""
    out = []
    if run.get("status") != status or (step is not None and run.get("step") != step):
        error = f" ({' '.join(str(run['error']).split())[-300:]})" if run.get("error") else ""
        out.append(f"{label} ended {run.get('status')} at step {run.get('step')}, want {status}"
                   f"{'' if step is None else f' at {step}'}{error}")
    if want_cuda and run.get("emulated") is not False:
        out.append(f"{label} was not on CUDA (emulated={run.get('emulated')})")
    return out


def weight_differences(a: dict, b: dict) -> list[str]:
    """The tensors (by name) that are not bitwise equal, missing from one side included."""
    import torch

    keys = sorted(set(a) | set(b))
    return [k for k in keys if k not in a or k not in b or not torch.equal(a[k].cpu(), b[k].cpu())]


def resume_problems(total: int, reference: dict, runs: list[dict], differing: list[str], tensors: int,
                    want_cuda: bool, loop_resumed: list | None = None) -> list[str]:
    """A stopped-and-resumed job against its uninterrupted run: a stop that took mid-run, each resume at the
    stopped run's step (and, for user code, the loop loading exactly that checkpoint), the last run finishing,
    and bitwise-equal final weights."""
    out = run_problems("the uninterrupted run", reference, "finished", total, want_cuda)
    if not runs:
        return out + ["no stopped run"]
    for i, run in enumerate(runs[:-1]):
        out += run_problems(f"stopped run {i}", run, "preempted", None, want_cuda)
        if run.get("status") == "preempted" and not 0 < (run.get("step") or 0) < total:
            out.append(f"stopped run {i} stopped at step {run.get('step')} of {total}: nothing to resume")
    out += run_problems(f"resumed run {len(runs) - 1}", runs[-1], "finished", total, want_cuda)
    for i, (before, after) in enumerate(zip(runs, runs[1:]), start=1):
        if after.get("start_step") != before.get("step"):
            out.append(f"run {i} started at step {after.get('start_step')}, run {i - 1} stopped at {before.get('step')}")
        if loop_resumed is not None:
            got = loop_resumed[i] if i < len(loop_resumed) else None
            if got != before.get("step"):
                out.append(f"run {i}'s loop loaded the checkpoint of step {got}, want {before.get('step')}")
    if differing:
        out.append(f"final weights differ from the uninterrupted run's in {len(differing)} of {tensors} tensors "
                   f"({', '.join(differing[:4])}{', ...' if len(differing) > 4 else ''})")
    return out


def energy_problems(label: str, view: dict | None) -> list[str]:
    """The job view's energy must be measured: ``source`` ``nvml`` and joules above zero."""
    if view is None:
        return [f"no {label} job in status"]
    energy = view.get("energy")
    problems = run_problems(f"{label} job {view.get('id')}", {"status": view.get("state"), "step": view.get("steps"),
                                                             "emulated": view.get("emulated")},
                            "finished", view.get("total_steps"), want_cuda=True)
    if not energy or energy.get("source") != "nvml" or not (energy.get("joules") or 0) > 0:
        problems.append(f"{label} job {view.get('id')} energy is {strict_json.dumps(energy)}, want source 'nvml' and joules > 0")
    return problems


def _median(values):
    return statistics.median(values) if values else None


def _start_ray(node_name: str, gpus: int, temp_dir: str):
    from pcs_ray.executors.emulation import RAY_WORKER_ENV

    os.environ.update(RAY_WORKER_ENV)
    # Rank processes import pcs-ray from this checkout, whatever their working dir (a user run's is its own).
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    ray = start_ray({node_name: gpus}, cpus=max(2, os.cpu_count() or 2), object_store_memory=200 * 1024 * 1024,
                    logging_level="ERROR", _temp_dir=temp_dir)

    @ray.remote(num_cpus=0)
    class Recorder:
        """What runners report: progress per step and NVML readings per rank."""

        def __init__(self):
            self.progress, self.telemetry = [], []

        def report_progress(self, job_id, step, step_time_s, **extra):
            self.progress.append((job_id, step, step_time_s, time.time(), extra))

        def report_telemetry(self, job_id, attempt, node, index, reading):
            self.telemetry.append((job_id, attempt, node, index, reading))

        def of(self, job_id):
            return ([p for p in self.progress if p[0] == job_id], [t for t in self.telemetry if t[0] == job_id])

    return ray, Recorder.remote()


def _wait_step(ray, recorder, job_id: str, step: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while max([p[1] for p in ray.get(recorder.of.remote(job_id))[0]], default=0) < step:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{job_id} did not reach step {step} in {timeout:g} s")
        time.sleep(0.05)


def _phase_s(outcome, later: str, earlier: str) -> float | None:
    t = outcome.timings or {}
    return round(t[later] - t[earlier], 4) if later in t and earlier in t else None


def _run_summary(outcome) -> dict:
    return {"status": outcome.status, "start_step": outcome.start_step, "step": outcome.step,
            "emulated": outcome.emulated, "runner": outcome.runner, "error": outcome.error,
            "start_to_run_s": _phase_s(outcome, "run_called", "launched"),
            "restore_s": _phase_s(outcome, "restored", "run_called"),
            "first_step_s": _phase_s(outcome, "first_step", "restored"),
            "checkpoint_s": _phase_s(outcome, "saved", "last_step_end")}


def _energy(readings: list[dict]) -> dict:
    readings = sorted(readings, key=lambda r: r.get("ts") or 0.0)
    counter = readings[-1].get("energy_j") if readings else None
    integral = sum(0.5 * (a["power_w"] + b["power_w"]) * (b["ts"] - a["ts"]) for a, b in zip(readings, readings[1:])
                   if a.get("power_w") is not None and b.get("power_w") is not None)
    span = readings[-1]["ts"] - readings[0]["ts"] if len(readings) > 1 else 0.0
    power = [r["power_w"] for r in readings if r.get("power_w") is not None]
    return {"readings": len(readings), "counter_j": counter, "power_integral_j": round(integral, 2),
            "span_s": round(span, 2), "mean_power_w": round(statistics.mean(power), 1) if power else None,
            "max_power_w": max(power) if power else None,
            "sm_clock_mhz": _median([r["sm_clock_mhz"] for r in readings if r.get("sm_clock_mhz")]),
            "utilization_pct": _median([r["utilization_pct"] for r in readings if r.get("utilization_pct") is not None]),
            "temperature_c": max([r["temperature_c"] for r in readings if r.get("temperature_c") is not None], default=None),
            "clock_events": sorted({e for r in readings for e in (r.get("clock_events") or [])})}


def _step_times(ray, pool, recorder, node: str, workloads: list[str], steps: int, warmup: int, root: Path) -> dict:
    from pcs_ray.contract import GPUSlot, RunRequest
    from pcs_ray.workloads.device_model import emulated_step_s
    out = {}
    for name in workloads:
        params = {"seed": 1}
        request = RunRequest(f"steps-{name}", name, steps, (GPUSlot(node, 0),), str(root / f"steps-{name}"),
                             params=params, reporter=recorder, report_interval_s=0.0)
        outcome = pool.launch(request).outcome(timeout=600)
        progress, _ = ray.get(recorder.of.remote(request.job_id))
        times = [p[2] for p in progress if p[1] > warmup]
        try:
            nominal = emulated_step_s(name, params, 1, 1.0)
        except Exception:
            nominal = None
        median = _median(times)
        out[name] = {"status": outcome.status, "emulated": outcome.emulated, "steps_timed": len(times),
                     "device_step_s": round(median, 5) if median else None,
                     "p90_step_s": round(sorted(times)[int(0.9 * (len(times) - 1))], 5) if times else None,
                     "nominal_emulated_step_s": nominal,
                     "nominal_over_device": round(nominal / median, 1) if nominal and median else None,
                     "error": outcome.error}
    return out


def _resume(ray, pool, launch_module, recorder, node: str, workload: str, steps: int, root: Path) -> dict:
    import torch

    from pcs_ray.executors.checkpoint import load_checkpoint
    from pcs_ray.contract import GPUSlot, RunRequest

    slot = (GPUSlot(node, 0),)
    params = {"seed": 7}

    def request(job, directory, attempt=0):
        return RunRequest(job, workload, steps, slot, str(directory), params=params, reporter=recorder,
                          report_interval_s=0.5, attempt=attempt)

    reference_dir, resumed_dir = root / "reference", root / "resumed"
    reference = pool.launch(request("reference", reference_dir)).outcome(timeout=600)
    runs = []
    marks = [steps // 3, 2 * steps // 3]
    for attempt in range(3):
        job = request("resumed", resumed_dir, attempt)
        handle = launch_module.launch(job) if attempt == 1 else pool.launch(job)  # a fresh process, then warm again
        if attempt < 2:
            _wait_step(ray, recorder, "resumed", marks[attempt])
            handle.request_stop()
        runs.append(handle.outcome(timeout=600))
    a, b = load_checkpoint(reference_dir).state["model"], load_checkpoint(resumed_dir).state["model"]
    identical = a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)
    sizes = [p.stat().st_size for p in resumed_dir.iterdir() if p.is_file()]
    _, telemetry = ray.get(recorder.of.remote("reference"))
    return {
        "workload": workload, "steps": steps,
        "reference": _run_summary(reference),
        "runs": [_run_summary(o) for o in runs],
        "steps_lost": [b.start_step - a.step for a, b in zip(runs, runs[1:])],
        "bitwise_identical": identical,
        "checkpoint_bytes": max(sizes) if sizes else None,
        "energy": _energy([t[4] for t in telemetry]),
    }


def write_user_code(folder: Path) -> Path:
    """The working dir of the check's user job: the probe and a copy of the example loop it runs."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe.py").write_text(PROBE_SOURCE)
    shutil.copy(EXAMPLE_LOOP, folder / "train_mlp.py")
    return folder


def user_code(workdir: Path, probe_dir: Path, pace_s: float, **config) -> dict:
    """``RunRequest.code`` for the probe job, as a job file would give it."""
    return {"entrypoint": "probe.py:loop", "working_dir": str(workdir),
            "runtime_env": {"env_vars": {"CUBLAS_WORKSPACE_CONFIG": CUBLAS_WORKSPACE}},
            "config": {"lr": 0.02, "batch_size": 64, "samples": 1024, "hidden": 64, "seed": 3, **config,
                       "probe_dir": str(probe_dir), "pace_s": pace_s}}


def probe_record(probe_dir: Path, job_id: str, attempt: int) -> dict | None:
    path = probe_dir / f"{job_id}-{attempt}-0.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _log_tail(log_dir: str | None, chars: int = 1500) -> str | None:
    path = Path(log_dir) / "rank-0.log" if log_dir else None
    return path.read_text(errors="replace")[-chars:] if path is not None and path.is_file() else None


class RayLauncher:
    """User runs as pcs-ray starts them (``launch_user``: a fresh actor per rank with the job's runtime_env),
    stopped through the actor once the run has reported ``stop_at``; a run still going after ``run_timeout_s``
    or at ``deadline`` (``time.monotonic()``) is killed and raises."""

    def __init__(self, ray, recorder, deadline: float, run_timeout_s: float):
        self.ray, self.recorder, self.deadline, self.run_timeout_s = ray, recorder, deadline, run_timeout_s

    def run(self, request, stop_at: int | None = None):
        from pcs_ray.executors.user_run import launch_user

        ends = min(self.deadline, time.monotonic() + self.run_timeout_s)
        handle = launch_user(request)
        if stop_at is not None:
            while time.monotonic() < ends and not self.ray.wait([handle.done], timeout=0)[0]:
                progress, _ = self.ray.get(self.recorder.of.remote(request.job_id))
                if max([p[1] for p in progress], default=0) >= stop_at:
                    break
                time.sleep(0.02)
            handle.request_stop()
        try:
            return handle.outcome(timeout=max(5.0, ends - time.monotonic()))
        except self.ray.exceptions.GetTimeoutError:
            handle.kill()
            raise TimeoutError(f"user run {request.job_id} (attempt {request.attempt}) still going after "
                               f"{self.run_timeout_s:g} s or at --budget-s") from None


class InProcessLauncher:
    """User runs in this process (``run_rank``), asked to stop once the loop has reported ``stop_at``
    steps: the same loop and verdicts without Ray, for tests."""

    def run(self, request, stop_at: int | None = None):
        import pcs_ray.train.session as session
        from pcs_ray.executors.user_run import run_rank

        stop = (lambda: session.current().step >= stop_at) if stop_at is not None else (lambda: False)
        return run_rank(request, stop, 0, 1, None, {})


def _user_request(job_id: str, slot, root: Path, code: dict, steps: int, attempt: int, reporter=None):
    from pcs_ray.contract import RunRequest

    return RunRequest(job_id, "user:probe.py:loop", steps, (slot,), str(root / "checkpoints" / job_id), code=code,
                      reporter=reporter, report_interval_s=0.0, attempt=attempt,
                      log_dir=str(root / "logs" / job_id / f"attempt-{attempt}"))


def pinned_user_run(launcher, slot, root: Path, steps: int, want_cuda: bool, nvml_uuid: str | None,
                    reporter=None) -> tuple[Check, Check]:
    """``user_pinning`` and ``pinned_uuid`` from one user run pinned to ``slot``."""
    began = time.monotonic()
    workdir, probes = write_user_code(root / "user-code"), root / "probes"
    request = _user_request("pin", slot, root, user_code(workdir, probes, 0.0), steps, 0, reporter)
    outcome = launcher.run(request)
    seen = probe_record(probes, "pin", 0)
    run = _run_summary(outcome)
    figures = {"run": run, "seen_in_run": seen, "pinned_index": slot.index, "nvml_uuid": nvml_uuid}
    if outcome.status != "finished":
        figures["rank_log_tail"] = _log_tail(request.log_dir)
    seconds = time.monotonic() - began
    pinning = verdict("user_pinning", run_problems("the user run", run, "finished", steps, want_cuda)
                      + pinning_problems(seen, slot.index, want_cuda),
                      f"run finished {steps} steps on {seen and seen.get('device')} with CUDA_VISIBLE_DEVICES="
                      f"{seen and seen.get('cuda_visible_devices')} and CUDA_DEVICE_ORDER=PCI_BUS_ID", seconds, figures)
    if not want_cuda:
        uuid = Check("pinned_uuid", "SKIP", "needs NVML and a CUDA device (--cpu rehearsal)")
    else:
        uuid = verdict("pinned_uuid", uuid_problems(seen, nvml_uuid, slot.index),
                       f"CUDA device 0 inside the run is {normal_uuid(seen and seen.get('torch_uuid'))}, "
                       f"NVML's GPU {slot.index} ({nvml_uuid})", 0.0, {"same_run_as": "user_pinning"})
    return pinning, uuid


def user_resume(launcher, slot, root: Path, steps: int, stop_at: int, pace_s: float, want_cuda: bool,
                reporter=None) -> Check:
    """``user_resume``: the probe job uninterrupted, then stopped at ``stop_at`` and resumed in a fresh run."""
    import torch

    import pcs_ray.train.store as store

    began = time.monotonic()
    workdir, probes = write_user_code(root / "user-code"), root / "probes"
    code = user_code(workdir, probes, pace_s)
    reference = launcher.run(_user_request("whole", slot, root, code, steps, 0, reporter))
    runs, logs = [], []
    for attempt in range(2):
        request = _user_request("parts", slot, root, code, steps, attempt, reporter)
        runs.append(launcher.run(request, stop_at=stop_at if attempt == 0 else None))
        logs.append(request.log_dir)
    loop_resumed = [(probe_record(probes, "parts", a) or {}).get("resumed_from_step") for a in range(len(runs))]

    def weights(job):
        found = store.newest(root / "checkpoints" / job)
        return torch.load(found[0] / "state.pt", map_location="cpu", weights_only=True)["model"] if found else {}

    a, b = weights("whole"), weights("parts")
    differing = weight_differences(a, b) if a and b else ["<no final checkpoint>"]
    summaries = [_run_summary(o) for o in runs]
    figures = {"steps": steps, "stop_requested_at": stop_at, "reference": _run_summary(reference), "runs": summaries,
               "loop_resumed_from": loop_resumed, "tensors": len(a), "differing": differing}
    if any(o.status == "failed" for o in [reference, *runs]):
        figures["rank_log_tails"] = [_log_tail(d) for d in logs]
    stopped = summaries[0].get("step")
    return verdict("user_resume", resume_problems(steps, figures["reference"], summaries, differing, len(a),
                                                  want_cuda, loop_resumed),
                   f"stopped at step {stopped}, resumed there from the loop's own checkpoint, finished {steps}: "
                   f"{len(a)} tensors bitwise equal to the uninterrupted run", time.monotonic() - began, figures)


def builtin_resume(workload: str, root: Path, steps: int, stop_after: int, want_cuda: bool) -> Check:
    """``builtin_resume:<workload>``: run_training uninterrupted, and stopped after ``stop_after`` steps then resumed."""
    from pcs_ray.executors.checkpoint import load_checkpoint
    from pcs_ray.executors.training import run_training
    from pcs_ray.contract import GPUSlot, RunRequest

    began = time.monotonic()
    folder = root / "builtin" / workload

    def request(name):
        return RunRequest(f"resume-{workload}", workload, steps, (GPUSlot("bench", 0),), str(folder / name),
                          params={"seed": 7})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reference = run_training(request("whole"))
        calls = itertools.count()
        runs = [run_training(request("parts"), lambda: next(calls) >= stop_after), run_training(request("parts"))]
    flagged = sorted({str(w.message).splitlines()[0][:200] for w in caught if "determinis" in str(w.message)})
    whole, parts = load_checkpoint(folder / "whole"), load_checkpoint(folder / "parts")
    a = whole.state["model"] if whole else {}
    differing = weight_differences(a, parts.state["model"]) if whole and parts else ["<no final checkpoint>"]
    summaries = [_run_summary(o) for o in runs]
    problems = resume_problems(steps, _run_summary(reference), summaries, differing, len(a), want_cuda)
    if problems and flagged:
        problems.append(f"torch flagged nondeterministic kernels: {' | '.join(flagged)[:400]}")
    figures = {"steps": steps, "reference": _run_summary(reference), "runs": summaries, "tensors": len(a),
               "differing": differing, "nondeterministic_warnings": flagged}
    return verdict(f"builtin_resume:{workload}", problems,
                   f"stopped at step {summaries[0]['step']}, resumed, finished {steps}: {len(a)} tensors bitwise equal"
                   f"{' on CUDA' if want_cuda else ''}", time.monotonic() - began, figures)


def node_preflight(inventory) -> Check:
    """``preflight``: the product's GPU preflight (what ``pcs-ray doctor`` and node registration run) on every
    GPU of this node."""
    from pcs_ray.executors.preflight import check_node

    began = time.monotonic()
    verdicts = check_node([(g.index, g.uuid) for g in inventory.gpus])
    return verdict("preflight", [v.line() for v in verdicts if not v.passed],
                   f"{len(verdicts)} checks of {len(inventory.gpus)} GPU(s) passed (pinning, uuid)",
                   time.monotonic() - began, {"verdicts": [v.to_dict() for v in verdicts]})


def energy_job_files(folder: Path, workdir: Path, probe_dir: Path, builtin_steps: int, user_steps: int,
                     pace_s: float) -> dict[str, Path]:
    """The two jobs whose energy the cluster must measure: a built-in workload and the probe's user code."""
    import yaml

    jobs = {
        "builtin": {"name": "check-energy-builtin", "workload": "tiny_cnn", "steps": builtin_steps, "gpus": 1,
                    "params": {"seed": 1}},
        "user": {"name": "check-energy-user", "entrypoint": "probe.py:loop",
                 "working_dir": os.path.relpath(workdir, folder), "steps": user_steps, "gpus": 1,
                 "runtime_env": {"env_vars": {"CUBLAS_WORKSPACE_CONFIG": CUBLAS_WORKSPACE}},
                 "config": user_code(workdir, probe_dir, pace_s)["config"]},
    }
    out = {}
    for kind, job in jobs.items():
        out[kind] = folder / f"energy-{kind}.yaml"
        out[kind].write_text(yaml.safe_dump(job, sort_keys=False))
    return out


def cluster_energy(root: Path, timeout_s: float, builtin_steps: int, user_steps: int, pace_s: float,
                   job_timeout_s: float = 180.0) -> tuple[dict, dict]:
    """``pcs-ray up --local`` here (GPUs through NVML), the two energy jobs submitted and waited for (at most
    ``job_timeout_s`` together), their views from ``status``, then ``pcs-ray down``. Returns (views by kind, figures)."""
    state_dir = root / "state"
    deadline = time.monotonic() + timeout_s
    began = time.monotonic()
    cli = Cli(cli_env())  # as a new user's shell

    def left() -> float:
        return max(5.0, deadline - time.monotonic())

    files = energy_job_files(root, write_user_code(root / "user-code"), root / "probes", builtin_steps, user_steps, pace_s)
    views: dict = {}
    figures: dict = {}
    cluster = None
    try:
        with up_local(cli, state_dir, "--nodes", "1", timeout=left(), down_timeout=60) as cluster:
            figures["up_s"] = round(time.monotonic() - began, 1)
            figures["nodes"] = [{k: v for k, v in n.items() if k != "pids"} for n in cluster.up.get("nodes", [])]
            address = ("--address", cluster.up["address"])
            ids = {kind: cli.json("submit", path, *address, timeout=left())["id"] for kind, path in files.items()}
            figures["ids"] = ids

            def views_now() -> dict:
                jobs = {str(j.get("id")): j for j in cli.json("status", *address, timeout=left()).get("jobs", [])}
                return {kind: jobs.get(str(jid)) for kind, jid in ids.items()}

            ends = min(time.monotonic() + job_timeout_s, deadline)
            while True:  # one GPU: the jobs run one after the other; a job that never ends costs at most job_timeout_s
                views = views_now()
                if all(v is not None and v.get("state") in TERMINAL for v in views.values()) or time.monotonic() > ends:
                    break
                time.sleep(2.0)
            time.sleep(2.0)  # a run's last NVML reading is fire-and-forget: let it land, then read the views again
            views = views_now()
        figures["jobs"] = {kind: None if v is None else {k: v.get(k) for k in ("id", "state", "steps", "total_steps",
                                                                               "emulated", "attempts", "error", "note",
                                                                               "energy")}
                           for kind, v in views.items()}
        for kind, v in views.items():  # a user run that did not finish: its own log says why
            if v is not None and v.get("state") != "finished":
                logs = sorted((state_dir / "logs" / str(v.get("id"))).glob("attempt-*/rank-0.log"))
                figures[f"{kind}_rank_log_tail"] = logs[-1].read_text(errors="replace")[-1500:] if logs else None
    except Exception as exc:  # reported with the nodes' log tails; down has run
        figures["error"] = _error_line(exc)
        figures["logs"] = {p.name: p.read_text(errors="replace")[-1200:] for p in sorted((state_dir / "logs").glob("*"))
                           if p.is_file()}
    figures["down_rc"] = cluster.down.get("rc") if cluster is not None else None
    figures["wall_s"] = round(time.monotonic() - began, 1)
    return views, figures


def energy_checks(root: Path, timeout_s: float, builtin_steps: int, user_steps: int, pace_s: float) -> list[Check]:
    began = time.monotonic()
    views, figures = cluster_energy(root, timeout_s, builtin_steps, user_steps, pace_s)
    seconds = time.monotonic() - began
    out = []
    for kind in ("builtin", "user"):
        problems = energy_problems(kind, views.get(kind))
        if figures.get("error"):
            problems.insert(0, f"cluster: {figures['error']}")
        energy = (views.get(kind) or {}).get("energy") or {}
        out.append(verdict(f"energy_{kind}", problems, f"job {(views.get(kind) or {}).get('id')}: {energy.get('joules', 0):.1f} J "
                           f"from NVML (source nvml, {energy.get('gpus_read')} GPU reading(s))",
                           seconds if kind == "builtin" else 0.0, figures if kind == "builtin" else {"same_cluster_as": "energy_builtin"}))
    return out


LONG_JOB = """# written by bench/real_gpu.py: a ResNet-18 long enough that its steps, not its start, dominate
name: resnet18-long
workload: resnet18
steps: {steps}
gpus: 1
step_time: 0.5
checkpoint_every: 200
params: {{batch_size: 16, lr: 0.05, num_samples: 2048, seed: 1}}
"""


def _cli(state_dir: Path, timeout: float, jobs: int = 3, steps: int = 1500) -> dict:
    """The README's live quick start on this machine: up (NVML), ``jobs`` submissions one after another
    (``--wait``: the first teaches the coordinator the workload), status, down."""
    began = time.time()
    cli = Cli(cli_env(), timeout=timeout)  # as a new user's shell
    out: dict = {}
    job_file = state_dir.parent / "resnet18-long.yaml"
    job_file.parent.mkdir(parents=True, exist_ok=True)
    job_file.write_text(LONG_JOB.format(steps=steps))
    cluster = None
    try:
        with up_local(cli, state_dir, "--nodes", "1", timeout=timeout) as cluster:
            out["up"] = {"nodes": [{k: v for k, v in n.items() if k != "pids"} for n in cluster.up.get("nodes", [])],
                         "s": round(time.time() - began, 1)}
            address = ("--address", cluster.up["address"])
            out["submits"] = [cli("submit", job_file, *address, "--wait").stdout.strip() for _ in range(jobs)]
            status = cli.json("status", *address)
        out["jobs"] = [{"id": j["id"], "state": j["state"], "emulated": j.get("emulated"),
                        "jct_s": round(j["finish"] - j["submit"], 2),
                        "predicted_at_submission_s": round(j["first_predicted"] - j["submit"], 2),
                        "error_pct": round(100 * abs((j["finish"] - j["submit"]) - (j["first_predicted"] - j["submit"]))
                                           / (j["first_predicted"] - j["submit"]), 1),
                        "step_time_s": j.get("step_time"), "energy": j.get("energy")} for j in status["jobs"]]
        out["speeds"], out["runners"] = status.get("speeds"), status.get("runners")
    except Exception as exc:  # reported with the nodes' log tails; down has run
        out["error"] = str(exc)
        out["logs"] = {p.name: p.read_text(errors="replace")[-1500:] for p in sorted((state_dir / "logs").glob("*"))
                       if p.is_file()}
    out["down"] = cluster.down if cluster is not None else None
    out["wall_s"] = round(time.time() - began, 1)
    return out


QUICK = {"pin_steps": 30, "user_steps": 400, "user_stop_at": 100, "pace_s": 0.005, "builtin_steps": 12,
         "builtin_stop_after": 5, "energy_builtin_steps": 1000, "energy_user_steps": 400, "budget_s": 330,
         "run_timeout_s": 90}
FULL = {"pin_steps": 60, "user_steps": 2000, "user_stop_at": 700, "pace_s": 0.002, "builtin_steps": 60,
        "builtin_stop_after": 23, "energy_builtin_steps": 3000, "energy_user_steps": 2000, "budget_s": 900,
        "run_timeout_s": 300}


#: The checks ``--only`` can name, each with the checks it runs (``builtin``: every ``builtin_resume:<workload>``).
GROUPS = {"builtin": (), "preflight": ("preflight",), "user": ("user_pinning", "pinned_uuid", "user_resume"),
          "energy": ("energy_builtin", "energy_user")}


def group_of(check: str) -> str:
    return "builtin" if check.startswith("builtin_resume:") else next(g for g, names in GROUPS.items() if check in names)


def not_asked(check: str, only: set[str]) -> Check:
    """The SKIP line of a check ``--only`` left out."""
    return Check(check, "SKIP", f"not asked for (--only {','.join(g for g in GROUPS if g in only)})")


def plan(workloads: list[str]) -> list[str]:
    """Every check's name, in the order they run."""
    return [*[f"builtin_resume:{w}" for w in workloads], "preflight", "user_pinning", "pinned_uuid", "user_resume",
            "energy_builtin", "energy_user"]


def gpu_missing(inventory, cuda_available: bool, cuda_version: str | None) -> str | None:
    """Why the GPU checks cannot run here (one line), or None."""
    if inventory is None or not inventory.gpus:
        return "no NVIDIA GPU found through NVML (nvidia-ml-py and a driver are needed)"
    if not cuda_available:
        return f"NVML sees {len(inventory.gpus)} GPU(s) but torch has no CUDA device (torch CUDA {cuda_version})"
    return None


def summarise(checks: list[Check], seconds: float, where: str, rehearsal: bool) -> tuple[int, str]:
    """The exit status (1 if any check failed) and the summary line."""
    counts = {s: sum(c.status == s for c in checks) for s in ("PASS", "FAIL", "SKIP")}
    failed = counts["FAIL"] > 0
    head = "FAIL" if failed else ("REHEARSAL PASS (CPU: not a real-GPU result)" if rehearsal else "PASS")
    return (1 if failed else 0), (f"{head}: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped "
                                  f"of {len(checks)} checks in {seconds:.1f} s on {where}")


def pin_target(inventory, requested: int | None) -> tuple[int, str | None]:
    """The NVML index the user job is pinned to (``requested``, else the last GPU: on a machine with
    several, CUDA's index 0 inside the run is then not NVML's 0) and NVML's UUID for it (None off NVML)."""
    gpus = inventory.gpus if inventory is not None else []
    index = (len(gpus) - 1 if gpus else 0) if requested is None else requested
    by_index = {g.index: g.uuid for g in gpus}
    return index, by_index.get(index)


def run_checks(args, settings: dict, inventory, root: Path, deadline: float) -> tuple[list[Check], dict]:
    """Every check in ``plan`` order; one not reached before ``deadline`` fails, one that raises fails with its error."""
    from pcs_ray.contract import GPUSlot

    want_cuda = not args.cpu
    names = plan(args.workloads)
    done: dict[str, Check] = {}
    figures: dict = {}

    def guarded(names_here: list[str], fn):
        if time.monotonic() > deadline:
            for n in names_here:
                done[n] = Check(n, "FAIL", f"not run: --budget-s {settings['budget_s']:g} spent before it")
            return
        began = time.monotonic()
        try:
            for c in fn():
                done[c.name] = c
        except Exception as exc:
            for n in names_here:
                done.setdefault(n, Check(n, "FAIL", f"raised {_error_line(exc)}", round(time.monotonic() - began, 2),
                                         {"traceback": traceback.format_exc()[-2000:]}))

    node = inventory.name if inventory is not None else "bench"
    gpus = len(inventory.gpus) if inventory is not None else 1
    pinned, nvml_uuid = pin_target(inventory, args.gpu)
    slot = GPUSlot(node, pinned)
    only = args.only
    for n in names:
        if group_of(n) not in only:
            done[n] = not_asked(n, only)
    for w in args.workloads if "builtin" in only else ():  # first: in this process, the cheapest and least likely to hang
        guarded([f"builtin_resume:{w}"], lambda w=w: [builtin_resume(w, root, settings["builtin_steps"],
                                                                     settings["builtin_stop_after"], want_cuda)])
    if "preflight" in only:
        if args.cpu:
            done["preflight"] = Check("preflight", "SKIP", "needs NVML and a CUDA device (--cpu rehearsal)")
        else:
            guarded(["preflight"], lambda: [node_preflight(inventory)])
    _release_cuda_cache()
    ray_ = None
    try:
        if "user" not in only and not (args.full and not args.cpu):
            raise _NotAsked
        if time.monotonic() > deadline:  # not worth starting Ray for checks that cannot run
            raise TimeoutError(f"not run: --budget-s {settings['budget_s']:g} spent before it")
        began = time.monotonic()
        ray_, recorder = _start_ray(node, gpus, str(root / "ray"))
        figures["ray_start_s"] = round(time.monotonic() - began, 1)
        launcher = RayLauncher(ray_, recorder, deadline, settings["run_timeout_s"])
        if "user" in only:
            guarded(["user_pinning", "pinned_uuid"],
                    lambda: pinned_user_run(launcher, slot, root / "pin", settings["pin_steps"], want_cuda, nvml_uuid, recorder))
            guarded(["user_resume"], lambda: [user_resume(launcher, slot, root / "resume", settings["user_steps"],
                                                          settings["user_stop_at"], settings["pace_s"], want_cuda,
                                                          recorder)])
        if args.full and not args.cpu:
            try:
                figures["pool"] = _pool_figures(ray_, recorder, inventory, args, root / "pool")
            except Exception as exc:  # figures only: the checks above keep their verdicts
                figures["pool"] = {"error": _error_line(exc)}
    except _NotAsked:
        pass
    except TimeoutError as exc:
        for n in ("user_pinning", "pinned_uuid", "user_resume"):
            done.setdefault(n, Check(n, "FAIL", str(exc)))
    except Exception as exc:  # Ray itself would not start: the checks that need it fail with why
        for n in ("user_pinning", "pinned_uuid", "user_resume"):
            done.setdefault(n, Check(n, "FAIL", f"Ray: {_error_line(exc)}"))
    finally:
        if ray_ is not None:
            ray_.shutdown()
    if "energy" in only:
        if args.cpu:
            for n in ("energy_builtin", "energy_user"):
                done[n] = Check(n, "SKIP", "needs NVML and a CUDA device (--cpu rehearsal)")
        else:
            guarded(["energy_builtin", "energy_user"],
                    lambda: energy_checks(root / "cluster", max(30.0, deadline - time.monotonic()),
                                          settings["energy_builtin_steps"], settings["energy_user_steps"],
                                          settings["pace_s"]))
    return [done.get(n) or Check(n, "FAIL", "not run") for n in names], figures


class _NotAsked(Exception):
    """``--only`` left out every check that needs Ray."""


def _release_cuda_cache() -> None:
    """Hand the built-in runs' cached device memory back before the user runs share the GPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _pool_figures(ray_, recorder, inventory, args, root: Path) -> dict:
    """``--full``: the warm pool's device step times and its resume (figures only, no verdict)."""
    from pcs_ray.executors import launch as launch_module
    from pcs_ray.executors.pool import WarmPool
    from pcs_ray.contract import GPUSlot

    pool = WarmPool([GPUSlot(inventory.name, g.index) for g in inventory.gpus])
    try:
        pool.ready(timeout=300)
        return {"steps": _step_times(ray_, pool, recorder, inventory.name, args.workloads, 80, 10, root),
                "resume": _resume(ray_, pool, launch_module, recorder, inventory.name, "resnet18", 300, root)}
    finally:
        pool.shutdown(kill_runners=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="Short jobs, about 4 minutes on one H100 (the default).")
    size.add_argument("--full", action="store_true", help="Longer jobs, plus the warm pool's step times and resume.")
    parser.add_argument("--cpu", action="store_true", help="Rehearse without a GPU: GPU-only checks are SKIP lines.")
    parser.add_argument("--workloads", default=None,
                        help=f"Built-in workloads to resume [default: {DEFAULT_WORKLOADS}; with --cpu: tiny_cnn].")
    parser.add_argument("--gpu", type=int, default=None, help="NVML index to pin the user job to [default: the last].")
    parser.add_argument("--budget-s", type=float, default=None, help="Stop starting checks after this many seconds.")
    parser.add_argument("--cli", action="store_true", help="Also run the README's live quick start (figures only).")
    parser.add_argument("--out", type=Path, help="Also write the JSON object here.")
    parser.add_argument("--only", default=None,
                        help=f"Comma-separated groups of checks to run, of {', '.join(GROUPS)} (a rerun after a fix); "
                             "the others are SKIP lines [default: all].")
    args = parser.parse_args(argv)
    if args.only is None:
        args.only = set(GROUPS)
    else:
        asked = {g.strip() for g in args.only.split(",") if g.strip()}
        if not asked or asked - set(GROUPS):
            parser.error(f"--only {args.only}: choose from {', '.join(GROUPS)}")
        args.only = asked
    settings = dict(FULL if args.full else QUICK)
    if args.budget_s is not None:
        settings["budget_s"] = args.budget_s
    args.workloads = [w for w in (args.workloads or ("tiny_cnn" if args.cpu else DEFAULT_WORKLOADS)).split(",") if w]
    from pcs_ray.workloads.catalog import CATALOG

    unknown = [w for w in args.workloads if w not in CATALOG]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}: the built-ins are {', '.join(CATALOG)}")

    began = time.monotonic()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # before this process creates a cuBLAS handle
    from pcs_ray.cluster.discovery import nvml_inventory

    inventory = nvml_inventory()
    result: dict = {"mode": "cpu-rehearsal" if args.cpu else ("full" if args.full else "quick"), "settings": settings,
                    "torch": None, "cuda": None, "device_name": None,
                    "inventory": inventory.to_dict() if inventory is not None else None}
    missing = gpu_missing(inventory, False, None)
    if inventory is not None or args.cpu:  # torch takes seconds to import: only where it can matter
        import torch

        cuda = torch.cuda.is_available()
        missing = gpu_missing(inventory, cuda, torch.version.cuda)
        result.update(torch=torch.__version__, cuda=torch.version.cuda,
                      device_name=torch.cuda.get_device_name(0) if cuda else None)
    if args.gpu is not None and inventory is not None and not 0 <= args.gpu < len(inventory.gpus):
        parser.error(f"--gpu {args.gpu}: NVML lists GPUs 0..{len(inventory.gpus) - 1}")
    if missing and not args.cpu:
        checks = [Check(n, "FAIL", f"not run: {missing}") if group_of(n) in args.only else not_asked(n, args.only)
                  for n in plan(args.workloads)]
    else:
        if args.cpu:
            inventory = None  # a rehearsal pins to one logical GPU, whatever this machine has
        root = Path(tempfile.mkdtemp(prefix="pcs-ray-real-gpu-"))
        try:
            checks, result["run"] = run_checks(args, settings, inventory, root, began + settings["budget_s"])
            if args.cli and not args.cpu:
                result["cli"] = _cli(root / "cli-state", timeout=600)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    seconds = time.monotonic() - began
    where = "CPU (rehearsal)" if args.cpu else (result["device_name"] or "this machine (no CUDA device)")
    rc, summary = summarise(checks, seconds, where, args.cpu)
    result["checks"] = [asdict(c) for c in checks]
    result["wall_s"] = round(seconds, 1)
    text = strict_json.dumps(result, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    print(text)
    for c in checks:
        print(c.line())
    print(summary, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
