"""A real CUDA job through pcs-ray's runners, on a machine with NVIDIA GPUs: what logical GPUs cannot show.

Discovers the node through NVML as ``pcs-ray up`` / ``node-resources`` do,
starts a private embedded Ray with those GPUs' per-GPU resources, and hands
real training runs to the warm runner pool, then prints one JSON object:

* ``inventory``: the NVML discovery (names, UUIDs, power limits, clocks, links)
* ``idle_telemetry``: one NVML sample of every GPU before any run (power, energy counter, clocks, ...)
* ``pinning``: what the runner of GPU 0 was given (``CUDA_VISIBLE_DEVICES``, Ray's resources), whether its run
  was emulated (it must not be), and whether NVML lists the runner's process on that very GPU
* ``steps``: per workload, the median device step time (warm runner, after ``--warmup`` steps) beside the
  nominal emulated GPU's step (``workloads.device_model``) for the same batch
* ``resume``: one job preempted twice (a warm runner, then a freshly started cold runner, then warm again)
  against the same job uninterrupted: bitwise-equal weights, steps lost between runs, checkpoint and restore
  seconds, cold vs warm start
* ``energy``: the uninterrupted run's energy from NVML's counter (joules, as the coordinator journals it)
  beside the trapezoid integral of its power readings
* ``cli`` (``--cli``): ``pcs-ray up --local`` on this machine (its GPUs registered through NVML), three
  ResNet-18 jobs submitted one after another and waited for (the first teaches the coordinator the
  workload), each job's prediction at submission against its JCT and its measured energy from ``status``,
  and ``pcs-ray down``

Without NVML or a CUDA device it says so in one line and exits 2.

    PYTHONPATH=. python bench/real_gpu.py --cli
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WORKLOADS = "tiny_cnn,resnet18,mobilenet_v2,vgg11,transformer"


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _median(values):
    return statistics.median(values) if values else None


def _start_ray(node_name: str, gpus: int, temp_dir: str):
    import ray

    from executors.emulation import RAY_WORKER_ENV
    from pcs_ray.resources import node_gpu_resources

    os.environ.update(RAY_WORKER_ENV)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # this script's own private instance
    ray.init(num_cpus=max(2, os.cpu_count() or 2), num_gpus=gpus, resources=node_gpu_resources(node_name, gpus),
             include_dashboard=False, object_store_memory=200 * 1024 * 1024, log_to_driver=False,
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


def _gpu_processes(index: int) -> list[int] | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except Exception:
        return None


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
    from workloads.device_model import emulated_step_s
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

    from executors.checkpoint import load_checkpoint
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
    exe = [sys.executable, "-c", "import sys; from pcs_ray.cli import main; sys.argv[0] = 'pcs-ray'; sys.exit(main())"]
    began = time.time()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}  # as a new user's shell

    def call(*args, check=True):
        proc = subprocess.run([*exe, *args], capture_output=True, text=True, timeout=timeout, env=env)
        if check and proc.returncode:
            raise RuntimeError(f"pcs-ray {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
        return proc

    out: dict = {}
    job_file = state_dir.parent / "resnet18-long.yaml"
    job_file.parent.mkdir(parents=True, exist_ok=True)
    job_file.write_text(LONG_JOB.format(steps=steps))
    try:
        up = json.loads(call("up", "--local", "--nodes", "1", "--state-dir", str(state_dir), "--json").stdout)
        out["up"] = {"nodes": [{k: v for k, v in n.items() if k != "pids"} for n in up.get("nodes", [])],
                     "s": round(time.time() - began, 1)}
        address = ("--address", up["address"])
        out["submits"] = [call("submit", str(job_file), *address, "--wait").stdout.strip() for _ in range(jobs)]
        status = json.loads(call("status", *address, "--json").stdout)
        out["jobs"] = [{"id": j["id"], "state": j["state"], "emulated": j.get("emulated"),
                        "jct_s": round(j["finish"] - j["submit"], 2),
                        "predicted_at_submission_s": round(j["first_predicted"] - j["submit"], 2),
                        "error_pct": round(100 * abs((j["finish"] - j["submit"]) - (j["first_predicted"] - j["submit"]))
                                           / (j["first_predicted"] - j["submit"]), 1),
                        "step_time_s": j.get("step_time"), "energy": j.get("energy")} for j in status["jobs"]]
        out["speeds"], out["runners"] = status.get("speeds"), status.get("runners")
    except Exception as exc:  # reported with the nodes' log tails, and down still runs
        out["error"] = str(exc)
        out["logs"] = {p.name: p.read_text(errors="replace")[-1500:] for p in sorted((state_dir / "logs").glob("*"))
                       if p.is_file()}
    finally:
        down = call("down", "--state-dir", str(state_dir), check=False)
        out["down"] = {"rc": down.returncode, "stdout": down.stdout.strip()[-300:], "stderr": down.stderr.strip()[-300:]}
        out["wall_s"] = round(time.time() - began, 1)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help="Workloads to time on the device.")
    parser.add_argument("--steps", type=int, default=80, help="Steps per timing run.")
    parser.add_argument("--warmup", type=int, default=10, help="Steps left out of the medians (CUDA start-up).")
    parser.add_argument("--resume-workload", default="resnet18")
    parser.add_argument("--resume-steps", type=int, default=300)
    parser.add_argument("--cli", action="store_true", help="Also run the README's live quick start (up, submit, status, down).")
    parser.add_argument("--cli-steps", type=int, default=1500, help="Steps of each quick-start job.")
    parser.add_argument("--cli-only", action="store_true", help="Only the quick start (--cli), no embedded runs.")
    parser.add_argument("--out", type=Path, help="Also write the JSON object here.")
    args = parser.parse_args(argv)

    from pcs_ray.discovery import nvml_inventory
    from pcs_ray.telemetry import NVMLSampler

    inventory = nvml_inventory()
    if inventory is None or not inventory.gpus:
        _fail("no NVIDIA GPU found through NVML (nvidia-ml-py and a driver are needed); nothing here is emulated")
    import torch

    if not torch.cuda.is_available():
        _fail(f"NVML sees {len(inventory.gpus)} GPU(s) but torch {torch.__version__} has no CUDA device")
    if args.cli_only:
        root = Path(tempfile.mkdtemp(prefix="pcs-ray-real-gpu-"))
        print(json.dumps({"cli": _cli(root / "state", timeout=600, steps=args.cli_steps)}, indent=1, default=str))
        return
    sampler = NVMLSampler()
    result: dict = {"torch": torch.__version__, "cuda": torch.version.cuda, "device_name": torch.cuda.get_device_name(0),
                    "inventory": inventory.to_dict(), "idle_telemetry": [s.as_dict() for s in sampler.sample()]}
    sampler.close()
    root = Path(tempfile.mkdtemp(prefix="pcs-ray-real-gpu-"))
    began = time.time()
    ray, recorder = _start_ray(inventory.name, len(inventory.gpus), str(root / "ray"))
    from executors import launch as launch_module
    from executors.pool import WarmPool
    from pcs_ray.contract import GPUSlot, RunRequest

    pool = WarmPool([GPUSlot(inventory.name, g.index) for g in inventory.gpus])
    try:
        pool.ready(timeout=300)
        result["pool"] = pool.describe()
        probe = pool.launch(RunRequest("probe", "tiny_cnn", 400, (GPUSlot(inventory.name, 0),), str(root / "probe"),
                                       params={"seed": 1}, reporter=recorder, report_interval_s=0.0))
        _wait_step(ray, recorder, "probe", 20)
        env = ray.get(probe.actors[0].environment.remote(), timeout=60)
        on_gpu = _gpu_processes(0)
        probe.request_stop()
        outcome = probe.outcome(timeout=120)
        result["pinning"] = {"runner": env, "emulated": outcome.emulated, "nvml_gpu0_pids": on_gpu,
                             "runner_on_gpu0": on_gpu is not None and env["pid"] in on_gpu}
        result["steps"] = _step_times(ray, pool, recorder, inventory.name, [w for w in args.workloads.split(",") if w],
                                      args.steps, args.warmup, root)
        result["resume"] = _resume(ray, pool, launch_module, recorder, inventory.name, args.resume_workload,
                                   args.resume_steps, root)
    finally:
        pool.shutdown(kill_runners=True)
        ray.shutdown()
    result["embedded_wall_s"] = round(time.time() - began, 1)
    if args.cli:
        result["cli"] = _cli(root / "state", timeout=600, steps=args.cli_steps)
    shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
