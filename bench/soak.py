"""An hour of arrivals and faults on a real local 3-node cluster (`pcs-ray up --local`): is anything lost, does anything grow?

    PYTHONPATH=. python bench/soak.py [--minutes 60] [--seed 0] [--rate 2] [--drain-minutes 5]

A Poisson stream of jobs (``--rate`` a minute): built-in ``tiny_cnn`` jobs and the user's own code (a
small PyTorch loop shipped as a ``working_dir``), rigid and elastic, from three tenants. At seeded random
times: the coordinator's process is SIGKILLed (Ray restarts the actor), the last worker node's
processes are SIGKILLed, one runner process is SIGKILLed, a user loop that hangs (its job's own
``report_timeout_s``) and one that raises on every run (``max_failures: 1``) are submitted, and a burst of
bad submissions (each must be refused). Arrivals stop after ``--minutes``; the jobs then have
``--drain-minutes`` to end.

Prints one JSON object: jobs submitted / acknowledged / refused / finished / failed as expected,
acknowledged submissions lost or duplicated (must be 0), steps lost (per run that resumed from a
checkpoint: the highest step seen before minus the step it resumed from; beyond the job's
``checkpoint_every``, the documented bound for a lost node or runner, must be 0), the coordinator's RSS
and open file descriptors at start, after the first 10 minutes (the first sixth of a shorter run) and
at the end, the journal's size per job, what the state folder holds (checkpoints, logs) over time, p50/p99
of the coordinator's decisions (wall time, and the deciding thread's CPU time: the decision's own cost
without the machine's load) and of submit→prediction per window (10 minutes, or a sixth of a shorter
run), the coordinator's full garbage collections per window (each stops every thread), and the error of the predictions made at submission against the finishes. Progress lines go to
stderr. Everything it started is stopped (``pcs-ray down``), also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import secrets
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import Cli, cli_env, log, percentile, up_local

from pcs_ray.api import strict_json
from pcs_ray.commands import local_cluster as lc
from pcs_ray.contract import TERMINAL

TENANTS = {"tenants": {"vision": {"quota": 2, "weight": 2}, "speech": {"quota": 2}, "research": {"quota": 1}}}

#: The user's own loop: checkpoints every ``every`` steps and when asked; ``hang_at`` reports a step, then
#: never again (a dead data loader); ``raise_at`` raises on every run once it gets there.
LOOP = '''
import os, time
import torch
import pcs_ray.train as train

def loop(config):
    ctx = train.get_context()
    step, total, w = 0, ctx.total_steps, torch.zeros(4)
    if (ckpt := train.get_checkpoint()) is not None:
        state = torch.load(os.path.join(ckpt, "w.pt"), weights_only=True)
        w, step = state["w"], state["step"]
    while step < total:
        g = torch.full((4,), float(step + 1))
        if ctx.world_size > 1:
            torch.distributed.all_reduce(g)
            g /= ctx.world_size
        w += g
        step += 1
        time.sleep(config["sleep"])
        if step == config.get("hang_at"):
            train.report({}, step=step)
            time.sleep(24 * 3600)
        if step == config.get("raise_at"):
            raise RuntimeError(f"the loop raised at step {step}, as the soak asked")
        if train.should_checkpoint() or step % config["every"] == 0 or step == total:
            folder = None
            if ctx.world_rank == 0:
                folder = train.checkpoint_dir()
                torch.save({"w": w, "step": step}, os.path.join(folder, "w.pt"))
            train.report({"w0": float(w[0])}, step=step, checkpoint=folder)
        else:
            train.report({"w0": float(w[0])}, step=step)
'''

#: Submissions every coordinator must refuse, each with a different mistake.
BAD = [
    {"workload": "no_such_workload", "steps": 10},
    {"workload": "tiny_cnn", "steps": -5},
    {"workload": "tiny_cnn", "steps": 10, "gpus": 512},
    {"workload": "tiny_cnn", "steps": 10, "tenant": "nobody"},
    {"workload": "tiny_cnn", "steps": 10, "params": {"batch_size": 10 ** 9}},
    {"workload": "tiny_cnn", "steps": 10, "no_such_field": 1},
    {"workload": "tiny_cnn", "steps": 10, "gpus": 2, "min_gpus": 3},
    {"workload": "tiny_cnn", "steps": 10, "report_timeout_s": 10 ** 6},
]


@dataclass
class Ack:
    """One submission as the client saw it."""

    name: str
    expect: str  # finished, failed (a hung or raising loop), refused (a bad submission)
    at: float  # seconds into the run
    interval: int  # the job's checkpoint interval (steps)
    job_id: int | None = None
    latency_s: float | None = None
    error: str | None = None


@dataclass
class Run:
    """What the run saw: submissions, faults, samples, the highest step seen per job and the steps lost."""

    began: float = field(default_factory=time.monotonic)
    acks: list[Ack] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    best: dict[int, int] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)
    lost: list[dict] = field(default_factory=list)
    seen: dict[int, dict] = field(default_factory=dict)  # each job's latest view (retention may forget it later)
    names: dict[str, set[int]] = field(default_factory=dict)  # the ids status ever gave each name
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.began


class Api:
    """The coordinator's HTTP API, found again from the state folder's advert when a restart moved it."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.client = self._client()

    def _client(self):
        from pcs_ray.api.advert import read_advert
        from pcs_ray.client import Client

        found = read_advert(self.state_dir)
        if found is None:
            raise RuntimeError("no API advert in the state folder")
        return Client(api=found["url"])

    def __getattr__(self, method):
        def call(*args, **kw):
            try:
                return getattr(self.client, method)(*args, **kw)
            except (ConnectionError, OSError, TimeoutError):
                self.client = self._client()
                return getattr(self.client, method)(*args, **kw)
        return call


def builtin_job(rng: random.Random, name: str, interval: int) -> dict:
    elastic = rng.random() < 0.5
    gpus = rng.choice([1, 2]) if elastic else rng.choice([1, 1, 2])
    spec = {"name": name, "workload": "tiny_cnn", "steps": rng.randrange(60, 240), "gpus": gpus,
            "class": rng.choice("ABCD"), "step_time": 0.3, "checkpoint_every": interval,
            "tenant": rng.choice(list(TENANTS["tenants"])), "user": f"user{rng.randrange(6)}"}
    if elastic and gpus > 1:
        spec["min_gpus"] = 1
    return spec


def user_job(rng: random.Random, name: str, code: Path, interval: int, **config) -> dict:
    gpus = rng.choice([1, 1, 2])
    spec = {"name": name, "entrypoint": "loop.py:loop", "working_dir": str(code), "steps": rng.randrange(40, 160),
            "gpus": gpus, "class": rng.choice("ABCD"), "step_time": 0.1,
            "tenant": rng.choice(list(TENANTS["tenants"])), "user": f"user{rng.randrange(6)}",
            "config": {"sleep": 0.1, "every": interval, **config}}
    if gpus > 1 and rng.random() < 0.5:
        spec["min_gpus"] = 1
    return spec


def submit(api: Api, run: Run, spec: dict, expect: str, interval: int) -> Ack:
    ack = Ack(spec.get("name") or f"bad-{len(run.acks)}", expect, round(run.now(), 1), interval)
    began = time.perf_counter()
    try:
        ack.job_id = api.submit(spec, submission_id=f"soak-{ack.name}-{secrets.token_hex(4)}").id
        ack.latency_s = time.perf_counter() - began
    except Exception as exc:  # noqa: BLE001 - a refusal, or a call that failed: not acknowledged, counted as such
        ack.error = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    with run.lock:
        run.acks.append(ack)
    return ack


def arrivals(api: Api, run: Run, args, code: Path, stop: threading.Event) -> None:
    """The Poisson stream, until ``--minutes`` (or ``stop``)."""
    rng = random.Random(args.seed)
    at, k = 0.0, 0
    while True:
        at += rng.expovariate(args.rate / 60.0)
        if at >= args.minutes * 60 or stop.wait(max(0.0, at - run.now())):
            return
        k += 1
        user = rng.random() < args.user_share
        name = f"{'user' if user else 'job'}-{k}"
        spec = user_job(rng, name, code, args.interval) if user else builtin_job(rng, name, args.interval)
        submit(api, run, spec, "finished", args.interval)


def fault_times(args) -> list[tuple[float, str]]:
    """Each fault at a seeded random time between 5 % and 85 % of the arrivals."""
    rng = random.Random(args.seed + 1)
    span = args.minutes * 60
    kinds = ["coordinator", "worker_node", "runner", "hung_loop", "raising_loop", "bad_burst"]
    out = [(rng.uniform(0.05, 0.85) * span, kind) for kind in kinds for _ in range(args.each if kind != "worker_node" else 1)]
    return sorted(out)




def inject(kind: str, api: Api, actor: Actor, run: Run, args, cluster, code: Path, rng: random.Random) -> dict:
    """One fault; returns what was done (it does not wait for the recovery: the soak goes on)."""
    state = cluster.state_dir
    if kind == "coordinator":
        pid = actor.pid()
        if pid is None:
            return {"skipped": "the coordinator did not answer"}
        os.kill(pid, signal.SIGKILL)
        return {"pid": pid}
    if kind == "worker_node":
        node = lc.load(state).nodes[-1]
        return {"node": node.name, "processes": len(lc.kill_node(node))}
    if kind == "runner":  # the warm runner of a running built-in job
        ours = {p for n in lc.load(state).nodes for p in lc.session_pids(n.leader)}
        view = api.status()
        pids = {f"{r['node']}:{r['gpu']}": r.get("pid") for r in view.get("runners", [])}
        busy = [(j["id"], pids.get(j["gpus"][0])) for j in view["jobs"]
                if j["state"] == "running" and j["workload"] == "tiny_cnn" and j["gpus"]]
        busy = [(jid, pid) for jid, pid in busy if pid in ours]
        if not busy:
            return {"retry": "no built-in job runs on a warm runner now"}
        jid, pid = rng.choice(sorted(busy))
        os.kill(pid, signal.SIGKILL)
        return {"pid": pid, "job": jid}
    if kind == "hung_loop":
        spec = user_job(rng, f"hung-{len(run.faults)}", code, args.interval, hang_at=5)
        spec["report_timeout_s"] = args.hang_timeout
        return {"job": submit(api, run, spec, "failed", args.interval).job_id}
    if kind == "raising_loop":
        spec = {**user_job(rng, f"raises-{len(run.faults)}", code, args.interval, raise_at=args.interval + 5),
                "max_failures": 1}
        return {"job": submit(api, run, spec, "failed", args.interval).job_id}
    if kind == "bad_burst":
        acks = [submit(api, run, spec, "refused", args.interval) for spec in BAD]
        return {"submitted": len(acks), "acknowledged": sum(a.job_id is not None for a in acks)}
    raise ValueError(kind)


def watch_steps(api: Api, run: Run) -> list[dict]:
    """Poll status: the highest step seen per job, and for each new run the steps it redid (the highest step
    seen before it minus the step its run started from)."""
    jobs = api.status()["jobs"]
    for j in jobs:
        jid, attempts = j["id"], j["attempts"]
        run.seen[jid] = {k: j.get(k) for k in ("id", "name", "state", "submit", "finish", "first_predicted", "lost_steps")}
        run.names.setdefault(j["name"], set()).add(jid)
        before = run.attempts.get(jid, attempts)
        if attempts > before >= 1 and len(j["segments"]) > before:
            resumed = j["segments"][before]["from_step"]
            run.lost.append({"job": jid, "attempt": before + 1, "reached": run.best.get(jid, 0), "resumed_from": resumed,
                             "lost": max(0, run.best.get(jid, 0) - resumed), "at_s": round(run.now(), 1)})
        run.attempts[jid] = attempts
        run.best[jid] = max(run.best.get(jid, 0), j["steps"])
    return jobs


def proc_stats(pid: int | None) -> dict:
    if pid is None:
        return {}
    out: dict = {"pid": pid}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mb"] = round(int(line.split()[1]) / 1024, 1)
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def tree_bytes(path: Path) -> tuple[int, int]:
    """Bytes and files under ``path``."""
    size = count = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(root, name)).st_size
                count += 1
    return size, count


def journal_stats(state: Path) -> dict:
    """The journal's files (the database and its write-ahead log), the bytes its pages in use hold, its
    events and the jobs they are about."""
    path = state / "journal.sqlite"
    out = {"file_bytes": sum(p.stat().st_size for p in (path, Path(str(path) + "-wal")) if p.exists())}
    with contextlib.suppress(sqlite3.Error):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            pages, free, size = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size"))
            out["used_bytes"] = (pages - free) * size
            out["events"], out["jobs"] = db.execute("SELECT COUNT(*), COUNT(DISTINCT job_id) FROM events").fetchone()
            out["by_kind"] = dict(db.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind").fetchall())
        finally:
            db.close()
    if out.get("jobs"):
        out["used_bytes_per_job"] = round(out["used_bytes"] / out["jobs"])
        out["events_per_job"] = round(out["events"] / out["jobs"], 1)
    return out


class Actor:
    """The coordinator actor, through Ray (its process id and decision times are not on the HTTP API)."""

    def __init__(self, address: str) -> None:
        from pcs_ray.api.actor_ref import NAMESPACE
        from pcs_ray.client import connect

        connect(address, NAMESPACE)
        self.seen = 0
        self.gc: tuple[int | None, dict] | None = None  # the coordinator's process and its full collections at the last read

    def _call(self, method: str, *args, timeout: float = 60):
        import ray

        from pcs_ray.client import get_coordinator

        return ray.get(getattr(get_coordinator(), method).remote(*args), timeout=timeout)

    def pid(self) -> int | None:
        try:
            return int(self._call("ping")["pid"])
        except Exception:  # noqa: BLE001 - the actor restarting: no process to read now
            return None

    def decisions(self) -> dict:
        """The decision times since the last read."""
        try:
            got = self._call("decision_latency", self.seen, True)
        except Exception as exc:  # noqa: BLE001 - the actor restarting: these decisions are read next time
            return {"error": str(exc).splitlines()[0][:120]}
        if got["count"] < self.seen:  # a new coordinator process: its decisions start again from 0
            self.seen = 0
            return self.decisions()
        self.seen = got["count"]
        return got

    def gc_full(self, got: dict, pid: int | None) -> dict | None:
        """The coordinator's full collections since the last read of the same process (``pid``): how many,
        and their time in all (ms)."""
        now = (got.get("gc") or {}).get("gen2")
        if now is None:
            return None
        (last_pid, before), self.gc = self.gc or (None, None), (pid, now)
        if last_pid != pid:  # a new coordinator process counts from 0
            before = None
        return {"count": now["count"] - (before or {}).get("count", 0),
                "ms": round(now["total_ms"] - (before or {}).get("total_ms", 0.0), 3)}


def sample(api: Api, run: Run, cluster, actor: Actor) -> dict:
    state = cluster.state_dir
    s = {"at_s": round(run.now(), 1), "coordinator": proc_stats(actor.pid()),
         "journal": journal_stats(state), "decisions_ms": actor.decisions(), "load_average": os.getloadavg()[0]}
    s["gc_full"] = actor.gc_full(s["decisions_ms"], s["coordinator"].get("pid"))
    for part in ("checkpoints", "logs"):
        size, files = tree_bytes(state / part)
        s[part] = {"bytes": size, "files": files, "folders": len(list((state / part).glob("*"))) if (state / part).exists() else 0}
    s["state_dir_bytes"] = tree_bytes(state)[0]
    run.samples.append(s)
    return s


def windows(run: Run, args, final: list[dict], epoch_offset: float) -> list[dict]:
    """Per window: decisions (p50/p99 of those in it), submit→prediction, the coordinator's RSS at its end,
    and the prediction error of the jobs that finished in it."""
    span = args.window_minutes * 60
    count = max(1, math.ceil((run.samples[-1]["at_s"] if run.samples else 0) / span - 0.01))
    out = []
    for w in range(count):
        lo, hi = w * span, (w + 1) * span
        dec = [v for s in run.samples if lo < s["at_s"] <= hi for v in s["decisions_ms"].get("samples", [])]
        cpu = [v for s in run.samples if lo < s["at_s"] <= hi for v in s["decisions_ms"].get("cpu_samples", [])]
        full = [s["gc_full"] for s in run.samples if lo < s["at_s"] <= hi and s.get("gc_full")]
        sub = [a.latency_s * 1000 for a in run.acks if a.latency_s is not None and lo <= a.at < hi]
        errs = [e for j in final if (e := jct_error(j)) is not None and lo <= j["finish"] - epoch_offset < hi]
        last = [s for s in run.samples if lo < s["at_s"] <= hi]
        out.append({"from_min": round(lo / 60, 1), "to_min": round(hi / 60, 1),
                    "decisions": len(dec), "decision_p50_ms": _r(percentile(dec, 50)), "decision_p99_ms": _r(percentile(dec, 99)),
                    "decision_cpu_p50_ms": _r(percentile(cpu, 50)), "decision_cpu_p99_ms": _r(percentile(cpu, 99)),
                    "gc_full_collections": sum(f["count"] for f in full),
                    "gc_full_ms": _r(sum(f["ms"] for f in full)) if full else None,
                    "submissions": len(sub), "submit_p50_ms": _r(percentile(sub, 50)), "submit_p99_ms": _r(percentile(sub, 99)),
                    "coordinator_rss_mb": last[-1]["coordinator"].get("rss_mb") if last else None,
                    "finished": len(errs), "jct_error_median": _r(percentile(errs, 50), 3), "jct_error_p90": _r(percentile(errs, 90), 3)})
    return out


def jct_error(job: dict) -> float | None:
    """|predicted - actual| JCT over the actual, for a job that finished and was forecast at submission."""
    if job["state"] != "finished" or job.get("first_predicted") is None or job.get("finish") is None:
        return None
    actual = job["finish"] - job["submit"]
    return abs(job["first_predicted"] - job["finish"]) / actual if actual > 0 else None


def _r(x: float, digits: int = 2) -> float | None:
    return None if math.isnan(x) else round(x, digits)


def at_mark(run: Run, mark_s: float) -> dict:
    """The first sample at or after ``mark_s`` seconds (the last one if none)."""
    later = [s for s in run.samples if s["at_s"] >= mark_s]
    return (later[0] if later else run.samples[-1]) if run.samples else {}


def processes(run: Run) -> list[dict]:
    """Each coordinator process the samples saw (a kill starts a new one): its RSS and descriptors first and last."""
    out: list[dict] = []
    for s in run.samples:
        c = s["coordinator"]
        if "rss_mb" not in c:
            continue
        if not out or out[-1]["pid"] != c["pid"]:
            out.append({"pid": c["pid"], "from_s": s["at_s"], "rss_first_mb": c["rss_mb"], "fds_first": c.get("fds")})
        out[-1].update(to_s=s["at_s"], rss_last_mb=c["rss_mb"], fds_last=c.get("fds"))
    return out


def verdict(run: Run, final: list[dict], args) -> dict:
    """Every acknowledged submission must have been seen, under its own id alone, and be in the final
    status unless it had ended and retention forgot it since."""
    in_final = {j["id"] for j in final}
    acked = [a for a in run.acks if a.job_id is not None]
    lost = [a.name for a in acked if a.job_id not in run.seen
            or a.job_id not in in_final and run.seen[a.job_id]["state"] not in TERMINAL]
    forgotten = [a.name for a in acked if a.job_id in run.seen and a.job_id not in in_final
                 and run.seen[a.job_id]["state"] in TERMINAL]
    dup = [n for n, ids in run.names.items() if len(ids) > 1]
    mismatch = [a.name for a in acked if run.names.get(a.name, {a.job_id}) != {a.job_id}]
    refused = [a for a in run.acks if a.job_id is None]
    states: dict[str, dict[str, int]] = {}
    for a in acked:
        state = run.seen.get(a.job_id, {}).get("state", "missing")
        states.setdefault(a.expect, {}).setdefault(state, 0)
        states[a.expect][state] += 1
    interval = {a.job_id: a.interval for a in acked}
    beyond = [r for r in run.lost if r["lost"] > interval.get(r["job"], args.interval)]
    errs = [e for j in run.seen.values() if (e := jct_error(j)) is not None]
    mark = args.window_minutes * 60
    start, early, end = (at_mark(run, 0), at_mark(run, mark), run.samples[-1] if run.samples else {})
    return {
        "jobs_submitted": len(run.acks),
        "acknowledged": len(acked),
        "refused": {"bad_submissions": sum(a.expect == "refused" for a in refused),
                    "good_submissions": sum(a.expect != "refused" for a in refused),
                    "errors": sorted({a.error for a in refused if a.error})[:12]},
        "bad_submissions_acknowledged": sum(a.expect == "refused" for a in acked),
        "finished": states.get("finished", {}).get("finished", 0),
        "failed_as_expected": states.get("failed", {}).get("failed", 0),
        "end_states_by_expectation": states,
        "acknowledged_submissions_lost": len(lost), "lost_names": lost[:10],
        "ended_and_forgotten_by_retention": len(forgotten),
        "submissions_duplicated": len(dup), "ids_mismatched": len(mismatch),
        "runs_resumed": len(run.lost), "steps_lost_total": sum(r["lost"] for r in run.lost),
        "steps_lost_beyond_interval": sum(r["lost"] - interval.get(r["job"], args.interval) for r in beyond),
        "runs_losing_more_than_interval": beyond[:10], "checkpoint_interval_steps": args.interval,
        "coordinator_lost_steps_reported": sum(j.get("lost_steps") or 0 for j in run.seen.values()),
        "coordinator": {"start": start.get("coordinator"), "after_first_window": early.get("coordinator"),
                        "end": end.get("coordinator"),
                        "rss_end_over_first_window": _r(end.get("coordinator", {}).get("rss_mb", float("nan"))
                                                        / early.get("coordinator", {}).get("rss_mb", float("nan")), 3)
                        if early.get("coordinator", {}).get("rss_mb") else None},
        "coordinator_processes": processes(run),
        "journal": {"start": start.get("journal"), "after_first_window": early.get("journal"), "end": end.get("journal")},
        "state_dir": {k: {"after_first_window": early.get(k), "end": end.get(k)} for k in ("checkpoints", "logs")},
        "prediction_jct_error": {"n": len(errs), "median": _r(percentile(errs, 50), 3), "p90": _r(percentile(errs, 90), 3),
                                 "p99": _r(percentile(errs, 99), 3)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="how long jobs arrive")
    ap.add_argument("--drain-minutes", type=float, default=5.0, help="how long the jobs then have to end")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate", type=float, default=2.0, help="arrivals a minute (Poisson)")
    ap.add_argument("--user-share", type=float, default=0.3, help="share of arrivals that are user code")
    ap.add_argument("--each", type=int, default=None, help="times each fault happens (default: one per 20 minutes, "
                    "at least one; the worker node dies once)")
    ap.add_argument("--interval", type=int, default=20, help="checkpoint_every of the jobs (steps)")
    ap.add_argument("--hang-timeout", type=float, default=20.0, help="report_timeout_s of the hung loop's job")
    ap.add_argument("--sample-s", type=float, default=None, help="seconds between samples (default: a 12th of a window, at most 30)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--gpus-per-node", type=int, default=2)
    ap.add_argument("--limit", action="append", metavar="NAME=VALUE",
                    help="a coordinator limit for `up` (repeatable; default: ended_job_retention_s=600, so an hour "
                         "shows the journal, checkpoints and logs held to what ten minutes of ended jobs leave)")
    ap.add_argument("--keep", action="store_true", help="keep the state folder (its path is printed)")
    args = ap.parse_args()
    args.limit = args.limit or ["ended_job_retention_s=600"]
    args.each = args.each or max(1, int(args.minutes // 20))
    args.window_minutes = 10.0 if args.minutes >= 30 else args.minutes / 6
    args.sample_s = args.sample_s or min(30.0, args.window_minutes * 60 / 12)

    def terminated(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminated)
    tmp = Path(tempfile.mkdtemp(prefix="pcsray-soak-"))
    token = tmp / "token"
    token.write_text(secrets.token_hex(32))
    code = tmp / "code"
    code.mkdir()
    (code / "loop.py").write_text(LOOP)
    health = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}
    out: dict = {"minutes": args.minutes, "seed": args.seed, "rate_per_min": args.rate, "limits": args.limit,
                 "load_average_before": os.getloadavg()}
    run = Run()
    stop = threading.Event()
    interrupted = False
    try:
        began = time.perf_counter()
        with up_local(Cli(cli_env(token, **health)), tmp / "state", "--nodes", args.nodes,
                      "--gpus-per-node", args.gpus_per_node, *(w for x in args.limit for w in ("--limit", x)),
                      timeout=600) as cluster:
            record = lc.load(cluster.state_dir)
            out["up_s"] = round(time.perf_counter() - began, 1)
            log(f"cluster up in {out['up_s']} s; state {cluster.state_dir}")
            for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):  # the cluster's token, not the caller's
                os.environ.pop(name, None)
            os.environ.update(RAY_AUTH_TOKEN_PATH=str(token), RAY_health_check_period_ms="500")
            try:
                out.update(soak(cluster, args, run, stop, code))
            except KeyboardInterrupt:
                interrupted = True
                log("interrupted: stopping the cluster")
            finally:
                stop.set()
                import ray

                ray.shutdown()  # before its GCS goes: a driver that loses the GCS aborts the process
        out["down_left_processes"] = sum(len(v) for v in cluster.down.get("left", {}).values())
        out["after_down_alive"] = sum(len(lc.session_pids(n.leader)) for n in record.nodes)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if args.keep:
            out["kept"] = str(tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    out["interrupted"] = interrupted
    print(strict_json.dumps(out))


def soak(cluster, args, run: Run, stop: threading.Event, code: Path) -> dict:
    api = Api(cluster.state_dir)
    api.set_tenants(TENANTS)
    actor = Actor(cluster.up["address"])
    run.began = time.monotonic()
    sample(api, run, cluster, actor)
    faults = fault_times(args)
    log(f"faults at (s): {[(round(t), k) for t, k in faults]}")
    rng = random.Random(args.seed + 2)
    submitter = threading.Thread(target=arrivals, args=(Api(cluster.state_dir), run, args, code, stop), daemon=True)
    submitter.start()
    next_sample = args.sample_s
    end_s = args.minutes * 60
    drained_at = None
    jobs: list[dict] = []
    while True:
        now = run.now()
        while faults and faults[0][0] <= now:
            _, kind = faults.pop(0)
            try:
                what = inject(kind, api, actor, run, args, cluster, code, rng)
            except Exception as exc:  # noqa: BLE001 - a fault that could not be injected is reported, the soak goes on
                what = {"error": str(exc).splitlines()[0][:200]}
            if "retry" in what and now + 30 < end_s:
                faults = sorted([*faults, (now + 30, kind)])
                continue
            run.faults.append({"at_s": round(now, 1), "kind": kind, **what})
            log(f"[{now / 60:5.1f} min] fault {kind}: {what}")
        with contextlib.suppress(Exception):
            jobs = watch_steps(api, run)
        if now >= next_sample:
            s = sample(api, run, cluster, actor)
            next_sample += args.sample_s
            states: dict[str, int] = {}
            for j in jobs:
                states[j["state"]] = states.get(j["state"], 0) + 1
            d = s["decisions_ms"]
            log(f"[{now / 60:5.1f} min] jobs {states} acked {sum(a.job_id is not None for a in run.acks)} "
                f"coordinator {s['coordinator']} journal {s['journal'].get('used_bytes')} B {s['journal'].get('jobs')} jobs "
                f"decisions {d.get('count')} p99 {d.get('p99_ms')} ms load {s['load_average']:.1f}")
        if now >= end_s and drained_at is None:
            submitter.join(timeout=120)
            ids = {a.job_id for a in run.acks if a.job_id is not None}
            if all(j["state"] in TERMINAL for j in jobs if j["id"] in ids) or now >= end_s + args.drain_minutes * 60:
                drained_at = now
                break
        time.sleep(2.0)
    sample(api, run, cluster, actor)
    final = watch_steps(api, run)
    epoch_offset = time.time() - run.now()
    out = {"faults": run.faults, "window_minutes": args.window_minutes,
           "unfinished_at_end": sum(j["state"] not in TERMINAL for j in final),
           "drain_s": round(drained_at - end_s, 1), "load_average_after": os.getloadavg()}
    out.update(verdict(run, final, args))
    out["windows"] = windows(run, args, list(run.seen.values()), epoch_offset)
    out["samples"] = [{k: v for k, v in s.items() if k != "decisions_ms"} | {"decisions": s["decisions_ms"].get("count")}
                      for s in run.samples]
    return out


if __name__ == "__main__":
    main()
