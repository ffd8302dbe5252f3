"""Does the dashboard slow the coordinator? 10,000 queued jobs, 20 dashboards polling, submissions arriving.

    PYTHONPATH=. python bench/dashboard_load.py [--queued 10000] [--clients 20] [--samples 120]

The coordinator core as the live actor runs it (real SQLite journal, PCS WFQ
``pcs-bal``, Packed-Sticky placement on 32 nodes x 8 GPUs, runners replaced by
nothing), behind the host's lock and served by its HTTP server, dashboard
included, in this process. ``--queued`` jobs are queued behind busy GPUs. Then,
side by side in one run, in interleaved blocks (off, on, on, off, ...):

- decision latency: a runner's report that its job finished -> the actions that
  follow, lock wait included (as the actor's loop takes the lock);
- submit -> prediction: ``submit`` through the host (lock, journal, decision,
  forward play) until it returns the job's predicted completion;

each with no dashboard open, and with ``--clients`` dashboards open (half on the
jobs page, half on the timeline), each signed in with its own session, as
plain HTTP clients in another process: they load their page once, then poll
the live fragments the page names (``hx-get`` with an ``every`` trigger) at
the page's own rate, as htmx in a browser would. Between samples the whole
queue's forecast is refreshed as the actor's loop does it (the play outside the
lock). Then the jobs page's first paint at ``--queued`` jobs: Chromium (the
system's, through Playwright) loads it signed in, and the browser's own paint
timing (``first-contentful-paint``, from navigation start: server render and
transfer included) is read; without Chromium, the server's time to render and
transfer the page is given instead, and ``first_paint.method`` says which.

Prints one JSON object, with the load average. Targets: each p99 with
dashboards within +10 % of without; first paint <= 1 s. Timings are wall-clock
on a shared machine: other work running at the same time inflates them.
"""

from __future__ import annotations

import argparse
import html
import http.client
import multiprocessing as mp
import os
import random
import re
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

from coordinator_latency import Clock, random_job
from coordinator_restart import append_like
from coordinator_latency import latency as summary

from pcs_ray.api import strict_json



TOKEN = "bench-" + "0" * 58
TARGET_RATIO = 1.10
TARGET_FIRST_PAINT_MS = 1000.0
FILL_THROUGH_CORE = 2000  # with --fill journal, the jobs queued through the core before the rest are journaled
REFRESH_YIELD_S = 30.0  # as the actor's loop lets its refresh play stand aside for calls
POLL_EVERY = re.compile(r"every\s+(\d+(?:\.\d+)?)(ms|s)")
TAG = re.compile(r"<[^>]*\bhx-get=\"([^\"]+)\"[^>]*>")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync"]


# -- the dashboards (another process) ---------------------------------------------------------------------------


def sign_in(host: str, port: int, token: str, user: str) -> str:
    """A session cookie (``name=value``) from the sign-in form's POST."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    body = urllib.parse.urlencode({"token": token, "user": user, "tenant": ""})
    conn.request("POST", "/dashboard/login", body=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    reply = conn.getresponse()
    reply.read()
    cookie = reply.getheader("Set-Cookie") or ""
    conn.close()
    if reply.status != 303 or not cookie.startswith("pcs_ray_session="):
        raise RuntimeError(f"signing in to the dashboard answered {reply.status} without a session cookie")
    return cookie.split(";", 1)[0]


def live_parts(page: str) -> tuple[list[str], float | None]:
    """The fragment URLs a page polls (``hx-get`` with an ``every`` trigger) and its shortest period (s)."""
    urls, period = [], None
    for tag in TAG.finditer(page):
        every = POLL_EVERY.search(tag.group(0))
        if every:
            urls.append(html.unescape(tag.group(1)))
            s = float(every.group(1)) / (1000 if every.group(2) == "ms" else 1)
            period = s if period is None else min(period, s)
    return urls, period


def one_dashboard(url: str, token: str, index: int, polling, stop, ready, out) -> None:
    try:
        poll(url, token, index, polling, stop, ready, out)
    except BaseException as e:  # told to the coordinator's process, which stops the run with it
        ready.put(("error", f"dashboard {index}: {type(e).__name__}: {e}", None))
        out.put({"page": "error", "ms": [], "bytes": [], "errors": 1})


def poll(url: str, token: str, index: int, polling, stop, ready, out) -> None:
    parts = urllib.parse.urlsplit(url)
    cookie = sign_in(parts.hostname, parts.port, token, f"viewer{index}")
    page = "jobs" if index % 2 == 0 else "timeline"
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)

    def get(path: str) -> tuple[float, int, str]:
        t0 = time.perf_counter()
        conn.request("GET", path, headers={"Cookie": cookie, "HX-Request": "true"})
        reply = conn.getresponse()
        body = reply.read()
        if reply.status != 200:
            raise RuntimeError(f"GET {path}: {reply.status}")
        return 1000 * (time.perf_counter() - t0), len(body), body.decode(errors="replace")

    _, _, first = get(f"/dashboard/{page}")
    urls, period = live_parts(first)
    polled = urls or [f"/dashboard/{page}"]  # a page with no live part: a browser user would reload it
    period = period or 1.0
    ready.put((page, polled, period))
    ms: list[float] = []
    sizes: list[int] = []
    errors = 0
    while not stop.is_set():
        if not polling.is_set():
            time.sleep(0.05)
            continue
        tick = time.perf_counter()
        for path in polled:
            try:
                took, size, _ = get(path)
                ms.append(took)
                sizes.append(size)
            except (OSError, RuntimeError, http.client.HTTPException):
                errors += 1
                conn.close()
        time.sleep(max(0.0, period - (time.perf_counter() - tick)))
    out.put({"page": page, "ms": ms, "bytes": sizes, "errors": errors})


def dashboards(url: str, token: str, n: int, polling, stop, ready, out) -> None:
    """``n`` dashboards, each a thread with its own session and connection."""
    threads = [threading.Thread(target=one_dashboard, args=(url, token, i, polling, stop, ready, out), daemon=True)
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# -- the coordinator (this process) ---------------------------------------------------------------------------


def coordinator(args, state: Path):
    """A host on a core with ``args.queued`` jobs queued behind busy GPUs, and the runs it started."""
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.coordinator import Coordinator, Journal, StartRun
    from pcs_ray.coordinator.host import CoordinatorHost
    from pcs_ray.placement import create_placement
    from pcs_ray.policies import build_policy

    class BenchHost(CoordinatorHost):
        """The actor's calls without Ray: actions are kept, not launched (``status`` plays nothing extra)."""

        def __init__(self, core) -> None:
            super().__init__(core)
            self.held: list = []
            self._resume()

        def _execute(self, actions) -> None:
            self.held.extend(actions)

        def ping(self) -> dict:
            return {"jobs": len(self.core.jobs), "pid": os.getpid()}

    cluster = ClusterSpec.homogeneous(args.nodes * args.gpus_per_node, args.gpus_per_node)

    def build(clock: Clock):
        return Coordinator(cluster, build_policy(args.policy), Journal(state / "journal.sqlite"), checkpoint_root=state,
                           placement=create_placement("packed-sticky", cluster), clock=clock,
                           workloads=("resnet18", "vgg11", "mobilenet_v2", "transformer"), progress_journal_every=5.0)

    core = build(Clock())
    host = BenchHost(core)
    rng = random.Random(args.seed)
    running: list[tuple[int, int]] = []

    def note(actions) -> None:
        running.extend((a.job_id, a.request.attempt) for a in actions if isinstance(a, StartRun))

    began = time.perf_counter()
    through = args.queued if args.fill == "core" else min(args.queued, FILL_THROUGH_CORE)
    while sum(1 for j in core.active.values() if j.state == "queued") < through:
        core.clock.t += 0.01
        note(core.submit(random_job(rng), refresh=False)[1])
    if through < args.queued:  # the rest as their journal records, then the journal replayed (its runs lost, restarted)
        core.play_refresh()
        for jid in list(core.jobs):
            core.note_prediction(jid)
        clock = core.clock
        core.journal.close()
        append_like(state / "journal.sqlite", args.queued - through)
        core = build(clock)
        host = BenchHost(core)
        running.clear()
        note(host.held)
        host.held.clear()
    core.play_refresh()
    for jid, _ in running:  # every busy GPU reports progress once, as runners do
        core.progress(jid, step=1, step_time=core.jobs[jid].t1)
    return host, running, rng, note, time.perf_counter() - began


def refresh(host) -> None:
    """The whole queue's forecast as the actor's loop makes it: begun and ended under the lock, played outside."""
    core = host.core
    with host.lock:
        began = core.begin_play_refresh()
        if began is None:
            core.play_refresh()
            return
    finish = began[1](between=host.lock.yielder(REFRESH_YIELD_S))
    with host.lock:
        core.end_play_refresh(began[0], finish)


def sample(host, running, rng, note) -> tuple[float, float]:
    """One decision (a run ends) and one submission, both through the host's lock: their latencies in ms."""
    core = host.core
    core.clock.t += 1.0
    live = [(j, a) for j, a in running if core.jobs[j].state == "running" and core.jobs[j].attempt == a]
    jid, attempt = live[rng.randrange(len(live))]
    running.remove((jid, attempt))
    t0 = time.perf_counter()
    with host.lock:
        actions = core.run_ended(jid, attempt, "finished", step=core.jobs[jid].spec.steps)
    decision = 1000 * (time.perf_counter() - t0)
    note(actions)
    with host.lock:
        for a in actions:  # stops complete at once here
            if type(a).__name__ != "StartRun":
                note(core.run_ended(a.job_id, a.attempt, "preempted", step=core.jobs[a.job_id].steps))
    core.clock.t += 0.5
    t0 = time.perf_counter()
    submitted = host.submit(random_job(rng))
    prediction = 1000 * (time.perf_counter() - t0)
    assert submitted.predicted_completion is not None
    with host.lock:
        note([a for a in host.held if type(a).__name__ == "StartRun"])
        host.held.clear()
    refresh(host)
    return decision, prediction


# -- first paint ------------------------------------------------------------------------------------------------


def first_paint(url: str, loads: int) -> dict:
    """The jobs page's first contentful paint in Chromium, else the server's time to render and transfer it."""
    chromium = os.environ.get("PCS_RAY_CHROMIUM") or "/usr/bin/chromium"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if sync_playwright is None or not Path(chromium).exists():
        parts = urllib.parse.urlsplit(url)
        cookie = sign_in(parts.hostname, parts.port, TOKEN, "painter")
        ms = []
        for _ in range(loads):
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
            t0 = time.perf_counter()
            conn.request("GET", "/dashboard/jobs", headers={"Cookie": cookie})
            conn.getresponse().read()
            ms.append(1000 * (time.perf_counter() - t0))
            conn.close()
        return {"method": "server render + transfer of /dashboard/jobs (no Chromium here: not a paint)",
                "ms": ms, **summary(ms)}
    out: list[dict] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS)
        context = browser.new_context()
        reply = context.request.post(f"{url}/dashboard/login", form={"token": TOKEN, "user": "painter", "tenant": ""},
                                     max_redirects=0)
        if reply.status != 303:
            raise SystemExit(f"error: signing Chromium in answered {reply.status}")
        page = context.new_page()
        for _ in range(loads):
            page.goto(f"{url}/dashboard/jobs", wait_until="load")
            deadline = time.monotonic() + 30  # polled from here: the page's CSP forbids wait_for_function's eval
            while not page.evaluate("() => performance.getEntriesByName('first-contentful-paint').length > 0"):
                if time.monotonic() > deadline:
                    raise SystemExit("error: Chromium reported no first-contentful-paint for the jobs page in 30 s")
                time.sleep(0.05)
            out.append(page.evaluate("""() => {
                const nav = performance.getEntriesByType('navigation')[0];
                const fcp = performance.getEntriesByName('first-contentful-paint')[0];
                return {fcp_ms: fcp.startTime, response_start_ms: nav.responseStart, response_end_ms: nav.responseEnd,
                        dom_content_loaded_ms: nav.domContentLoadedEventEnd, bytes: nav.transferSize,
                        rows: document.querySelectorAll('table#jobs tbody tr').length,
                        total: (document.querySelector('[data-total]') || {dataset: {}}).dataset.total || null};
            }"""))
            page.goto("about:blank")
        version = browser.version
        browser.close()
    fcp = [o["fcp_ms"] for o in out]
    return {"method": f"Chromium {version} (Playwright), first-contentful-paint from navigation start", "loads": out,
            **summary(fcp)}


# -- the run ------------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queued", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--clients", type=int, default=20, help="dashboards open (half jobs page, half timeline)")
    ap.add_argument("--samples", type=int, default=120, help="samples per mode (with and without dashboards)")
    ap.add_argument("--block", type=int, default=20, help="samples per block; the modes alternate by block")
    ap.add_argument("--paint-loads", type=int, default=5)
    ap.add_argument("--policy", default="pcs-bal")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fill", choices=("core", "journal"), default="core",
                    help="queue every job through the core (decisions, ~20 ms each here), or the first "
                         f"{FILL_THROUGH_CORE} and the rest as their journal records, replayed "
                         "(bench/coordinator_restart.py's way: minutes instead of half an hour at 100,000)")
    args = ap.parse_args()
    from pcs_ray.coordinator.http_server import ApiServer

    load = {"start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        host, running, rng, note, fill_s = coordinator(args, Path(tmp))
        server = ApiServer(host, TOKEN)
        url = server.start()
        ctx = mp.get_context("spawn")
        polling, stop, ready, results = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
        clients = ctx.Process(target=dashboards, args=(url, TOKEN, args.clients, polling, stop, ready, results),
                              daemon=True)
        clients.start()
        try:
            opened = [ready.get(timeout=600) for _ in range(args.clients)]
            failed = [o[1] for o in opened if o[0] == "error"]
            if failed:
                raise SystemExit(f"error: {failed[0]}")
            load["filled"] = os.getloadavg()
            samples: dict[str, dict[str, list[float]]] = {m: {"decision": [], "prediction": []} for m in ("off", "on")}
            blocks = []
            order = ["off", "on"]
            while min(len(s["decision"]) for s in samples.values()) < args.samples:
                for mode in order:
                    (polling.set if mode == "on" else polling.clear)()
                    time.sleep(2.0)  # the dashboards are polling (or have stopped) before the block is timed
                    took = [sample(host, running, rng, note) for _ in range(args.block)]
                    samples[mode]["decision"] += [d for d, _ in took]
                    samples[mode]["prediction"] += [p for _, p in took]
                    blocks.append(mode)
                order.reverse()  # off on, on off, ...: neither mode always runs second
            load["sampled"] = os.getloadavg()
            polling.clear()
            time.sleep(1.0)
            paint_quiet = first_paint(url, args.paint_loads)
            polling.set()
            time.sleep(2.0)
            paint_busy = first_paint(url, args.paint_loads)
            polling.clear()
        finally:
            stop.set()
            polled = []
            while clients.is_alive() or not results.empty():
                try:
                    polled.append(results.get(timeout=5))
                except Exception:  # queue.Empty: the process ended without a word from every thread
                    if not clients.is_alive():
                        break
                if len(polled) == args.clients:
                    break
            clients.join(timeout=30)
            server.stop()
            host.core.journal.close()
        queued = sum(1 for j in host.core.active.values() if j.state == "queued")
    load["end"] = os.getloadavg()

    off = {k: summary(v) for k, v in samples["off"].items()}
    on = {k: summary(v) for k, v in samples["on"].items()}
    ratio = {k: on[k]["p99_ms"] / off[k]["p99_ms"] for k in off}
    by_page: dict[str, dict] = {}
    for r in polled:
        entry = by_page.setdefault(r["page"], {"ms": [], "bytes": [], "errors": 0, "clients": 0})
        entry["ms"] += r["ms"]
        entry["bytes"] += r["bytes"]
        entry["errors"] += r["errors"]
        entry["clients"] += 1
    print(strict_json.dumps({
        "benchmark": "dashboard_load",
        "setup": {"gpus": args.nodes * args.gpus_per_node, "nodes": args.nodes, "policy": args.policy,
                  "placement": "packed-sticky", "queued_at_end": queued, "active_jobs": len(host.core.active),
                  "fill_s": fill_s, "fill": args.fill, "clients": args.clients, "blocks": blocks,
                  "dashboards": [{"page": p, "polls": u, "every_s": s} for p, u, s in opened]},
        "without_dashboards": off,
        "with_dashboards": on,
        "p99_ratio_with_over_without": {k: {"ratio": v, "target": TARGET_RATIO, "met": v <= TARGET_RATIO}
                                        for k, v in ratio.items()},
        "dashboard_polls": {p: {"clients": e["clients"], "errors": e["errors"], **summary(e["ms"]),
                                "bytes_p50": sorted(e["bytes"])[len(e["bytes"]) // 2] if e["bytes"] else None}
                            for p, e in by_page.items() if e["ms"]},
        "first_paint_jobs_page": {
            "no_dashboards": {**paint_quiet, "target_ms": TARGET_FIRST_PAINT_MS,
                              "met": paint_quiet["max_ms"] <= TARGET_FIRST_PAINT_MS},
            "with_dashboards": {**paint_busy, "target_ms": TARGET_FIRST_PAINT_MS,
                                "met": paint_busy["max_ms"] <= TARGET_FIRST_PAINT_MS},
        },
        "load_average": load,
        "note": "wall-clock on a shared 2-core machine; the dashboards poll from another process, the server renders "
                "in this one (as in the coordinator's)",
    }, indent=2))


if __name__ == "__main__":
    main()
