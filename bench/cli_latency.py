"""How long `pcs-ray status | predict | submit | cancel` take on a live local cluster, over HTTP and as Ray drivers.

    PYTHONPATH=. python bench/cli_latency.py --up [--calls 20] [--driver-calls 5] [--busy 2]
    PYTHONPATH=. python bench/cli_latency.py --state-dir DIR      # a cluster `pcs-ray up --local` started

Each sample is one whole CLI process, as a user runs it (interpreter start,
imports, the call, the output), timed wall-clock. A round is ``submit`` (a job
that goes on to be cancelled), ``status --json``, ``predict ID --json`` and
``cancel ID``, with ``status --help`` beside them: the same process without
the call (interpreter start and imports). The HTTP path finds the API from ``$PCS_RAY_API``; the driver
path is the same CLI with no API advertised to it, so it joins the cluster as
a Ray driver, as every command did before the API (``--before PYTHONPATH``
times another checkout's CLI instead). Submissions are ``executor: external``
jobs so that no runner process starts between samples on an idle cluster;
``--busy N`` then submits N one-GPU training jobs, waits until they train, and
times the same rounds beside them. Prints one JSON object: per command, the
median and p90 in seconds and the samples, and ``floors``: the calls alone,
from one process, to say where the time goes. Timings come from a shared machine: its load average
is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pcs_ray.api import strict_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGETS_S = {"idle": 0.5, "busy": 1.0}
COMMANDS = ("status", "predict", "submit", "cancel")
ADVERTISED: dict = {}


def cli(env: dict, *args: str, timeout: float = 300.0) -> tuple[float, subprocess.CompletedProcess]:
    began = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pcs_ray.cli", *args], env=env, capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    took = time.perf_counter() - began
    if out.returncode != 0:
        raise RuntimeError(f"pcs-ray {' '.join(args)} exited {out.returncode}: {out.stderr.strip()[-500:]}")
    return took, out


def environment(address: str, api: str | None, pythonpath: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PCS_RAY_API", "RAY_ADDRESS", "PYTHONPATH")}
    env.update({"RAY_ADDRESS": address, "PYTHONPATH": pythonpath})
    if api:
        env["PCS_RAY_API"] = api
    return env


def rounds(env: dict, job: Path, n: int) -> dict:
    """``n`` rounds of submit, status, predict and cancel; each command's median, p90 and samples (s)."""
    samples: dict[str, list[float]] = {c: [] for c in (*COMMANDS, "cli_without_the_call")}
    for _ in range(n):
        samples["cli_without_the_call"].append(cli(env, "status", "--help")[0])  # same moment, same load
        took, out = cli(env, "submit", str(job), "--json")
        samples["submit"].append(took)
        jid = str(json.loads(out.stdout.strip().splitlines()[-1])["id"])
        samples["status"].append(cli(env, "status", "--json")[0])
        samples["predict"].append(cli(env, "predict", jid, "--json")[0])
        samples["cancel"].append(cli(env, "cancel", jid)[0])
        acknowledge(env, int(jid))
    return {c: summary(v) for c, v in samples.items()}


def acknowledge(env: dict, jid: int) -> None:
    """Tell the coordinator the cancelled external job stopped (its executor would), so its GPU is free again
    and every round meets the same idle cluster. Untimed, over HTTP."""
    from pcs_ray.client import Client

    client = Client(api=env.get("PCS_RAY_API") or ADVERTISED["api"])
    view = client.assignment(jid)
    if view["state"] == "stopping":
        client.external_ended(jid, view["attempt"], "preempted", view["steps"])


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, max(0, round(0.9 * len(ordered)) - 1))]
    return {"median_s": round(statistics.median(ordered), 3), "p90_s": round(p90, 3), "n": len(ordered),
            "samples_s": [round(v, 3) for v in values]}


def floors(env: dict, n: int) -> dict:
    """The calls themselves, made ``n`` times from one process over HTTP (ms): what the API adds."""
    from pcs_ray.client import Client

    client = Client(api=env["PCS_RAY_API"])
    jid = client.submit({"workload": "tiny_cnn", "steps": 1000, "gpus": 1, "executor": "external"}).id
    calls = {"status": lambda: client.status(), "predict": lambda: client.predict(jid)}
    out = {}
    for name, call in calls.items():
        took = []
        for _ in range(n):
            began = time.perf_counter()
            call()
            took.append(time.perf_counter() - began)
        out[f"{name}_call_ms"] = {"median": round(1000 * statistics.median(took), 2),
                                  "p90": round(1000 * sorted(took)[int(0.9 * (n - 1))], 2)}
    client.cancel(jid)
    acknowledge(env, jid)
    return out


def busy_jobs(env: dict, count: int, folder: Path) -> list[str]:
    """``count`` one-GPU training jobs, once every one is running."""
    spec = folder / "train.yaml"
    spec.write_text("workload: tiny_cnn\nsteps: 100000\ngpus: 1\nstep_time: 0.05\nparams: {batch_size: 8}\n")
    ids = [str(json.loads(cli(env, "submit", str(spec), "--json")[1].stdout.strip().splitlines()[-1])["id"])
           for _ in range(count)]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        jobs = {str(j["id"]): j for j in json.loads(cli(env, "status", "--json")[1].stdout)["jobs"]}
        if all(jobs[i]["state"] == "running" and (jobs[i].get("steps") or 0) > 0 for i in ids):
            return ids
        time.sleep(2)
    raise RuntimeError(f"the {count} training jobs did not all train within 600 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--up", action="store_true", help="start a one-node local cluster (4 logical GPUs) for the run")
    where.add_argument("--state-dir", type=Path, help="the state folder of a cluster `pcs-ray up --local` started")
    ap.add_argument("--calls", type=int, default=20, help="rounds over HTTP")
    ap.add_argument("--driver-calls", type=int, default=5, help="rounds as a Ray driver (0: none)")
    ap.add_argument("--busy", type=int, default=0, help="then time again beside this many training jobs")
    ap.add_argument("--before", default=str(ROOT), help="PYTHONPATH of the CLI the driver path runs")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="pcs-ray-cli-latency-") as tmp:
        tmp = Path(tmp)
        state = args.state_dir.expanduser().resolve() if args.state_dir else tmp / "state"
        base = environment("", None, str(ROOT))
        base.pop("RAY_ADDRESS")
        if args.up:
            cli(base, "up", "--local", "--nodes", "1", "--gpus-per-node", "4", "--state-dir", str(state), "--json",
                timeout=900)
        try:
            record = json.loads((state / "cluster.json").read_text())
            ADVERTISED.update(record)
            if not record.get("api"):
                raise RuntimeError(f"{state}/cluster.json advertises no API (no token where the coordinator runs?)")
            http = environment(record["address"], record["api"], str(ROOT))
            driver = environment(record["address"], None, args.before)
            job = tmp / "external.yaml"
            job.write_text("workload: tiny_cnn\nsteps: 1000\ngpus: 1\nexecutor: external\n")
            out: dict = {"cpus": os.cpu_count(), "address": record["address"], "api": record["api"],
                         "targets_median_s": TARGETS_S, "idle": {}, "load_average": {}}

            def phase(name: str) -> None:
                """One phase's rounds over HTTP, the floors, and the driver path, with the load around them."""
                out["load_average"][f"{name}_before"] = os.getloadavg()
                out[name]["http"] = rounds(http, job, args.calls)
                out[name]["floors"] = floors(http, args.calls)
                if args.driver_calls:
                    out[name]["driver"] = rounds(driver, job, args.driver_calls)
                out["load_average"][f"{name}_after"] = os.getloadavg()

            phase("idle")
            if args.busy:
                ids = busy_jobs(http, args.busy, tmp)
                out["busy"] = {"training_jobs": len(ids)}
                phase("busy")
                for jid in ids:
                    cli(http, "cancel", jid)
            out["met"] = {phase: {c: out[phase]["http"][c]["median_s"] <= TARGETS_S[phase] for c in COMMANDS}
                          for phase in ("idle", "busy") if phase in out}
        finally:
            if args.up:
                cli(base, "down", "--state-dir", str(state), timeout=300)
    print(strict_json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
