"""The dashboard in a real headless Chromium, against one real `pcs-ray up --local` cluster.

The module brings up 2 nodes x 2 logical GPUs (token authentication on, a
private token file, FIFO inside two tenants of quota 2 each, no minimum
runtime, operator ``ops``), and drives it as people do: jobs through the CLI
(``pcs-ray submit``, ``predict``, ``cancel``, ``tenants apply``, ``dashboard``),
the pages through the browser. Every browser context routes all its requests:
one to any other host than the coordinator's is counted and blocked, and a
test that caused one fails. Assertions read what the pages say and hold
(text, attributes, SVG elements), never pixels. After each test the operator
cancels what is left, so every test starts on an idle cluster.

Skipped, with how to run them, where the system has no Chromium (``browser.py``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from builders import wait_until

pytestmark = [pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the local launcher reads /proc"),
              pytest.mark.slow]  # a local Ray cluster through the CLI, and a browser

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "pcs_ray.cli"]
PAGES = ("cluster", "jobs", "timeline", "tenants", "policy")
NAV = ["Cluster", "Jobs", "Timeline", "Tenants", "Policy"]
OPS, ALICE, BOB = ("ops", ""), ("alice", "vision"), ("bob", "speech")
TENANTS = "tenants:\n  vision: {quota: 2}\n  speech: {quota: 2}\nmin_runtime_s: 0\nreclaim_young_runs: true\noperators: [ops]\n"
HOLDS_GPUS = ("running", "stopping")
TERMINAL = ("finished", "cancelled", "failed")
LIVE_S = 2.0  # what a page shows is at most this old
#: A loop of the user-code contract that prints a numbered line every step, slowly, for the logs tail.
TICKER = '''
import time
import pcs_ray.train as train

def train_loop(config):
    step = 0
    while step < train.get_context().total_steps:
        step += 1
        print(f"tick {step}", flush=True)
        time.sleep(config["sleep"])
        if train.should_checkpoint():
            train.report({"loss": 1.0 / step}, step=step, checkpoint=train.checkpoint_dir())
        train.report({"loss": 1.0 / step}, step=step)
'''


def tiny(name: str, steps: int, gpus: int = 1, **extra) -> str:
    """A job file's text: the built-in tiny CNN on emulated GPUs (a few hundredths of a second a step)."""
    lines = [f"name: {name}", "workload: tiny_cnn", f"steps: {steps}", f"gpus: {gpus}", "step_time: 0.03",
             "checkpoint_every: 20", "params: {num_samples: 256, seed: 1}", *(f"{k}: {v}" for k, v in extra.items())]
    return "\n".join(lines) + "\n"


class Cluster:
    """The module's local cluster: the CLI as each person runs it, and the API for the tests' own polling."""

    def __init__(self, env: dict, work: Path, up: dict, token: str) -> None:
        self.env, self.work, self.up, self.token = env, work, up, token
        self.base = up["api"].rstrip("/")
        self.host = urlsplit(self.base).netloc
        from pcs_ray.api.transport import HttpTransport

        self.api = HttpTransport(self.base, token=token, retry_s=10.0, timeout_s=30.0)

    def cli(self, *args, who=OPS, check=True, timeout=180) -> subprocess.CompletedProcess:
        env = {**self.env, "PCS_RAY_USER": who[0], "PCS_RAY_TENANT": who[1]}
        proc = subprocess.run([*CLI, *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT)
        if check and proc.returncode != 0:
            raise AssertionError(f"pcs-ray {' '.join(map(str, args))} exited {proc.returncode}:\n"
                                 f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        return proc

    def submit(self, text: str, who=ALICE) -> dict:
        path = self.work / f"job-{secrets.token_hex(4)}.yaml"
        path.write_text(text)
        return one_json(self.cli("submit", path, "--json", who=who).stdout)

    def predict(self, job_id: int) -> dict:
        return one_json(self.cli("predict", job_id, "--json").stdout)

    def jobs(self) -> dict[int, dict]:
        return {j["id"]: j for j in self.api.call("status")["jobs"]}

    def wait(self, predicate, timeout: float, what: str, every: float = 0.3):
        return wait_until(predicate, timeout, what, every)

    def settle(self) -> None:
        """The operator cancels every job left, and waits until none holds a GPU."""
        for jid, job in self.jobs().items():
            if job["state"] not in TERMINAL:
                self.api.call("cancel", jid, {"user": OPS[0], "tenant": None})
        self.wait(lambda: not any(j["state"] in HOLDS_GPUS for j in self.jobs().values()), 120,
                  "every job to let go of its GPUs")


def one_json(stdout: str) -> dict:
    """The command's one JSON object: Ray itself may print a line into the same stdout."""
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))


@pytest.fixture(scope="module")
def cluster(chromium, tmp_path_factory):
    """Taken after ``chromium``: a machine without a browser skips before any cluster is started."""
    from pcs_ray.commands import local_cluster as lc

    work = tmp_path_factory.mktemp("dashboard-cluster")
    token = secrets.token_hex(32)
    (work / "token").write_text(token)
    (work / "token").chmod(0o600)
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS", "PCS_RAY_API")}
    env.update(RAY_AUTH_TOKEN_PATH=str(work / "token"), PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0")
    state = work / "state"
    proc = subprocess.run([*CLI, "up", "--local", "--nodes", "2", "--gpus-per-node", "2", "--policy", "fifo",
                           "--state-dir", str(state), "--json"], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        up = one_json(proc.stdout)
        env.update(RAY_ADDRESS=up["address"], PCS_RAY_API=up["api"])
        c = Cluster(env, work, up, token)
        (work / "tenants.yaml").write_text(TENANTS)
        c.cli("tenants", "apply", work / "tenants.yaml")
        yield c
    finally:
        if (state / lc.STATE_FILE).exists():
            lc.down(state)


@pytest.fixture(autouse=True)
def idle_after(request):
    """Each test leaves the cluster idle for the next (only where the test used the cluster)."""
    yield
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").settle()


class Browser:
    """Opens browser contexts whose every request is routed: another host's is counted, blocked and fails the test."""

    def __init__(self, chromium, cluster: Cluster) -> None:
        self.chromium, self.cluster = chromium, cluster
        self.contexts: list = []
        self.elsewhere: list[str] = []  # requests to any host but the coordinator's
        self.here: list[str] = []

    def context(self):
        ctx = self.chromium.new_context()
        ctx.set_default_timeout(15_000)

        def route(route):
            url = route.request.url
            if urlsplit(url).netloc == self.cluster.host:
                self.here.append(url)
                route.continue_()
            else:
                self.elsewhere.append(url)
                route.abort()

        ctx.route("**/*", route)
        self.contexts.append(ctx)
        return ctx

    def page(self):
        return self.context().new_page()

    def signed_in(self, who=ALICE, token: str | None = None):
        """A page signed in through the form as ``who``, on the jobs page."""
        page = self.page()
        sign_in(page, self.cluster.base, self.cluster.token if token is None else token, who)
        assert urlsplit(page.url).path == "/dashboard/jobs", page.url
        return page

    def close(self) -> None:
        for ctx in self.contexts:
            ctx.close()


@pytest.fixture
def browser(chromium, cluster):
    b = Browser(chromium, cluster)
    yield b
    b.close()
    assert not b.elsewhere, f"the page asked other hosts than the coordinator's: {b.elsewhere}"


def sign_in(page, base: str, token: str, who):
    """Fill and send the sign-in form; returns the response to the form's POST."""
    page.goto(f"{base}/dashboard/login")
    page.fill("input[name=token]", token)
    page.fill("input[name=user]", who[0])
    page.fill("input[name=tenant]", who[1])
    with page.expect_response(lambda r: r.request.method == "POST" and "/dashboard/login" in r.url) as sent:
        page.click("form:has(input[name=token]) [type=submit]")
    page.wait_for_load_state()
    return sent.value


def csrf_of(page) -> str | None:
    """The session's CSRF token as the page carries it: a hidden ``csrf`` input, or htmx's header."""
    return page.evaluate("""() => {
        const input = document.querySelector('input[name=csrf]');
        if (input) return input.value;
        const meta = document.querySelector('meta[name=csrf-token]');
        if (meta) return meta.content;
        for (const el of document.querySelectorAll('[hx-headers]')) {
            try { const h = JSON.parse(el.getAttribute('hx-headers')); if (h['X-CSRF-Token']) return h['X-CSRF-Token']; }
            catch (e) {}
        }
        return null;
    }""")


def until(page, js: str, arg, timeout: float, what: str) -> None:
    """Poll ``js(arg)`` in the page until it is true (``wait_for_function`` evaluates a string in the page,
    which the dashboard's Content-Security-Policy rightly forbids)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(js, arg):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s: {what}")
        time.sleep(0.05)


def row(page, job_id: int):
    return page.locator(f"table#jobs tbody tr[data-job-id='{job_id}']")


def cell(page, job_id: int, col: str):
    return row(page, job_id).locator(f"td[data-col='{col}']")


def raw_get(url: str, cookie: str | None = None) -> tuple[int, dict, str]:
    """A GET that does not follow redirects: (status, headers, body)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as reply:
            return reply.status, dict(reply.headers), reply.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode(errors="replace")


# -- signing in ------------------------------------------------------------------------------------------


def test_signing_in_with_the_token_sets_an_httponly_strict_session_and_logout_ends_it(browser, cluster):
    page = browser.page()
    page.goto(f"{cluster.base}/dashboard/login")
    assert page.locator("input[name=token]").count() == 1 and page.locator("input[name=user]").count() == 1
    assert page.locator("input[name=tenant]").count() == 1
    assert page.locator("table#jobs, .node, svg#timeline, table#tenants").count() == 0  # no cluster data
    reply = sign_in(page, cluster.base, cluster.token, ALICE)
    assert reply.status == 303 and urlsplit(page.url).path == "/dashboard/jobs"
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "pcs_ray_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/dashboard"
    assert cookie["expires"] > time.time() + 60  # Max-Age: it expires, but not at once
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script on the page can read it
    assert page.locator("nav#pages a").all_inner_texts() == NAV
    assert page.locator("table#jobs").count() == 1

    csrf = csrf_of(page)
    assert csrf
    assert page.context.request.post(f"{cluster.base}/dashboard/logout", form={"csrf": csrf},
                                     max_redirects=0).status in (200, 303)
    page.goto(f"{cluster.base}/dashboard/jobs")
    assert urlsplit(page.url).path == "/dashboard/login"  # the session is over
    assert raw_get(f"{cluster.base}/dashboard/jobs", f"pcs_ray_session={cookie['value']}")[0] == 303


def test_a_wrong_token_is_refused_with_no_data_and_no_cookie(browser, cluster):
    job = cluster.submit(tiny("secret-project-x", 50))
    page = browser.page()
    reply = sign_in(page, cluster.base, "not-" + cluster.token, ALICE)
    assert reply.status == 401
    assert "token" in page.locator("p.error").inner_text().lower()
    assert page.context.cookies() == []
    assert "secret-project-x" not in page.content() and page.locator("[data-job-id]").count() == 0
    page.goto(f"{cluster.base}/dashboard/jobs/{job['id']}")
    assert urlsplit(page.url).path == "/dashboard/login" and "secret-project-x" not in page.content()


def test_nothing_is_served_without_the_session_cookie(browser, cluster):
    job = cluster.submit(tiny("guarded", 2000))
    page = browser.signed_in()
    urls = {f"{cluster.base}/dashboard/{p}" for p in PAGES} | {f"{cluster.base}/dashboard/jobs/{job['id']}"}
    # What the signed-in pages load or poll: their assets and live fragments.
    loaded: set[str] = set()
    for url in sorted(urls):
        page.goto(url)
        loaded |= set(page.evaluate("""() => [...document.querySelectorAll('script[src], link[href], img[src]')]
            .map(e => e.src || e.href).concat([...document.querySelectorAll('[hx-get]')]
            .map(e => new URL(e.getAttribute('hx-get'), location.href).href))"""))
    loaded = {u for u in loaded if urlsplit(u).netloc == cluster.host and urlsplit(u).path not in
              {urlsplit(p).path for p in urls} and not urlsplit(u).path.endswith("/login")}
    assert any("/static/" in u or u.endswith(".js") for u in loaded), loaded  # the page has assets to guard
    for cookie in (None, "pcs_ray_session=forged"):
        for url in sorted(urls):
            status, headers, body = raw_get(url, cookie)
            assert status == 303 and urlsplit(urljoin(url, headers.get("Location", ""))).path == "/dashboard/login", url
            assert "guarded" not in body
        for url in sorted(loaded):
            status, _, body = raw_get(url, cookie)
            assert status == 401 and "guarded" not in body, (url, status)
    # An action without a session changes nothing.
    refused = urllib.request.Request(f"{cluster.base}/dashboard/jobs/{job['id']}/cancel", data=b"csrf=x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(refused, timeout=30)
    assert e.value.code in (401, 403)
    assert cluster.jobs()[job["id"]]["state"] not in TERMINAL


def test_the_one_time_link_signs_in_once(browser, cluster):
    printed = cluster.cli("dashboard", who=ALICE).stdout
    links = re.findall(r"https?://\S+/dashboard/login\?ticket=\S+", printed)
    assert len(links) == 1, printed
    link = links[0]
    assert urlsplit(link).netloc == cluster.host
    page = browser.page()
    page.goto(link)
    assert urlsplit(page.url).path == "/dashboard/jobs"
    assert [c["name"] for c in page.context.cookies()] == ["pcs_ray_session"]
    again = browser.page()
    reply = again.goto(link)  # a second use
    assert reply.status == 401 and again.locator("p.error").count() == 1 and again.context.cookies() == []
    unknown = browser.page()
    reply = unknown.goto(link.rsplit("=", 1)[0] + "=" + secrets.token_urlsafe(16))
    assert reply.status == 401 and unknown.locator("p.error").count() == 1 and unknown.context.cookies() == []


# -- what the pages show -----------------------------------------------------------------------------------


def test_a_job_submitted_from_the_cli_appears_with_its_predictions_within_2_s(browser, cluster):
    page = browser.signed_in()
    page.goto(f"{cluster.base}/dashboard/jobs?sort=id&order=desc")
    reply = cluster.submit(tiny("from-the-cli", 400))
    acknowledged = time.monotonic()
    until(page, """id => {
        const r = document.querySelector(`table#jobs tbody tr[data-job-id="${id}"]`);
        if (!r) return false;
        const at = c => (r.querySelector(`td[data-col="${c}"]`) || {dataset: {}}).dataset.epoch;
        return !!at('predicted-start') && !!at('predicted-finish');
    }""", reply["id"], LIVE_S + 1, "the job's row with its predicted start and finish")
    seen = time.monotonic() - acknowledged
    assert seen <= LIVE_S
    r = row(page, reply["id"])
    assert r.get_attribute("data-tenant") == "vision" and r.get_attribute("data-user") == "alice"
    assert "from-the-cli" in cell(page, reply["id"], "name").inner_text()
    start = float(cell(page, reply["id"], "predicted-start").get_attribute("data-epoch"))
    finish = float(cell(page, reply["id"], "predicted-finish").get_attribute("data-epoch"))
    assert start <= finish and finish > time.time() - 60


def test_a_queued_job_says_why_in_words(browser, cluster):
    wide = cluster.submit(tiny("holds-everything", 3000, gpus=4))  # all 4 GPUs: its own 2 and speech's idle 2
    cluster.wait(lambda: cluster.jobs()[wide["id"]]["state"] == "running", 90, "the 4-GPU job to run")
    queued = cluster.submit(tiny("waits", 100))
    why = cluster.wait(lambda: cluster.jobs()[queued["id"]].get("waiting"), 30, "status to give a reason")
    page = browser.signed_in()
    page.goto(f"{cluster.base}/dashboard/jobs?state=queued")
    reason = cell(page, queued["id"], "reason")
    reason.wait_for()
    assert row(page, queued["id"]).get_attribute("data-state") == "queued"
    until(page, "([id, code]) => document.querySelector(`tr[data-job-id='${id}'] td[data-col=reason]`).dataset.code"
          " === code", [queued["id"], why["code"]], LIVE_S, "the reason's code to be the one status gives")
    words = reason.inner_text().strip()
    assert re.search(r"[a-z]+ [a-z]+", words, re.I) and words != why["code"], words


def test_a_queued_job_shows_the_predicted_start_and_finish_pcs_ray_predict_gives(browser, cluster):
    wide = cluster.submit(tiny("ahead", 3000, gpus=4))
    cluster.wait(lambda: cluster.jobs()[wide["id"]]["state"] == "running", 90, "the 4-GPU job to run")
    queued = cluster.submit(tiny("behind", 100))["id"]
    page = browser.signed_in()
    page.goto(f"{cluster.base}/dashboard/jobs?state=queued")
    cell(page, queued, "predicted-finish").wait_for()
    misses = []
    # While the job ahead takes its first steps its forecast moves with every report; the page, refreshed
    # every few seconds, must show what `pcs-ray predict` gives once the forecast holds still.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        said = cluster.predict(queued)
        shown = {c: cell(page, queued, c).get_attribute("data-epoch") for c in ("predicted-start", "predicted-finish")}
        if said.get("predicted_start") is not None and shown["predicted-start"] and shown["predicted-finish"] and (
                abs(float(shown["predicted-start"]) - said["predicted_start"]) <= 1.0
                and abs(float(shown["predicted-finish"]) - said["predicted_completion"]) <= 1.0):
            break
        misses.append((shown, said.get("predicted_start"), said["predicted_completion"]))
        time.sleep(0.5)
    else:
        raise AssertionError(f"the queued job's predicted start and finish never matched `pcs-ray predict` in 60 s: "
                             f"{misses[-6:]}")
    assert time.time() - 5 <= float(shown["predicted-start"]) < float(shown["predicted-finish"])


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="the timeline draws a queued job's predicted bar in a lane of its own below the "
                   "GPU rows (g.queued-job): when the forecast starts it, not on which GPUs")
def test_the_timeline_places_queued_jobs_on_gpus(browser, cluster):
    wide = cluster.submit(tiny("ahead", 3000, gpus=4))
    cluster.wait(lambda: cluster.jobs()[wide["id"]]["state"] == "running", 90, "the 4-GPU job to run")
    queued = cluster.submit(tiny("behind", 100, gpus=2))["id"]
    page = browser.signed_in()
    page.goto(f"{cluster.base}/dashboard/timeline")
    bar = page.locator(f"svg#timeline g.row rect.bar.predicted[data-job-id='{queued}']")
    cluster.wait(lambda: bar.count() == 2, LIVE_S, "the queued job's predicted bars on two GPU rows")
    finish = cluster.predict(queued)["predicted_completion"]
    assert all(abs(float(b.get_attribute("data-finish")) - finish) <= 1.0 for b in bar.all())
    assert all(float(b.get_attribute("data-start")) >= time.time() - 5 for b in bar.all())


def test_the_timelines_predicted_bars_are_pcs_ray_predicts_figures(browser, cluster):
    wide = cluster.submit(tiny("runs-now", 3000, gpus=4))
    cluster.wait(lambda: cluster.jobs()[wide["id"]]["state"] == "running", 90, "the 4-GPU job to run")
    queued = [cluster.submit(tiny(f"later-{n}", 200, gpus=2))["id"] for n in range(2)]
    page = browser.signed_in()
    page.goto(f"{cluster.base}/dashboard/timeline")
    svg = page.locator("svg#timeline")
    assert svg.locator("g.row[data-gpu]").evaluate_all("rs => rs.map(r => r.dataset.gpu).sort()") == [
        "node0:0", "node0:1", "node1:0", "node1:1"]
    now_line = float(page.locator("svg#timeline line#now").get_attribute("data-t"))
    assert abs(now_line - time.time()) <= LIVE_S + 1
    assert svg.locator(f"rect.bar.running[data-job-id='{wide['id']}']").count() == 4  # one bar per GPU it holds

    def bars() -> dict[int, dict]:
        """Per job the forecast the page draws: its predicted bars (a running job's from now on the GPUs it
        holds, a queued job's from the start the forecast gives it), else a queued job's entry without a bar."""
        out: dict[int, dict] = {}
        for jid, start, finish, bound in svg.locator("rect.bar.predicted").evaluate_all(
                "bs => bs.map(b => [b.dataset.jobId, b.dataset.start, b.dataset.finish, b.dataset.bound])"):
            entry = out.setdefault(int(jid), {"start": float(start), "finish": float(finish), "bound": bound})
            entry["start"], entry["finish"] = min(entry["start"], float(start)), max(entry["finish"], float(finish))
        for jid, finish, bound in svg.locator("g.queued-job[data-job-id]").evaluate_all(
                "gs => gs.map(g => [g.dataset.jobId, g.dataset.finish, g.dataset.bound])"):
            out.setdefault(int(jid), {"start": None, "finish": float(finish), "bound": bound})
        return out

    # The forecast refreshes as measured step times come in: compare a prediction with the page right after it.
    misses = []
    jobs = [wide["id"], *queued]
    for _ in range(6):
        said = {jid: cluster.predict(jid) for jid in jobs}
        shown = bars()
        diffs = {jid: (abs(shown[jid]["finish"] - said[jid]["predicted_completion"]),
                       abs(float(shown[jid]["bound"]) - said[jid]["bound"]) if said[jid]["bound"] is not None
                       else (0.0 if shown[jid]["bound"] == "" else float("inf")),
                       # a queued job's bar starts where the forecast starts it
                       abs(shown[jid]["start"] - said[jid]["predicted_start"]) if jid in queued and
                       said[jid].get("predicted_start") is not None else 0.0)
                 for jid in jobs if jid in shown}
        if len(diffs) == len(jobs) and all(max(d) <= 1.0 for d in diffs.values()):
            break
        misses.append((diffs, sorted(shown)))
        time.sleep(0.5)
    else:
        raise AssertionError(f"the timeline's predicted bars never matched `pcs-ray predict` within 1 s: {misses}")
    assert shown[wide["id"]]["start"] >= now_line - 1  # the running job's predicted part starts now, not before
    for jid in queued:
        start = shown[jid]["start"]
        assert start is not None and now_line - 1 <= start < shown[jid]["finish"]


def test_a_preemption_shows_on_the_grid_and_in_the_jobs_runs(browser, cluster):
    wide = cluster.submit(tiny("borrower", 3000, gpus=4))["id"]  # vision borrows speech's idle quota
    page = browser.signed_in()
    page.goto(f"{cluster.base}/dashboard/cluster")
    gpus = page.locator(".node[data-node] .gpu[data-gpu]")

    def grid() -> dict[str, tuple[str, str]]:
        return dict(gpus.evaluate_all("gs => gs.map(g => [g.dataset.gpu, [g.dataset.state, g.dataset.jobId || '']])"))

    cluster.wait(lambda: all(v == ["busy", str(wide)] for v in grid().values()) and len(grid()) == 4, 90,
                 "the grid to show the borrower on all 4 GPUs")
    assert str(wide) in page.locator(f".gpu[data-job-id='{wide}']").first.get_attribute("title")
    assert {g.get_attribute("data-speed-class") is not None for g in gpus.all()} == {True}
    short = cluster.submit(tiny("lender-takes-back", 150), who=BOB)["id"]
    seen: list[dict] = []
    cluster.wait(lambda: seen.append(grid()) or any(v == ["busy", str(short)] for v in seen[-1].values()), 90,
                 "the grid to show the lender's job on a GPU the borrower held", every=0.1)
    assert not any(v[1] == str(wide) and v[0] == "busy" for v in seen[-1].values())  # rigid 4: off the grid
    assert cluster.jobs()[wide]["preemptions"] >= 1

    # The lender's job is short: once it ends the borrower resumes, and its runs say why the first one ended.
    cluster.wait(lambda: cluster.jobs()[wide]["attempts"] >= 2, 120, "the borrower to resume after the lender's job")
    page.goto(f"{cluster.base}/dashboard/jobs/{wide}")
    assert page.locator("#job").get_attribute("data-job-id") == str(wide)
    runs = page.locator("table#runs tbody tr")
    cluster.wait(lambda: runs.count() >= 2, LIVE_S + 1, "the job page to list both runs")
    first = runs.first.inner_text().lower()
    assert "preempt" in first and "node0:0" in first, first
    page.goto(f"{cluster.base}/dashboard/jobs")
    assert int(cell(page, wide, "preemptions").inner_text().strip()) >= 1


def test_a_cancel_by_another_tenant_is_refused_and_by_the_owner_works(browser, cluster):
    job = cluster.submit(tiny("alices", 3000))["id"]
    refusal = cluster.cli("cancel", job, who=BOB, check=False)
    assert refusal.returncode == 2 and refusal.stderr.startswith("error: ")
    reason = refusal.stderr.strip().removeprefix("error: ")

    bob = browser.signed_in(BOB)
    bob.goto(f"{cluster.base}/dashboard/jobs/{job}")
    if bob.locator("form#cancel").count():
        with bob.expect_navigation():
            bob.click("form#cancel [type=submit]")
    else:  # the form is only offered to those who may: send the same POST with bob's own session and CSRF token
        with bob.expect_navigation():
            bob.evaluate("""([url, csrf]) => { const f = document.createElement('form'); f.method = 'post';
                f.action = url; const i = document.createElement('input'); i.type = 'hidden'; i.name = 'csrf';
                i.value = csrf; f.appendChild(i); document.body.appendChild(f); f.submit(); }""",
                         [f"/dashboard/jobs/{job}/cancel", csrf_of(bob)])
    assert bob.locator(".flash.error").inner_text().strip() == reason
    assert cluster.jobs()[job]["state"] not in TERMINAL + ("stopping",)

    alice = browser.signed_in(ALICE)
    alice.goto(f"{cluster.base}/dashboard/jobs/{job}")
    assert alice.locator("form#cancel input[name=csrf]").count() == 1
    with alice.expect_navigation():
        alice.click("form#cancel [type=submit]")
    assert alice.locator(".flash").count() >= 1 and alice.locator(".flash.error").count() == 0
    cluster.wait(lambda: cluster.jobs()[job]["state"] in ("stopping", "cancelled"), 10, "alice's cancel to land")


def test_a_post_without_its_csrf_token_is_refused(browser, cluster):
    job = cluster.submit(tiny("csrf-target", 3000))["id"]
    page = browser.signed_in()
    page.goto(f"{cluster.base}/dashboard/jobs/{job}")
    request = page.context.request  # the browser's cookies, the session's included
    for form in ({}, {"csrf": "forged-" + secrets.token_hex(8)}):
        reply = request.post(f"{cluster.base}/dashboard/jobs/{job}/cancel", form=form, max_redirects=0)
        assert reply.status == 403 and "CSRF" in reply.text(), (form, reply.status)
    reply = request.post(f"{cluster.base}/dashboard/logout", form={}, max_redirects=0)
    assert reply.status == 403 and "CSRF" in reply.text()
    assert cluster.jobs()[job]["state"] not in TERMINAL + ("stopping",)
    page.goto(f"{cluster.base}/dashboard/jobs")
    assert urlsplit(page.url).path == "/dashboard/jobs"  # still signed in: the refused logout ended nothing


def test_the_tenants_and_policy_pages_show_the_tenants_file_in_force(browser, cluster):
    job = cluster.submit(tiny("counted", 3000))["id"]
    cluster.wait(lambda: cluster.jobs()[job]["state"] == "running", 90, "the job to run")
    page = browser.signed_in(BOB)
    page.goto(f"{cluster.base}/dashboard/tenants")
    vision = page.locator("table#tenants tr[data-tenant='vision']")
    assert vision.locator("td[data-col='quota']").inner_text().strip() == "2"
    assert page.locator("table#tenants tr[data-tenant='speech'] td[data-col='quota']").inner_text().strip() == "2"
    until(page, "() => document.querySelector(\"tr[data-tenant='vision'] td[data-col='used']\").innerText.trim() === '1'",
          None, LIVE_S, "vision's one running GPU on the tenants page")
    assert {c: vision.locator(f"td[data-col='{c}']").count() for c in ("borrowed", "lent", "waiting", "protected")} == {
        "borrowed": 1, "lent": 1, "waiting": 1, "protected": 1}
    page.goto(f"{cluster.base}/dashboard/policy")
    assert "tenants" in page.locator("#policy").inner_text().lower()
    assert "tenants" in page.locator("table#config-history").inner_text().lower()


def test_no_page_asks_another_host_for_anything(browser, cluster):
    job = cluster.submit(tiny("offline", 3000))["id"]
    page = browser.signed_in()
    for path in [*PAGES, f"jobs/{job}"]:
        before = len(browser.here)
        page.goto(f"{cluster.base}/dashboard/{path}")
        page.wait_for_timeout(2500)  # at least two live refreshes
        polled = [u for u in browser.here[before:] if urlsplit(u).path != f"/dashboard/{path}"]
        assert polled, f"{path}: nothing loaded or refreshed after the page itself"
    assert browser.elsewhere == []
    assert any("/dashboard/static/" in u for u in browser.here)


def test_the_logs_tail_follows_a_running_job(browser, cluster):
    code = cluster.work / "ticker"
    code.mkdir(exist_ok=True)
    (code / "ticker.py").write_text(TICKER)
    (code / "ticker.yaml").write_text("name: ticker\nentrypoint: ticker.py:train_loop\nworking_dir: .\nsteps: 600\n"
                                      "gpus: 1\nstep_time: 0.3\nconfig: {sleep: 0.3}\n")
    env = {**cluster.env, "PCS_RAY_USER": ALICE[0], "PCS_RAY_TENANT": ALICE[1]}
    job = one_json(subprocess.run([*CLI, "submit", str(code / "ticker.yaml"), "--json"], env=env, capture_output=True,
                                  text=True, timeout=180, cwd=ROOT, check=True).stdout)["id"]
    page = browser.signed_in()
    page.goto(f"{cluster.base}/dashboard/jobs/{job}")
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    logs = page.locator("pre#logs")

    def last_tick() -> int:
        return max(map(int, re.findall(r"tick (\d+)", logs.inner_text())), default=0)

    first = cluster.wait(last_tick, 120, "the job's first lines in the page's log tail", every=0.5)
    cluster.wait(lambda: last_tick() >= first + 5, 20, "newer lines to follow in the same page", every=0.5)
    assert navigations == []  # followed live, not by reloading the page
