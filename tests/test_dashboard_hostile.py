"""Every page of the dashboard rendered from a snapshot whose every opaque text is hostile markup: none of it
may become an element or an attribute, and each payload must come through as text.

"Opaque" is any field the pages show without computing on it (names, tenants, users, node and GPU names,
config keys and values, reasons, errors, log lines, metric names and values, messages, the session's own
strings), whether or not a user controls it today. Times, step counts and states stay typed: the pages
compute on them. Each page is also rendered from the same snapshot with plain text in those fields; the two
must have the same elements with the same attribute names, in the same order. The static report gets the same
check, and the coordinator's routes serve a job, a sign-in and a path as hostile as a caller can send them.
``bench/markup_mutations.py`` removes each escape in turn and runs the first two tests against it.
"""

from __future__ import annotations

import http.client
import re
import urllib.parse
from collections.abc import Callable

from api_helpers import TOKEN, local_host, served
from dashboard_helpers import NOW, Element, dom
from markupsafe import escape

from pcs_ray.dashboard import pages
from pcs_ray.dashboard.jobs_table import PAGE_ROWS, JobsQuery
from pcs_ray.dashboard.static_report import write_pages

# Starts with a whole tag (the timeline shows a name's first 12 characters), leaves any quoted attribute and
# any title element, and carries an entity that must stay literal.
HOSTILE = "<img src=x>\"'></title><script>alert(1)</script><b onclick=alert(2) data-pwn>{}&amp;"
# Every & on a page starts a character reference: escaping writes one for each & of a value (a URL's too).
BARE_AMPERSAND = re.compile(r"&(?!#\d+;|#x[0-9a-fA-F]+;|[a-zA-Z]+;)")
# Fields no page shows, and why.
NOT_SHOWN = {"report-note": "a report that is not a number is not drawn",
             "segment-error": "a run's error is only 'failed' in the runs table",
             "query-tenant": "a filter is percent-encoded in links", "query-user": "a filter is percent-encoded in links"}


def hostile(field: str) -> str:
    return HOSTILE.format(field)


def plain(field: str) -> str:
    return f"ok-{field}"


def _job(text: Callable[[str], str], jid: int, state: str, **extra) -> dict:
    f = f"job{jid}"
    for key, field in (("tenant", "tenant-a"), ("user", f"{f}-user")):
        if key not in extra:
            extra[key] = text(field)
    out = {"id": jid, "name": text(f"{f}-name"), "workload": text(f"{f}-workload"), "class": "B", "state": state,
           "gpus": [], "demand": [text(f"{f}-demand-min"), text(f"{f}-demand-max")], "steps": 40, "total_steps": 100,
           "submit": NOW - 900, "start": None, "finish": None, "predicted_completion": None, "predicted_start": None,
           "first_predicted": None, "bound": None, "preemptions": text(f"{f}-preemptions"),
           "lost_steps": text(f"{f}-lost-steps"), "attempts": 0, "error": None, "metrics": None, "segments": [],
           "waiting": None, "protected_until": None}
    out.update(extra)
    return out


def build_snapshot(text: Callable[[str], str]) -> dict:
    """A snapshot that takes every page through each of its branches, with ``text(field)`` in every opaque field."""
    gpu = [f"{text('node-0')}:{i}" for i in range(3)] + [f"{text('node-1')}:0"]
    ended = [{"start": NOW - 1200, "end": NOW - 1000, "gpus": [gpu[2]], "kind": "start", "from_step": 0,
              "stopped_for": text("stopped-for")},
             {"start": NOW - 1000, "end": NOW - 800, "gpus": [gpu[2]], "kind": "resume", "from_step": 10,
              "error": text("segment-error")}]
    jobs = [
        _job(text, 1, "running", gpus=gpu[:2], start=NOW - 600, predicted_completion=NOW + 900, first_predicted=NOW + 600,
             bound=NOW + 300, protected_until=NOW + 60,
             segments=[{"start": NOW - 700, "end": NOW - 650, "gpus": [gpu[3]], "kind": "start", "from_step": 0},
                       {"start": NOW - 600, "end": None, "gpus": gpu[:2], "kind": "migrate", "from_step": 5}]),
        _job(text, 2, "stopping", gpus=[gpu[3]], start=NOW - 300, predicted_completion=NOW + 200, bound=NOW + 400,
             segments=[{"start": NOW - 300, "end": None, "gpus": [gpu[3]], "kind": "start", "from_step": 0}]),
        _job(text, 3, "queued", predicted_start=NOW + 100, predicted_completion=NOW + 500, first_predicted=NOW + 450,
             bound=NOW + 700, waiting={"code": text("waiting-code"), "text": text("waiting-text")}),
        _job(text, 4, "queued", predicted_completion=NOW + 800, waiting={"code": text("waiting-code-only")}),
        _job(text, 5, "failed", start=NOW - 1200, finish=NOW - 800, error=text("job-error"), segments=ended),
        _job(text, 6, "finished", start=NOW - 500, finish=NOW - 100, steps=100, first_predicted=NOW - 150,
             metrics={text("metric-name"): text("metric-value"), "loss": 0.25},
             segments=[{"start": NOW - 500, "end": NOW - 100, "gpus": [gpu[0]], "kind": "start", "from_step": 0}]),
        _job(text, 7, "queued", tenant=text("tenant-b"), waiting={"code": "tenant-quota", "text": text("quota-text")}),
        _job(text, 8, "cancelled", tenant=None, user=None, finish=NOW - 50),
    ]
    nodes = [{"name": text("node-0"), "nvlink_groups": [gpu[:2], [gpu[2]]],
              "gpus": [{"name": g, "index": i, "speed_class": text(f"speed-{i}"),
                        "scores": {text(f"score-class-{i}"): 1.2} if i != 1 else {}} for i, g in enumerate(gpu[:3])]},
             {"name": text("node-1"), "nvlink_groups": [[gpu[3]]],
              "gpus": [{"name": gpu[3], "index": 0, "speed_class": "nominal", "scores": {}}]}]
    policy = {"policy": text("policy-name"), text("param-key"): text("param-value"),
              "nested": {text("nested-key"): text("nested-value")}}
    tenants = {"tenants": {"tenants": {text("tenant-a"): {"quota": 2}, text("tenant-b"): {"quota": 1}}},
               "since": NOW - 2000,
               "usage": {text("tenant-a"): {"jobs": 5, "waiting": 2, "gpus": 3}, text("tenant-c"): {"jobs": 1, "gpus": 1},
                         "": {"jobs": 1, "gpus": 0}}}
    history = [{"t": NOW - 3000, "kind": text("history-kind"), "source": text("history-source"),
                "what": text("history-what")}, {"t": None, "kind": "config", "what": text("history-what-2")}]
    return {"now": NOW, "jobs": jobs, "nodes": nodes,
            "config": {"policy": policy, "placement": {"placement": text("placement-name")},
                       "source": text("config-source"), "since": NOW - 2000},
            "tenants": tenants, "history": history,
            "tenant_history": [{"t": NOW - 60, "used": {text("tenant-a"): 2, "": 1}},
                               {"t": NOW - 30, "used": {text("tenant-a"): 3, text("tenant-c"): 1}}]}


def render_all(text: Callable[[str], str]) -> dict[str, str]:
    """Every page and fragment the dashboard serves, by name, rendered from ``build_snapshot(text)``."""
    snap = build_snapshot(text)
    session = pages.Session(text("session-user"), text("session-tenant"), text("csrf"))
    anonymous = pages.Session("", None, text("csrf-2"))
    job1, job5 = snap["jobs"][0], snap["jobs"][4]
    job_history = [{"t": NOW - 120, "steps": 20, "predicted": NOW + 700}, {"t": NOW - 60, "steps": 30}]
    reports = [{"step": 1, "attempt": 2, text("report-metric"): 0.9, "note": text("report-note")},
               {"step": 2, "attempt": 2, text("report-metric"): 0.5}]
    logs = {"attempt": text("attempt"), "metrics": reports,
            "ranks": {text("rank-0"): {"text": f"{text('log-0a')}\n{text('log-0b')}\n"},
                      text("rank-1"): {"text": text("log-1")}}}
    one_rank = {"attempt": 1, "ranks": {"0": {"text": text("log-single")}}}
    query = JobsQuery(tenant=text("query-tenant"), user=text("query-user"))
    filler = [_job(plain, 100 + i, "queued", tenant=text("tenant-a")) for i in range(2 * PAGE_ROWS)]  # 3 pages
    many = {**snap, "jobs": snap["jobs"] + filler}
    out = {
        "login": pages.login_page(text("login-error"), text("login-user"), text("login-tenant")),
        "cluster": pages.cluster_page(snap, session),
        "jobs": pages.jobs_page(snap, JobsQuery(), session, text("flash"), error=True),
        "jobs-filtered": pages.jobs_page(snap, query, session, text("flash-ok")),
        "jobs-fragment": pages.jobs_fragment(snap, JobsQuery(sort="name", order="desc"), session),
        "jobs-page-2": pages.jobs_page(many, JobsQuery(tenant=text("tenant-a"), page=2), session),
        "timeline": pages.timeline_page(snap, session),
        "tenants": pages.tenants_page(snap, session),
        "policy": pages.policy_page(snap, anonymous),
        "job-1": pages.job_page(job1, job_history, NOW, logs, session, may_cancel=True, message=text("job-flash")),
        "job-5": pages.job_page(job5, [], NOW, one_rank, None),
        "job-fragment": pages.job_fragment(job1, job_history, NOW, session, reports),
        "logs-fragment": pages.logs_fragment(1, logs, session),
        "not-found": pages.not_found_page(text("not-found"), session),
    }
    for j in snap["jobs"]:
        out.setdefault(f"job-{j['id']}", pages.job_page(j, [], NOW, None, session, may_cancel=True))
    return out


def render_report(text: Callable[[str], str], folder) -> dict[str, str]:
    """``pcs-ray report --html``'s files."""
    return {p.name: p.read_text(encoding="utf-8") for p in write_pages(build_snapshot(text), folder) if p.suffix == ".html"}


def _walk(root: Element):
    for child in root.children:
        yield child
        yield from _walk(child)


def shape(html: str) -> list[tuple[str, tuple[str, ...]]]:
    """Each element's tag and attribute names, in document order."""
    return [(el.tag, tuple(sorted(el.attrs))) for el in _walk(dom(html))]


def _check(name: str, evil: str, calm: str) -> None:
    assert shape(evil) == shape(calm), f"{name}: the payload made elements or attributes"
    assert "<img" not in evil and "<b " not in evil and "<script>alert" not in evil, name
    bare = BARE_AMPERSAND.search(evil)
    assert bare is None, f"{name}: an & that starts no character reference: {evil[bare.start() - 60:bare.end() + 20]!r}"
    assert all(not a.lower().startswith("on") and a != "data-pwn" for el in _walk(dom(evil)) for a in el.attrs), name


def _words(html: str) -> str:
    """The page's text and attribute values, as a browser reads them."""
    return "\n".join(part for el in _walk(dom(html)) for part in ["".join(el.parts), *el.attrs.values()])


def test_every_page_turns_every_hostile_field_into_text():
    fields: set[str] = set()

    def spy(field: str) -> str:
        fields.add(field)
        return hostile(field)

    evil, calm = render_all(spy), render_all(plain)
    for name in evil:
        _check(name, evil[name], calm[name])
    fields -= set(NOT_SHOWN)
    seen = "\n".join(_words(html) for html in evil.values())
    missing = sorted(f for f in fields if hostile(f) not in seen)
    assert not missing, f"never shown, so never tested: {missing}"
    raw = "\n".join(evil.values())
    unescaped = sorted(f for f in fields if str(escape(hostile(f))) not in raw)
    assert not unescaped, f"not found escaped in the HTML: {unescaped}"


def test_the_static_report_turns_every_hostile_field_into_text(tmp_path):
    evil, calm = render_report(hostile, tmp_path / "evil"), render_report(plain, tmp_path / "calm")
    assert set(evil) == set(calm) and "jobs.html" in evil
    for name in evil:
        _check(name, evil[name], calm[name])
    assert hostile("job1-name") in _words(evil["jobs.html"])


def _get(port: int, path: str, cookie: str = "", form: dict | None = None) -> tuple[int, dict, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Cookie": cookie} if cookie else {}
        if form is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request("POST" if form is not None else "GET", path,
                     body=None if form is None else urllib.parse.urlencode(form), headers=headers)
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read().decode()
    finally:
        conn.close()


def test_the_served_pages_turn_what_callers_send_into_text(tmp_path):
    """Through the coordinator's routes: a job, a sign-in and a path, each as hostile as the API lets them be."""
    evil = "<img src=x>\"'><script>alert(1)</script><b onclick=alert(2)>&amp;"  # within a caller's 100 characters
    host = local_host(tmp_path)
    jid = host.submit({"workload": "tiny_cnn", "steps": 500, "gpus": 2, "name": evil},
                      caller={"user": evil, "tenant": evil}).id
    with served(host) as server:
        status, _, refused = _get(server.port, "/dashboard/login", form={"token": "wrong", "user": evil, "tenant": evil})
        assert status == 401
        status, headers, _ = _get(server.port, "/dashboard/login", form={"token": TOKEN, "user": evil, "tenant": evil})
        assert status == 303
        cookie = headers["set-cookie"].split(";")[0]
        quoted = urllib.parse.quote(evil, safe="")
        paths = [f"/dashboard/{p}" for p in ("cluster", "jobs", "timeline", "tenants", "policy")]
        paths += [f"/dashboard/fragment/{p}" for p in ("cluster", "jobs", "timeline", "tenants", "policy")]
        paths += [f"/dashboard/jobs/{jid}", f"/dashboard/fragment/jobs/{jid}", f"/dashboard/fragment/jobs/{jid}/logs",
                  f"/dashboard/jobs?tenant={quoted}&user={quoted}&sort=name", f"/dashboard/{quoted}"]
        served_pages = {"login refused": refused}
        for path in paths:
            status, _, body = _get(server.port, path, cookie)
            assert status in (200, 404), (path, status)
            served_pages[path] = body
    for path, body in served_pages.items():
        assert "<img" not in body and "<script>alert" not in body and "<b " not in body, path
        assert BARE_AMPERSAND.search(body) is None, path
        assert len(dom(body).all("script")) <= 1, path  # htmx, nothing else
    for path in ("login refused", "/dashboard/jobs", f"/dashboard/jobs/{jid}", f"/dashboard/{quoted}"):
        assert evil in _words(served_pages[path]), path
