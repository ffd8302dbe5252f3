"""How well pcs-ray predicts a user loop it has never run, once the loop has done a tenth of its steps.

    PYTHONPATH=. python bench/unseen_loop_prediction.py [--loops mlp,ray-train-port,cnn] [--seconds 40] [--no-bare]

Issue 39's target: the prediction in force at 10 % of a never-seen loop's steps within 10 % of its
job completion time (PCS's error, ``|JCT - predicted JCT| / predicted JCT``), on three different loops:

* ``mlp``: ``examples/user-code/train_mlp.py:train_loop``, a report every step, a checkpoint every quarter;
* ``ray-train-port``: ``examples/user-code/ray_train_port.py:train_func``, Ray Train code ported by its
  imports: one report per epoch, each with a checkpoint written through ``Checkpoint.from_directory``;
* ``cnn``: a small convolutional net on synthetic images (:data:`CNN_LOOP`), a report every step, an
  evaluation pass every 50 steps (its steps are uneven, as a real loop's are) and a checkpoint every quarter.

Each loop runs as one job of the user's own code (no ``step_time`` given, no calibration) on a private
Ray with one logical GPU and a fresh in-cluster coordinator, one after another, so no two loops share the
cores. Every job is sized to take about ``--seconds`` of steps on this machine, from a short probe run of
the same loop before it (a separate coordinator, so the timed job is still never seen). Torch runs one
thread (``OMP_NUM_THREADS=1``): the machine's cores are shared. Prints one JSON object (stdout): per loop
the predictions at submission and at a tenth of the steps, the JCT, the errors, the start-up and the step
pace before and after the tenth, and how busy the machine was before and after it (all processes,
``/proc/stat``: cores busy, and threads runnable at each poll, this bench's among them): the loop itself
keeps about one core busy, and a loop that slows after its tenth while more threads wait for the cores
was slowed by the machine, not by its own work. The loop's own process is read too: its CPU milliseconds per
step and the cores it kept busy (``loop_cpu_ms_per_step_*``, ``loop_cores_*``): a pace that changes with its
CPU per step while its share of a core stays put is the loop's own instructions running slower or faster (the
same work: on this shared machine, what the other cores run changes it by up to a third), not a wait for a
core or for pcs-ray.
What Ray's other processes (the coordinator, a spare rank starting, raylet, GCS) kept busy meanwhile is read
too (``ray_others_cores_*``): the part of the machine's load that pcs-ray's side makes.

The anchor (``bare``, per loop, unless ``--no-bare``): right after its pcs-ray job, the same loop, config and
steps run bare (``bench/bare_loop.py``: no Ray, no coordinator, one torch thread, its checkpoints committed as
in a run, at the niceness its rank had, ``loop_niceness``: Ray starts workers at 15), and the error at its
tenth of the ideal extrapolation, its own pace from its first report to its tenth as the forecast reads a user
loop's (``LiveJob.run_pace``), against its own end. It is printed beside
pcs-ray's (``error_at_tenth_pct_vs_bare``): a miss that the loop's own pace drift makes shows there too.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, log, start_ray

from pcs_ray.api import strict_json

TENTH = 0.1
USER_CODE = ROOT / "examples" / "user-code"
BARE_LOOP = Path(__file__).resolve().parent / "bare_loop.py"
#: The title Ray gives a user run's rank process while it runs the loop (``UserRank.run``, its
#: ``/proc/<pid>/cmdline``): the bench reads that process's CPU time.
RANK_TITLE = b"ray::UserRank.run"
THREADS = {"env_vars": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}}
#: A probe's pace is taken over polled reports at least this many seconds apart. Reports come once a
#: second: over two of them the cnn's probe read 82-87 steps/s of a loop that then ran 160-197, and sized
#: its job to half of ``--seconds``.
PROBE_SPAN_S = 3.0

CNN_LOOP = '''
import os
import torch
import torch.nn.functional as F
import pcs_ray.train as train


def loop(config):
    ctx = train.get_context()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(16 * 7 * 7, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    images, labels = torch.randn(2048, 1, 28, 28, generator=g), torch.randint(0, 10, (2048,), generator=g)
    step = 0
    if (ckpt := train.get_checkpoint()) is not None:
        state = torch.load(os.path.join(ckpt, "cnn.pt"), weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    batch, total, every = config["batch_size"], ctx.total_steps, max(1, ctx.total_steps // 4)
    while step < total:
        rows = torch.arange(step * batch, (step + 1) * batch) % len(images)
        loss = F.cross_entropy(model(images[rows]), labels[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        metrics = {"loss": loss.item()}
        if step % config["eval_every"] == 0:
            with torch.no_grad():
                metrics["accuracy"] = float((model(images[:512]).argmax(1) == labels[:512]).float().mean())
        folder = None
        if train.should_checkpoint() or step % every == 0 or step == total:
            folder = train.checkpoint_dir()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                       os.path.join(folder, "cnn.pt"))
        train.report(metrics, step=step, checkpoint=folder)
'''


def loops(code_dir: Path) -> dict[str, dict]:
    """Each loop's job spec, without its size (:func:`sized`)."""
    return {
        "mlp": {"entrypoint": "train_mlp.py:train_loop", "working_dir": str(USER_CODE),
                "config": {"dim": 128, "hidden": 1024, "batch_size": 256}},
        "ray-train-port": {"entrypoint": "ray_train_port.py:train_func", "working_dir": str(USER_CODE),
                           "config": {"lr": 0.01, "batch_size": 8}},
        "cnn": {"entrypoint": "cnn.py:loop", "working_dir": str(code_dir), "config": {"batch_size": 32, "eval_every": 50}},
    }


def sized(spec: dict, name: str, steps: int) -> dict:
    """``spec`` as a job of ``steps`` steps (the config keys a loop reads its total from follow)."""
    config = dict(spec["config"])
    if name == "mlp":
        config["checkpoint_every"] = max(1, steps // 4)
    if name == "ray-train-port":
        config["epochs"] = steps  # one report per epoch
    return {**spec, "name": name, "steps": steps, "gpus": 1, "config": config, "runtime_env": THREADS}


@contextlib.contextmanager
def coordinator(ray, state_dir: Path):
    """A client of a fresh coordinator (its own state folder: it has run nothing), ended afterwards."""
    from pcs_ray.api.actor_ref import ACTOR_NAME, NAMESPACE
    from pcs_ray.client import Client
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.coordinator.actor import start_coordinator
    from pcs_ray.coordinator.config import CoordinatorConfig, cluster_dict

    config = CoordinatorConfig(cluster=cluster_dict(ClusterSpec.homogeneous(1)), state_dir=str(state_dir),
                               policy="fifo", warm_pool=False, progress_journal_every=0.0)
    actor = start_coordinator(config)
    try:
        yield Client(coordinator=actor)
    finally:
        ray.kill(actor, no_restart=True)
        for _ in range(100):  # the name is free once the actor is gone: the next start must not find it
            try:
                ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
            except ValueError:
                break
            time.sleep(0.1)


def cpu_reading() -> tuple[int, int, int] | None:
    """The machine's CPU now, from ``/proc/stat``: (busy, total) CPU time so far in clock ticks, all cores
    together, and the threads runnable at this instant (this bench's poll among them); None off Linux."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
        ticks = [int(x) for x in lines[0].split()[1:]]
        running = next(int(line.split()[1]) for line in lines if line.startswith("procs_running "))
    except (OSError, ValueError, StopIteration, IndexError):
        return None
    return sum(ticks) - sum(ticks[3:5]), sum(ticks), running  # less idle and iowait


def busy_cores(a: tuple | None, b: tuple | None) -> float | None:
    """Cores busy on average between two :func:`cpu_reading` readings."""
    if a is None or b is None or b[1] <= a[1]:
        return None
    return round((os.cpu_count() or 1) * (b[0] - a[0]) / (b[1] - a[1]), 2)


def runnable(readings: list) -> float | None:
    """The mean count of runnable threads over :func:`cpu_reading` readings: above the cores, the loop waits its turn."""
    counts = [r[2] for r in readings if r is not None]
    return round(sum(counts) / len(counts), 2) if counts else None


def ray_processes() -> dict[int, bytes]:
    """This machine's Ray processes that this bench can see, by pid: their title (actors and workers, the
    coordinator, a run's ranks and spares: ``ray::...``) or program (raylet, GCS, agents); none off Linux."""
    found = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")[:2]
            except OSError:
                continue
            title = argv[0].strip()
            if title.startswith(b"ray::") or any(b"/ray/" in a for a in argv):
                found[int(entry.name)] = title
    return found


def others_cpu_s(before: dict[int, float] | None, now: dict[int, float]) -> float | None:
    """CPU seconds Ray's other processes spent between two readings of theirs ({pid: CPU seconds}): those
    in both readings, and all of a process started between (one that ended between is not counted)."""
    if before is None:
        return None
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in now.items())


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user and system) process ``pid`` has spent, from ``/proc/<pid>/stat``; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_niceness(pid: int) -> int | None:
    """The niceness of process ``pid``; None once it is gone."""
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None


def follow(client, jid: int, deadline_s: float) -> tuple[dict, list[tuple], int | None]:
    """Poll the job until it ends: its final view and (time, predicted completion, steps, step time, the machine's
    :func:`cpu_reading`, the CPU seconds of the loop's process, those of Ray's other processes since the previous
    poll) at each poll, and the loop process's niceness. The loop's process is the one running a user loop once the
    job has reported (one job at a time here); its CPU and niceness are None when there is not exactly one."""
    history, began, rank, others, niceness = [], time.time(), None, None, None
    while True:
        job = next(j for j in client.status()["jobs"] if j["id"] == jid)
        if job["state"] in ("finished", "failed", "cancelled", "timed_out"):
            return job, history, niceness
        processes = ray_processes()
        if rank is None and job["steps"] > 0:
            found = [pid for pid, title in processes.items() if title == RANK_TITLE]
            rank = found[0] if len(found) == 1 else -1
            niceness = process_niceness(rank) if rank > 0 else None
        rank_cpu = process_cpu_s(rank) if rank is not None and rank > 0 else None
        now = {pid: cpu for pid in processes if pid != rank and (cpu := process_cpu_s(pid)) is not None}
        others_s, others = others_cpu_s(others, now), now
        history.append((time.time(), job["predicted_completion"], job["steps"], job["step_time"], cpu_reading(), rank_cpu,
                        others_s))
        if time.time() - began > deadline_s:
            raise TimeoutError(f"job {jid} still {job['state']} after {deadline_s:.0f} s")
        time.sleep(0.25)


def pct(actual: float, predicted: float | None) -> float | None:
    return None if predicted is None or predicted <= 0 else round(100.0 * abs(actual - predicted) / predicted, 2)


def measure(client, spec: dict, deadline_s: float) -> dict:
    """One never-seen job, from submission to its end: its predictions and what actually happened."""
    handle = client.submit(spec)
    submit = next(j["submit"] for j in client.status()["jobs"] if j["id"] == handle.id)
    job, history, niceness = follow(client, handle.id, deadline_s)
    total = job["total_steps"]
    jct = job["finish"] - submit
    at_tenth = next(((t, p, s, cpu, rank) for t, p, s, _, cpu, rank, _ in history if s >= TENTH * total and p is not None),
                    None)
    reported = [(t, s, cpu, rank) for t, _, s, _, cpu, rank, _ in history if s > 0]
    first = reported[0] if reported else None
    out = {
        "state": job["state"], "steps": job["steps"], "total_steps": total, "jct_s": round(jct, 2),
        "predicted_jct_at_submission_s": round(handle.predicted_completion - submit, 2),
        "error_at_submission_pct": pct(jct, handle.predicted_completion - submit),
        "first_report_after_s": None if first is None else round(first[0] - submit, 2),
        "loop_niceness": niceness,
    }
    if at_tenth is not None:
        t, predicted, steps, cpu, rank_cpu = at_tenth
        before = (steps - first[1]) / (t - first[0]) if first and t > first[0] else None
        after = (total - steps) / (job["finish"] - t) if job["finish"] > t else None
        last = reported[-1]
        out.update({
            "tenth_at_s": round(t - submit, 2), "tenth_steps": steps,
            "predicted_jct_at_tenth_s": round(predicted - submit, 2), "error_at_tenth_pct": pct(jct, predicted - submit),
            "signed_error_at_tenth_s": round(jct - (predicted - submit), 2),
            "steps_per_s_before_tenth": None if before is None else round(before, 2),
            "steps_per_s_after_tenth": None if after is None else round(after, 2),
            "machine_busy_cores_before_tenth": busy_cores(first[2], cpu) if first else None,
            "machine_busy_cores_after_tenth": busy_cores(cpu, history[-1][4]),
            "machine_runnable_before_tenth": runnable([h[4] for h in history if first and first[0] <= h[0] <= t]),
            "machine_runnable_after_tenth": runnable([h[4] for h in history if h[0] >= t]),
            "loop_cpu_ms_per_step_before_tenth": cpu_per_step(first[3], rank_cpu, steps - first[1]) if first else None,
            "loop_cpu_ms_per_step_after_tenth": cpu_per_step(rank_cpu, last[3], last[1] - steps),
            "loop_cores_before_tenth": cpu_share(first[3], rank_cpu, t - first[0]) if first else None,
            "loop_cores_after_tenth": cpu_share(rank_cpu, last[3], last[0] - t),
            "ray_others_cores_before_tenth": others_cores([h for h in history if first and first[0] < h[0] <= t]),
            "ray_others_cores_after_tenth": others_cores([h for h in history if h[0] > t]),
        })
    trace, last = [], None  # the forecast until a fifth of the steps: [s since submission, predicted JCT, steps, step s]
    for t, predicted, steps, step_s, *_ in history:
        if predicted is not None and (predicted, steps) != last and steps <= 2 * TENTH * total:
            trace.append([round(t - submit, 2), round(predicted - submit, 2), steps, step_s and round(step_s, 5)])
            last = (predicted, steps)
    out["forecasts"] = trace
    return out


def cpu_per_step(cpu0: float | None, cpu1: float | None, steps: int) -> float | None:
    """Milliseconds of the loop's process CPU per step between two readings; None without both or steps."""
    return None if cpu0 is None or cpu1 is None or steps <= 0 else round(1000.0 * (cpu1 - cpu0) / steps, 3)


def others_cores(polls: list[tuple]) -> float | None:
    """Cores Ray's other processes kept busy over consecutive polls of :func:`follow` (each with the CPU they
    spent since the poll before it)."""
    spent = [h[6] for h in polls if h[6] is not None]
    if len(polls) < 2 or len(spent) < len(polls):
        return None
    return round(sum(spent[1:]) / (polls[-1][0] - polls[0][0]), 3) if polls[-1][0] > polls[0][0] else None


def cpu_share(cpu0: float | None, cpu1: float | None, seconds: float) -> float | None:
    """Cores the loop's process kept busy between two readings ``seconds`` apart (below 1: it waited)."""
    return None if cpu0 is None or cpu1 is None or seconds <= 0 else round((cpu1 - cpu0) / seconds, 3)


def ideal_at_tenth(reports: list, total: int, jct: float) -> dict:
    """What the loop's own pace at its tenth foretells of its end, against its end: ``reports`` are [seconds, step,
    CPU seconds] from the start of the loop, ``jct`` its duration.

    The pace is read as the forecast reads a user loop's (``LiveJob.run_pace``): from its first report, whose step
    carries the loop's warm-up, to the first report at a tenth of ``total`` or more; the rest of its steps at that
    pace, after the time of that report, is the extrapolation. Its error is then the part of a forecast's error that
    the loop's own pace drift makes (no pcs-ray beside it).
    """
    first = reports[0] if reports else None
    tenth = next((r for r in reports if r[1] >= TENTH * total), None)
    if first is None or tenth is None or tenth[1] <= first[1] or tenth[0] <= first[0]:
        return {"jct_s": round(jct, 2), "error_at_tenth_pct": None}
    pace = (tenth[0] - first[0]) / (tenth[1] - first[1])
    predicted = tenth[0] + pace * (total - tenth[1])
    last = reports[-1]
    return {
        "jct_s": round(jct, 2), "first_report_after_s": round(first[0], 2), "tenth_at_s": round(tenth[0], 2),
        "tenth_steps": tenth[1], "predicted_jct_at_tenth_s": round(predicted, 2),
        "error_at_tenth_pct": pct(jct, predicted), "signed_error_at_tenth_s": round(jct - predicted, 2),
        "steps_per_s_before_tenth": round(1.0 / pace, 2),
        "steps_per_s_after_tenth": round((total - tenth[1]) / (jct - tenth[0]), 2) if jct > tenth[0] else None,
        "loop_cpu_ms_per_step_before_tenth": cpu_per_step(first[2], tenth[2], tenth[1] - first[1]),
        "loop_cpu_ms_per_step_after_tenth": cpu_per_step(tenth[2], last[2], last[1] - tenth[1]),
    }


def bare(spec: dict, deadline_s: float, niceness: int | None = None) -> dict:
    """``spec`` (a sized job) run bare (``bench/bare_loop.py``: no Ray, no coordinator) for its steps, with its
    ``env_vars`` and at ``niceness`` (that of the job's rank: Ray starts its workers at 15, so a loop in a run
    yields the cores to the machine's other work; raised from this process's, never lowered):
    :func:`ideal_at_tenth` of it, the niceness it ran at, and how busy the machine was meanwhile."""
    raise_by = max(0, niceness - os.nice(0)) if niceness is not None else 0
    env = {**os.environ, **spec["runtime_env"].get("env_vars", {}),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    job = {k: spec[k] for k in ("entrypoint", "working_dir", "config", "steps")}
    before = cpu_reading()
    command = [sys.executable, str(BARE_LOOP), json.dumps(job)]
    if raise_by:  # nice(1), not a preexec_fn: this process has Ray's threads
        command = ["nice", "-n", str(raise_by), *command]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=deadline_s, check=False)
    after = cpu_reading()
    if done.returncode != 0:
        raise RuntimeError(f"bare run of {spec['name']} failed: {done.stderr.strip().splitlines()[-1:]}")
    run = json.loads(done.stdout.strip().splitlines()[-1])
    return {**ideal_at_tenth(run["reports"], spec["steps"], run["jct_s"]), "niceness": run.get("niceness"),
            "machine_busy_cores": busy_cores(before, after)}


def probe_pace(reported: list[tuple[float, int]]) -> float | None:
    """Steps per second between the first and the last (time, steps) polled, or None when they are fewer than
    :data:`PROBE_SPAN_S` apart (then the probe is too short to say)."""
    if len(reported) < 2:
        return None
    (t0, s0), (t1, s1) = reported[0], reported[-1]
    return (s1 - s0) / (t1 - t0) if t1 - t0 >= PROBE_SPAN_S and s1 > s0 else None


def probe_steps_per_s(client, spec: dict, steps: int, deadline_s: float) -> float:
    """The loop's pace here, from a short run of it: steps per second between its first and last report seen.

    A probe whose polled reports span less than :data:`PROBE_SPAN_S` (a quiet machine runs it faster than
    that) is run again with twice the steps, up to four times.
    """
    for _ in range(5):
        job, history, _ = follow(client, client.submit(sized(spec["spec"], spec["name"], steps)).id, deadline_s)
        if job["state"] != "finished":
            raise RuntimeError(f"probe of {spec['name']} ended {job['state']}: {job.get('error')}")
        rate = probe_pace([(t, s) for t, _, s, *_ in history if s > 0])
        if rate is not None:
            return rate
        log(f"probe of {spec['name']}: {steps} steps reported over less than {PROBE_SPAN_S:g} s; trying {2 * steps}")
        steps *= 2
    raise RuntimeError(f"probe of {spec['name']} never reported over {PROBE_SPAN_S:g} s, up to {steps // 2} steps")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loops", default="mlp,ray-train-port,cnn", help="comma-separated: mlp, ray-train-port, cnn")
    ap.add_argument("--seconds", type=float, default=40.0, help="seconds of steps each timed job is sized to")
    ap.add_argument("--probe-steps", default="mlp=1500,ray-train-port=200,cnn=1000",
                    help="steps of each loop's probe run (NAME=STEPS,...)")
    ap.add_argument("--deadline", type=float, default=600.0, help="seconds a job may take before the bench gives up")
    ap.add_argument("--no-bare", action="store_true", help="skip each loop's bare run (the anchor)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="pcs-ray-unseen-"))
    (work / "code").mkdir()
    (work / "code" / "cnn.py").write_text(CNN_LOOP)
    specs = loops(work / "code")
    names = [n.strip() for n in args.loops.split(",") if n.strip()]
    unknown = sorted(set(names) - set(specs))
    if unknown:
        ap.error(f"unknown loop(s) {', '.join(unknown)} (known: {', '.join(specs)})")
    probe = {k: int(v) for k, v in (item.split("=") for item in args.probe_steps.split(","))}
    results: dict[str, dict] = {}
    with contextlib.redirect_stdout(sys.stderr):  # Ray's log monitor prints to stdout: keep it for the JSON
        ray = start_ray(1, cpus=2)
        try:
            for name in names:
                with coordinator(ray, work / f"probe-{name}") as prober:
                    rate = probe_steps_per_s(prober, {"name": name, "spec": specs[name]}, probe[name], args.deadline)
                steps = max(20, math.ceil(rate * args.seconds))
                log(f"{name}: {rate:.1f} steps/s in its probe: timing a never-seen job of {steps} steps")
                job = sized(specs[name], name, steps)
                with coordinator(ray, work / f"state-{name}") as client:  # a fresh coordinator: the loop is new to it
                    timed = measure(client, job, args.deadline)
                results[name] = {"probe_steps_per_s": round(rate, 2), **timed}
                if not args.no_bare:  # right after, while the machine is as it was
                    results[name]["bare"] = bare(job, args.deadline, timed.get("loop_niceness"))
                log(f"{name}: {results[name]}")
        finally:
            ray.shutdown()
            shutil.rmtree(work, ignore_errors=True)
    errors = [r.get("error_at_tenth_pct") for r in results.values()]
    anchors = [r["bare"].get("error_at_tenth_pct") for r in results.values() if "bare" in r]
    out = {
        "loops": results,
        "mean_abs_error_at_tenth_pct": round(sum(errors) / len(errors), 2) if errors and None not in errors else None,
        "max_abs_error_at_tenth_pct": max(errors) if errors and None not in errors else None,
        "targets_met": {"each_within_10pct_at_tenth": bool(errors) and all(e is not None and e <= 10 for e in errors)},
        # Per loop, pcs-ray's error at the tenth beside its bare run's (the loop's own pace drift, nothing else).
        "error_at_tenth_pct_vs_bare": {name: {"pcs_ray": r.get("error_at_tenth_pct"),
                                              "bare": r["bare"].get("error_at_tenth_pct") if "bare" in r else None}
                                       for name, r in results.items()},
        "bare_max_error_at_tenth_pct": max(anchors) if anchors and None not in anchors else None,
        "seconds": args.seconds, "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(strict_json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
