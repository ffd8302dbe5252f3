"""The dashboard over HTTP in front of an in-process coordinator (no Ray): sign-in with the token or a one-time
ticket, the session cookie's flags, guarding of every page, fragment and asset, CSRF, and a cancel that ownership
refuses with the API's own one-line reason."""

from __future__ import annotations

import http.client
import time
import urllib.parse

import pytest
from api_helpers import TOKEN, local_host, served
from dashboard_helpers import dom

from pcs_ray.client import Client
from pcs_ray.contract import PermissionDeniedError
from pcs_ray.tenants.identity import Caller

TENANTS = {"tenants": {"t1": {"quota": 4}, "t2": {"quota": 4}}}


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    host = local_host(tmp_path_factory.mktemp("dashboard"))
    host.set_tenants(TENANTS)
    for i, (tenant, user) in enumerate([("t1", "al"), ("t2", "bo"), ("t1", "al")]):
        host.submit({"workload": "tiny_cnn", "steps": 500, "gpus": 4, "name": f"job-{i}"},
                    caller={"user": user, "tenant": tenant})
    with served(host) as server:
        yield host, server


def request(server, method: str, path: str, form: dict | None = None, cookie: str | None = None,
            headers: dict | None = None) -> tuple[int, dict, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        sent = dict(headers or {})
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        if cookie:
            sent["Cookie"] = cookie
        conn.request(method, path, body=body, headers=sent)
        reply = conn.getresponse()
        raw = reply.read().decode(errors="replace")
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, raw
    finally:
        conn.close()


def sign_in(server, user: str = "al", tenant: str = "t1") -> tuple[str, str]:
    """(cookie header, CSRF token) of a new session."""
    status, headers, _ = request(server, "POST", "/dashboard/login", {"token": TOKEN, "user": user, "tenant": tenant})
    assert status == 303 and headers["location"] == "/dashboard/jobs"
    cookie = headers["set-cookie"].split(";")[0]
    _, _, page = request(server, "GET", "/dashboard/jobs", cookie=cookie)
    csrf = dom(page).one("input", name="csrf").attrs["value"]
    return cookie, csrf


def test_the_right_token_signs_in_with_a_strict_httponly_cookie_that_expires(dash):
    _, server = dash
    status, headers, body = request(server, "POST", "/dashboard/login", {"token": TOKEN, "user": "al", "tenant": "t1"})
    assert status == 303 and headers["location"] == "/dashboard/jobs" and body == ""
    flags = [f.strip().lower() for f in headers["set-cookie"].split(";")]
    assert flags[0].startswith("pcs_ray_session=") and len(flags[0]) > 40
    assert {"httponly", "samesite=strict", "path=/dashboard", f"max-age={12 * 3600}"} <= set(flags)
    assert "default-src 'self'" in headers["content-security-policy"]


@pytest.mark.parametrize("token", ["", "wrong", TOKEN + "x", TOKEN[:-1], TOKEN.upper()])
def test_a_wrong_token_is_refused_with_the_form_and_no_cookie_or_data(dash, token):
    host, server = dash
    status, headers, body = request(server, "POST", "/dashboard/login", {"token": token, "user": "al"})
    assert status == 401 and "set-cookie" not in headers
    root = dom(body)
    assert "refused" in root.one("p", class_="error").text and root.one("form", id="login")
    assert "job-0" not in body and "data-job-id" not in body


@pytest.mark.parametrize("path", ["/dashboard/jobs", "/dashboard/cluster", "/dashboard/timeline", "/dashboard/tenants",
                                  "/dashboard/policy", "/dashboard/jobs/1", "/dashboard", "/dashboard/nope"])
def test_a_page_without_a_session_redirects_to_the_sign_in_form(dash, path):
    for cookie in (None, "pcs_ray_session=forged"):
        status, headers, body = request(dash[1], "GET", path, cookie=cookie)
        assert status == 303 and headers["location"] == "/dashboard/login" and "job-0" not in body


@pytest.mark.parametrize("path", ["/dashboard/fragment/jobs", "/dashboard/fragment/timeline", "/dashboard/fragment/jobs/1",
                                  "/dashboard/fragment/jobs/1/logs", "/dashboard/static/htmx.min.js",
                                  "/dashboard/static/dashboard.css", "/dashboard/snapshot.json"])
def test_fragments_assets_and_json_without_a_session_are_401(dash, path):
    status, _, body = request(dash[1], "GET", path)
    assert status == 401 and "job-0" not in body and "htmx" not in body


def test_the_sign_in_form_is_served_without_data(dash):
    status, headers, body = request(dash[1], "GET", "/dashboard/login")
    assert status == 200 and "data-job-id" not in body and "job-0" not in body
    assert dom(body).one("form", id="login")


def test_a_session_sees_every_page_and_the_assets(dash):
    host, server = dash
    cookie, _ = sign_in(server)
    for path in ("/dashboard/cluster", "/dashboard/jobs", "/dashboard/timeline", "/dashboard/tenants",
                 "/dashboard/policy", "/dashboard/jobs/1", "/dashboard/fragment/jobs?state=running",
                 "/dashboard/fragment/jobs/1/logs"):
        status, headers, body = request(server, "GET", path, cookie=cookie)
        assert status == 200, path
        assert headers["content-security-policy"].startswith("default-src 'self'")
    status, headers, js = request(server, "GET", "/dashboard/static/htmx.min.js", cookie=cookie)
    assert status == 200 and "htmx" in js and headers["content-type"].startswith("application/javascript")
    _, _, jobs = request(server, "GET", "/dashboard/jobs", cookie=cookie)
    rows = dom(jobs).one("table", id="jobs").one("tbody").all("tr")
    assert [r.attrs["data-job-id"] for r in rows] == [str(j) for j in sorted(host.core.jobs)]


def test_the_timeline_and_jobs_show_the_forecast_predict_gives(dash):
    host, server = dash
    cookie, _ = sign_in(server)
    _, _, page = request(server, "GET", "/dashboard/timeline", cookie=cookie)
    svg = dom(page).one("svg", id="timeline")
    bars = svg.all("rect", class_="predicted")
    assert bars
    for bar in bars:
        told = host.predict(int(bar.attrs["data-job-id"]))
        assert float(bar.attrs["data-finish"]) == pytest.approx(told["predicted_completion"], abs=1.0)
    queued = {int(g.attrs["data-job-id"]): g for g in svg.all("g", class_="queued-job")}
    assert queued
    for jid, lane in queued.items():
        told = host.predict(jid)
        assert float(lane.attrs["data-finish"]) == pytest.approx(told["predicted_completion"], abs=1.0)
        assert float(lane.one("rect", class_="predicted").attrs["data-start"]) == pytest.approx(told["predicted_start"], abs=1.0)
    _, _, jobs = request(server, "GET", "/dashboard/jobs", cookie=cookie)
    for row in dom(jobs).one("table", id="jobs").one("tbody").all("tr"):
        cell = row.one("td", data_col="predicted-finish")
        told = host.predict(int(row.attrs["data-job-id"]))["predicted_completion"]
        assert float(cell.attrs["data-epoch"]) == pytest.approx(told, abs=1.0)


def test_a_ticket_signs_in_once(dash, monkeypatch):
    host, server = dash
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    reply = Client(api=server.url).dashboard_ticket("bo", "t2")
    assert reply["url"] == f"{server.url}/dashboard/login?ticket={reply['ticket']}"
    assert reply["expires"] == pytest.approx(time.time() + 120, abs=5)
    path = reply["url"].removeprefix(server.url)
    status, headers, _ = request(server, "GET", path)
    assert status == 303 and headers["location"] == "/dashboard/jobs" and "httponly" in headers["set-cookie"].lower()
    cookie = headers["set-cookie"].split(";")[0]
    _, _, page = request(server, "GET", "/dashboard/jobs", cookie=cookie)
    assert "bo (t2)" in page  # the caller the ticket was asked for
    again, headers, body = request(server, "GET", path)
    assert again == 401 and "set-cookie" not in headers and dom(body).one("p", class_="error")
    unknown, _, _ = request(server, "GET", "/dashboard/login?ticket=nope")
    assert unknown == 401


def test_an_expired_ticket_is_refused(dash):
    host, server = dash
    ticket, _ = host.dashboard.issue_ticket(Caller("al", "t1"))
    clock = host.dashboard.clock
    host.dashboard.clock = lambda: clock() + 121
    try:
        status, headers, _ = request(server, "GET", f"/dashboard/login?ticket={ticket}")
    finally:
        host.dashboard.clock = clock
    assert status == 401 and "set-cookie" not in headers


def test_the_ticket_call_needs_the_clusters_token(dash):
    _, server = dash
    status, _, body = request(server, "POST", "/v1/dashboard_ticket", headers={"Authorization": "Bearer wrong"})
    assert status == 401 and "ticket" not in body


@pytest.mark.parametrize("how", ["none", "wrong", "other session's"])
def test_a_post_without_its_sessions_csrf_token_is_refused(dash, how):
    host, server = dash
    cookie, csrf = sign_in(server)
    _, other = sign_in(server)
    form = {} if how == "none" else {"csrf": "wrong" if how == "wrong" else other}
    status, _, body = request(server, "POST", "/dashboard/jobs/1/cancel", form, cookie=cookie)
    assert status == 403 and "CSRF" in body
    assert host.core.jobs[1].cancel_requested is False
    status, _, _ = request(server, "POST", "/dashboard/logout", form, cookie=cookie)
    assert status == 403
    assert request(server, "GET", "/dashboard/jobs", cookie=cookie)[0] == 200  # still signed in


def test_a_post_without_a_session_is_401(dash):
    status, _, _ = request(dash[1], "POST", "/dashboard/jobs/1/cancel", {"csrf": "x"})
    assert status == 401


def test_a_cancel_of_another_tenants_job_is_refused_with_the_apis_reason(dash, monkeypatch):
    host, server = dash
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    cookie, csrf = sign_in(server, "bo", "t2")
    _, _, page = request(server, "GET", "/dashboard/jobs/1", cookie=cookie)
    assert not dom(page).all("form", id="cancel")  # not offered to those who may not
    status, _, page = request(server, "POST", "/dashboard/jobs/1/cancel", {"csrf": csrf}, cookie=cookie)
    assert status == 403
    message = dom(page).one("p", class_="flash").text
    with pytest.raises(PermissionDeniedError) as api:
        Client(api=server.url).cancel(1, {"user": "bo", "tenant": "t2"})
    assert message == str(api.value) and "\n" not in message and "may not cancel" in message
    assert host.core.jobs[1].cancel_requested is False


def test_the_owner_cancels_with_the_csrf_token_through_the_coordinators_cancel(dash):
    host, server = dash
    cookie, csrf = sign_in(server, "al", "t1")
    _, _, page = request(server, "GET", "/dashboard/jobs/3", cookie=cookie)
    form = dom(page).one("form", id="cancel")
    assert form.attrs["action"] == "/dashboard/jobs/3/cancel"
    status, _, page = request(server, "POST", "/dashboard/jobs/3/cancel", {"csrf": csrf}, cookie=cookie)
    assert status == 200 and "cancel requested" in dom(page).one("p", class_="flash").text
    assert host.core.jobs[3].state.value == "cancelled" or host.core.jobs[3].cancel_requested
    _, _, jobs = request(server, "GET", "/dashboard/jobs?state=cancelled", cookie=cookie)
    assert [r.attrs["data-job-id"] for r in dom(jobs).one("tbody").all("tr")] == ["3"]


def test_the_htmx_header_carries_the_csrf_token_too(dash):
    _, server = dash
    cookie, csrf = sign_in(server)
    status, headers, _ = request(server, "POST", "/dashboard/logout", cookie=cookie, headers={"X-CSRF-Token": csrf})
    assert status == 303 and headers["location"] == "/dashboard/login"
    assert request(server, "GET", "/dashboard/jobs", cookie=cookie)[0] == 303  # the session ended


def test_a_session_expires(dash):
    host, server = dash
    cookie, _ = sign_in(server)
    clock = host.dashboard.clock
    host.dashboard.clock = lambda: clock() + 12 * 3600 + 1
    try:
        assert request(server, "GET", "/dashboard/jobs", cookie=cookie)[0] == 303
    finally:
        host.dashboard.clock = clock
    assert request(server, "GET", "/dashboard/jobs", cookie=cookie)[0] == 303  # gone for good


def test_the_api_still_wants_its_bearer_token(dash):
    _, server = dash
    cookie, _ = sign_in(server)
    status, _, _ = request(server, "GET", "/v1/status", cookie=cookie)
    assert status == 401


def test_one_snapshot_serves_every_dashboard_and_records_each_jobs_forecast_when_it_changes(dash):
    from pcs_ray.coordinator.dashboard_state import (
        HISTORY_POINTS,
        JobHistory,
        SnapshotKeeper,
    )

    host, _ = dash
    keeper = SnapshotKeeper(host, max_age_s=60.0)
    first = keeper.get()
    assert keeper.get() is first  # younger than max_age_s: the same snapshot
    keeper.invalidate()
    assert keeper.get() is not first
    history = JobHistory()
    for k in range(3 * HISTORY_POINTS):
        snap = {"now": float(k), "jobs": [{"id": 1, "state": "queued", "predicted_completion": 100.0 + k // 2,
                                           "bound": None, "steps": 0}]}
        history.record(snap)
    points = history.of(1)
    assert len(points) <= HISTORY_POINTS and points[0]["t"] == 0.0 and points[-1]["predicted"] == 100.0 + (3 * HISTORY_POINTS - 1) // 2
    assert all(a["predicted"] != b["predicted"] for a, b in zip(points, points[1:]))  # only changes are kept


def test_a_snapshot_that_holds_the_lock_long_is_retaken_less_often(dash, monkeypatch):
    import pcs_ray.coordinator.dashboard_state as state

    host, _ = dash
    keeper = state.SnapshotKeeper(host, max_age_s=0.5)
    real = state.take_snapshot
    monkeypatch.setattr(state, "take_snapshot", lambda *a: (real(*a)[0], 0.3))  # as if it held the lock 0.3 s
    keeper.get()
    assert keeper.max_age_s == pytest.approx(0.3 / state.LOCK_SHARE)


def test_queued_jobs_carry_the_start_the_forecast_gives_them(tmp_path):
    host = local_host(tmp_path, gpus=4, per_node=4)
    ids = [host.submit({"workload": "tiny_cnn", "steps": 300, "gpus": 4, "name": f"j{i}"}).id for i in range(4)]
    jobs = {j["id"]: j for j in host.status()["jobs"]}
    queued = [jid for jid in ids if jobs[jid]["state"] == "queued"]
    assert queued and all(jobs[jid]["predicted_start"] is not None for jid in queued)
    for jid in queued:
        told = host.predict(jid)
        assert told["predicted_start"] == jobs[jid]["predicted_start"] < told["predicted_completion"]
    assert all(jobs[jid]["predicted_start"] is None for jid in ids if jid not in queued)
    engine = host.core.model.engine
    fork = engine.fork(placement=False).play_forward()
    whole = engine.play_ahead(placement=False)
    assert fork == whole and fork.starts == {j: t for j, t in whole.starts.items() if j in fork.starts}
    assert {host.core.wall(t) for t in whole.starts.values()} >= {jobs[jid]["predicted_start"] for jid in queued}


def test_dashboards_polling_one_snapshot_share_one_rendering_of_each_fragment(dash, monkeypatch):
    """Twenty open jobs pages cost the coordinator's process one rendering per snapshot, not twenty; another
    query is its own rendering, and every session gets the same fragment."""
    from pcs_ray.dashboard import pages

    _, server = dash
    rendered: list[str] = []
    real = pages.jobs_fragment

    def counted(snapshot, q, session=None):
        rendered.append(q.url())
        return real(snapshot, q, session)

    monkeypatch.setattr(pages, "jobs_fragment", counted)
    sessions = [sign_in(server, user, tenant)[0] for user, tenant in (("al", "t1"), ("bo", "t2"), ("cy", "t1"))]
    for attempt in range(5):  # a snapshot is retaken every 0.5 s: find a window where all asks land in one
        rendered.clear()
        began = time.monotonic()
        bodies = [request(server, "GET", "/dashboard/fragment/jobs", cookie=c)[2] for c in sessions * 2]
        other = request(server, "GET", "/dashboard/fragment/jobs?state=queued", cookie=sessions[0])[2]
        if time.monotonic() - began < 0.25:
            break
    assert len(rendered) == 2 and "state=queued" not in rendered[0] and "state=queued" in rendered[1], rendered
    assert len(set(bodies)) == 1 and 'data-job-id="1"' in bodies[0] and other != bodies[0]
