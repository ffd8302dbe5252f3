"""How long `pcs-ray status | predict | submit | cancel` take on a live local cluster, over HTTP and as Ray drivers.

    PYTHONPATH=. python bench/cli_latency.py --up [--calls 20] [--driver-calls 5] [--busy 2]
    PYTHONPATH=. python bench/cli_latency.py --state-dir DIR      # a cluster `pcs-ray up --local` started

Each sample is one whole CLI process, as a user runs it (interpreter start,
imports, the call, the output), timed wall-clock. A round is ``submit`` (a job
that goes on to be cancelled), ``status --json``, ``predict ID --json`` and
``cancel ID``, with ``status --help`` beside them: the same process without
the call (interpreter start and imports). Three ways to the coordinator, each
its own rounds: ``address``, commands given only the cluster's address
(``$RAY_ADDRESS``; ``--up`` starts the cluster with a state folder of its own,
not ~/.pcs-ray, so they find the API on its well-known ports, as a user of a
cluster started elsewhere does); ``http``, the API's URL given
(``$PCS_RAY_API``); and ``driver``, joining the cluster as a Ray driver
(``$PCS_RAY_API=ray``, or ``--before PYTHONPATH``: another checkout's CLI,
given the address). Submissions are ``executor: external``
jobs so that no runner process starts between samples on an idle cluster;
``--busy N`` then submits N one-GPU training jobs, waits until they train, and
times the same rounds beside them. Prints one JSON object: per command, the
median and p90 in seconds, the samples, the median CPU time its process used
(user and system, which a loaded machine's waits do not inflate), and ``floors``: the calls alone,
from one process, to say where the time goes. Timings come from a shared machine: its load average
(1, 5 and 15 minutes) is printed before and after each phase, and the median of the 1-minute one over the
phase's samples beside each way's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import ROOT, Cli, cli_env, summary, up_local
from pcs_ray.api import strict_json
from pcs_ray.api.discovery import discover

JOINED = "joining the Ray cluster as a driver"  # what a command says when it finds no API

TARGETS_S = {"idle": 0.5, "busy": 1.0}
COMMANDS = ("status", "predict", "submit", "cancel")
ADVERTISED: dict = {}


def timed(cli: Cli, *args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """One command's wall-clock seconds, the CPU seconds its process used (user and system: what the load
    average does not inflate), and what it printed."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    out = cli(*args)
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cli.env.get("PCS_RAY_API") != "ray" and JOINED in out.stderr:
        raise RuntimeError(f"pcs-ray {args[0]} found no API and joined Ray: {out.stderr.strip()[-300:]}")
    return took, after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime, out


def times(values: list[float], cpu: list[float]) -> dict:
    return {**summary(values, ("median", "p90", "n", "samples"), unit="s", digits=3),
            "cpu_median_s": round(statistics.median(cpu), 3)}


def rounds(cli: Cli, job: Path, n: int) -> dict:
    """``n`` rounds of submit, status, predict and cancel; each command's median, p90 and samples (s), its median
    CPU time, and the 1-minute load average's median over the rounds."""
    names = (*COMMANDS, "cli_without_the_call")
    samples: dict[str, list[float]] = {c: [] for c in names}
    cpu: dict[str, list[float]] = {c: [] for c in names}
    load = []

    def one(name: str, *args: str) -> subprocess.CompletedProcess:
        took, used, out = timed(cli, *args)
        samples[name].append(took)
        cpu[name].append(used)
        return out

    for _ in range(n):
        load.append(os.getloadavg()[0])
        one("cli_without_the_call", "status", "--help")  # same moment, same load
        out = one("submit", "submit", str(job), "--json")
        jid = str(json.loads(out.stdout.strip().splitlines()[-1])["id"])
        one("status", "status", "--json")
        one("predict", "predict", jid, "--json")
        one("cancel", "cancel", jid)
        acknowledge(cli.env, int(jid))
    return {**{c: times(samples[c], cpu[c]) for c in names}, "load_average_1m_median": round(statistics.median(load), 2)}


def acknowledge(env: dict, jid: int) -> None:
    """Tell the coordinator the cancelled external job stopped (its executor would), so its GPU is free again
    and every round meets the same idle cluster. Untimed, over HTTP."""
    from pcs_ray.client import Client

    client = Client(api=ADVERTISED["api"])
    view = client.assignment(jid)
    if view["state"] == "stopping":
        client.external_ended(jid, view["attempt"], "preempted", view["steps"])


def floors(env: dict, n: int) -> dict:
    """The calls themselves, made ``n`` times from one process over HTTP, and finding the API from the address
    alone (ms): what the API and its discovery add."""
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
        out[f"{name}_call_ms"] = summary(took, ("median", "p90"), digits=2, scale=1000)
    client.cancel(jid)
    acknowledge(env, jid)
    took = []
    for _ in range(n):  # what a command given only the address spends finding the API (advert, then ports)
        began = time.perf_counter()
        discover(env["RAY_ADDRESS"])
        took.append(time.perf_counter() - began)
    out["find_from_address_ms"] = summary(took, ("median", "p90"), digits=2, scale=1000)
    return out


def busy_jobs(cli: Cli, count: int, folder: Path) -> list[str]:
    """``count`` one-GPU training jobs, once every one is running."""
    spec = folder / "train.yaml"
    spec.write_text("workload: tiny_cnn\nsteps: 100000\ngpus: 1\nstep_time: 0.05\nparams: {batch_size: 8}\n")
    ids = [str(cli.json("submit", spec)["id"]) for _ in range(count)]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        jobs = {str(j["id"]): j for j in cli.json("status")["jobs"]}
        if all(jobs[i]["state"] == "running" and (jobs[i].get("steps") or 0) > 0 for i in ids):
            return ids
        time.sleep(2)
    raise RuntimeError(f"the {count} training jobs did not all train within 600 s")


def measure(args, state: Path, tmp: Path) -> dict:
    """Every phase's rounds against the cluster whose state folder is ``state``."""
    record = json.loads((state / "cluster.json").read_text())
    ADVERTISED.update(record)
    if not record.get("api"):
        raise RuntimeError(f"{state}/cluster.json advertises no API (no token where the coordinator runs?)")
    address = Cli(cli_env(RAY_ADDRESS=record["address"]))
    http = Cli(cli_env(RAY_ADDRESS=record["address"], PCS_RAY_API=record["api"]))
    through_ray = {"PCS_RAY_API": "ray"} if Path(args.before).resolve() == ROOT else {}
    driver = Cli(cli_env(pythonpath=args.before, RAY_ADDRESS=record["address"], **through_ray))
    job = tmp / "external.yaml"
    job.write_text("workload: tiny_cnn\nsteps: 1000\ngpus: 1\nexecutor: external\n")
    found = discover(record["address"])
    out: dict = {"cpus": os.cpu_count(), "address": record["address"], "api": record["api"],
                 "found_from_address": found and found._asdict(), "targets_median_s": TARGETS_S, "idle": {},
                 "load_average": {"start": os.getloadavg()}}

    def phase(name: str) -> None:
        """One phase's rounds each way, the floors, with the load around them."""
        out["load_average"][f"{name}_before"] = os.getloadavg()
        out[name]["address"] = rounds(address, job, args.calls)
        out[name]["http"] = rounds(http, job, args.calls)
        out[name]["floors"] = floors(http.env, args.calls)
        if args.driver_calls:
            out[name]["driver"] = rounds(driver, job, args.driver_calls)
        out["load_average"][f"{name}_after"] = os.getloadavg()

    phase("idle")
    if args.busy:
        ids = busy_jobs(http, args.busy, tmp)
        out["busy"] = {"training_jobs": len(ids)}
        phase("busy")
        for jid in ids:
            http("cancel", jid)
    out["met"] = {phase: {way: {c: out[phase][way][c]["median_s"] <= TARGETS_S[phase] for c in ("status", "predict")}
                          for way in ("address", "http")}
                  for phase in ("idle", "busy") if phase in out}
    return out


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
        base = Cli(cli_env())
        if args.up:
            with up_local(base, tmp / "state", "--nodes", "1", "--gpus-per-node", "4") as cluster:
                out = measure(args, cluster.state_dir, tmp)
        else:
            out = measure(args, args.state_dir.expanduser().resolve(), tmp)
    print(strict_json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
