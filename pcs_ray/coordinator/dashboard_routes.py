"""The dashboard's HTTP side: sign-in, sessions, CSRF, and the pages, served beside the API under ``/dashboard/``.

Guarding: only the sign-in form is served without a session. A page asked for
without one redirects (303) to it; a fragment, asset or JSON answers 401.
Signing in takes the Ray cluster's token (compared in constant time, as the
API does) or a one-time ticket from ``pcs-ray dashboard``; the session is an
``HttpOnly``, ``SameSite=Strict`` cookie scoped to ``/dashboard`` that expires.
Every POST carries the session's CSRF token (form field ``csrf`` or header
``X-CSRF-Token``), else 403. Every response forbids any request to another
host (``Content-Security-Policy: default-src 'self'``).

A page is rendered from a shared snapshot (:class:`~.dashboard_state.SnapshotKeeper`)
taken through the host on the API's thread pool; the HTML is built on a pool
of its own, outside the coordinator's lock, so dashboards never hold up the
API's calls. A cancel goes through the host's ``cancel`` with the signed-in
caller, so ownership refuses it with the API's own one-line reason.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib import resources

from aiohttp import web

from pcs_ray.api.wire import encode, status_of
from pcs_ray.contract import CoordinatorError
from pcs_ray.coordinator.dashboard_sessions import DashboardSession, DashboardSessions
from pcs_ray.coordinator.dashboard_state import SnapshotKeeper
from pcs_ray.dashboard import pages
from pcs_ray.dashboard.jobs_table import JobsQuery
from pcs_ray.dashboard.markup import PREFIX
from pcs_ray.dashboard.snapshot import job_by_id
from pcs_ray.tenants.identity import MAX_NAME, Caller
from pcs_ray.tenants.ownership import check_cancel
from pcs_ray.tenants.spec import TenantsError, tenants_from_dict

log = logging.getLogger("pcs_ray.coordinator.dashboard")

COOKIE = "pcs_ray_session"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
STATIC = {"htmx.min.js": "application/javascript", "htmx.LICENSE": "text/plain", "dashboard.css": "text/css",
          "favicon.svg": "image/svg+xml"}
LIVE_PAGES = ("cluster", "jobs", "timeline", "tenants", "policy")
SHARED_RENDERINGS = 256  # distinct fragments (path and query) kept per snapshot
REPORTS_MAX_AGE_S = 2.0  # a job's reports are read again once this old


def _html(body: str, status: int = 200) -> web.Response:
    return web.Response(status=status, text=body, content_type="text/html", charset="utf-8")


def _see(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


async def _form(request: web.Request) -> dict | None:
    """A POST's form fields (an empty form for a body of another type), or None when it cannot be read."""
    if request.content_type not in ("application/x-www-form-urlencoded", "multipart/form-data"):
        return {}
    try:
        return dict(await request.post())
    except (ValueError, UnicodeDecodeError, AssertionError, RuntimeError):
        return None


def _bad_form() -> web.Response:
    return web.Response(status=400, text="the form could not be read", content_type="text/plain")


def _form_text(form, name: str) -> str:
    value = form.get(name, "")
    return value.strip()[:MAX_NAME] if isinstance(value, str) else ""


class DashboardRoutes:
    """The dashboard of ``target`` (a :class:`~pcs_ray.coordinator.host.CoordinatorHost`), guarded by ``token``.
    ``pool``: the API's thread pool, on which snapshots and calls run."""

    def __init__(self, target, token: bytes, pool: ThreadPoolExecutor, render_workers: int = 2) -> None:
        self.target, self.token, self.pool = target, token, pool
        self.sessions: DashboardSessions = target.dashboard
        self.keeper = SnapshotKeeper(target)
        self.render_pool = ThreadPoolExecutor(max_workers=render_workers, thread_name_prefix="pcs-ray-dashboard")
        self.ttl = int(self.sessions.ttl_s)
        # A live fragment is the same for every session that asks with the same query: one rendering per
        # snapshot serves them all (the snapshot it belongs to, and its renderings by path and query).
        self._shared_of: dict | None = None
        self._shared: dict[str, asyncio.Future] = {}
        self._reports_of: dict[int, tuple[float, list[dict] | None]] = {}  # job id -> (when read, its reports)

    def add_to(self, app: web.Application) -> None:
        r = app.router
        r.add_route("*", PREFIX, self.root)
        r.add_get(PREFIX + "/login", self.login_form)
        r.add_post(PREFIX + "/login", self.login)
        r.add_post(PREFIX + "/logout", self.logout)
        r.add_get(PREFIX + "/static/{name}", self.static)
        r.add_get(PREFIX + "/snapshot.json", self.snapshot_json)
        for name in LIVE_PAGES:
            r.add_get(f"{PREFIX}/{name}", self._page_of(name))
            r.add_get(f"{PREFIX}/fragment/{name}", self._fragment_of(name))
        r.add_get(PREFIX + "/jobs/{id:\\d+}", self.job)
        r.add_post(PREFIX + "/jobs/{id:\\d+}/cancel", self.cancel)
        r.add_get(PREFIX + "/fragment/jobs/{id:\\d+}", self.job_fragment)
        r.add_get(PREFIX + "/fragment/jobs/{id:\\d+}/logs", self.logs_fragment)
        r.add_route("*", PREFIX + "/{tail:.*}", self.unknown)

    def close(self) -> None:
        self.render_pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def owns(path: str) -> bool:
        return path == PREFIX or path.startswith(PREFIX + "/")

    async def guard(self, request: web.Request, handler) -> web.StreamResponse:
        """Every dashboard response carries the security headers; aiohttp's own refusals become plain text."""
        try:
            response = await handler(request)
        except web.HTTPException as e:
            response = web.Response(status=e.status, text=e.text or e.reason, content_type="text/plain")
        except Exception as e:  # a bug: one line for the browser, the traceback in the coordinator's log
            log.exception("dashboard %s %s", request.method, request.path)
            response = web.Response(status=500, text=f"the dashboard failed: {type(e).__name__}: {' '.join(str(e).split())}",
                                    content_type="text/plain")
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    # -- who is asking -------------------------------------------------------------------
    def session_of(self, request: web.Request) -> tuple[str | None, DashboardSession | None]:
        sid = request.cookies.get(COOKIE)
        return sid, self.sessions.get(sid)

    @staticmethod
    def view_session(session: DashboardSession) -> pages.Session:
        return pages.Session(session.caller.user, session.caller.tenant, session.csrf)

    async def _csrf_checked(self, request: web.Request) -> tuple[DashboardSession | None, dict, web.Response | None]:
        """The session of a POST, its form, or the refusal: 401 without a session, 403 without its CSRF token."""
        _, session = self.session_of(request)
        if session is None:  # refused before its body is read
            return None, {}, web.Response(status=401, text="sign in first: no valid dashboard session",
                                          content_type="text/plain")
        form = await _form(request)
        if form is None:
            return None, {}, _bad_form()
        given = request.headers.get("X-CSRF-Token") or form.get("csrf")
        if not isinstance(given, str) or not self.sessions.csrf_ok(session, given):
            return None, form, web.Response(status=403, text="refused: missing or wrong CSRF token",
                                            content_type="text/plain")
        return session, form, None

    def _signed_in(self, caller: Caller) -> web.Response:
        sid, _ = self.sessions.open(caller)
        response = _see(f"{PREFIX}/jobs")
        response.set_cookie(COOKIE, sid, max_age=self.ttl, path=PREFIX, httponly=True, samesite="Strict")
        return response

    # -- sign-in ---------------------------------------------------------------------------
    async def root(self, request: web.Request) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            return await self.unknown(request)
        _, session = self.session_of(request)
        return _see(f"{PREFIX}/jobs" if session is not None else f"{PREFIX}/login")

    async def login_form(self, request: web.Request) -> web.Response:
        ticket = request.query.get("ticket")
        if ticket is not None:
            caller = self.sessions.redeem(ticket)
            if caller is None:
                return _html(pages.login_page("this sign-in link is unknown, used already or expired: run "
                                              "`pcs-ray dashboard` for a new one, or sign in with the token"), 401)
            return self._signed_in(caller)
        return _html(pages.login_page())

    async def login(self, request: web.Request) -> web.Response:
        form = await _form(request)
        if form is None:
            return _bad_form()
        token = form.get("token", "")
        offered = token.strip().encode("utf-8", "replace") if isinstance(token, str) else b""
        user, tenant = _form_text(form, "user"), _form_text(form, "tenant")
        if not hmac.compare_digest(offered, self.token):
            return _html(pages.login_page("the token was refused: it is not the Ray cluster's token "
                                          "(~/.ray/auth_token, or $RAY_AUTH_TOKEN)", user, tenant), 401)
        return self._signed_in(Caller(user, tenant or None))

    async def logout(self, request: web.Request) -> web.Response:
        _, _, refused = await self._csrf_checked(request)
        if refused is not None:
            return refused
        self.sessions.close(request.cookies.get(COOKIE))
        response = _see(f"{PREFIX}/login")
        response.del_cookie(COOKIE, path=PREFIX)
        return response

    async def unknown(self, request: web.Request) -> web.Response:
        _, session = self.session_of(request)
        if request.path == PREFIX + "/" and request.method in ("GET", "HEAD"):
            return _see(f"{PREFIX}/jobs" if session is not None else f"{PREFIX}/login")
        if session is None:
            return _see(f"{PREFIX}/login") if request.method in ("GET", "HEAD") else web.Response(
                status=401, text="sign in first: no valid dashboard session", content_type="text/plain")
        if request.method == "POST":
            _, _, refused = await self._csrf_checked(request)
            if refused is not None:
                return refused
        return _html(pages.not_found_page(f"no dashboard page {request.path}", self.view_session(session)), 404)

    # -- what a session sees ------------------------------------------------------------
    async def _snapshot(self) -> dict:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.keeper.get)

    async def _render(self, build, *args) -> str:
        return await asyncio.get_running_loop().run_in_executor(self.render_pool, build, *args)

    def _page_of(self, name: str):
        async def page(request: web.Request) -> web.Response:
            _, session = self.session_of(request)
            if session is None:
                return _see(f"{PREFIX}/login")
            snapshot = await self._snapshot()
            who = self.view_session(session)
            if name == "jobs":
                return _html(await self._render(pages.jobs_page, snapshot, JobsQuery.parse(request.query), who))
            return _html(await self._render(getattr(pages, f"{name}_page"), snapshot, who))
        return page

    def _fragment_of(self, name: str):
        async def fragment(request: web.Request) -> web.Response:
            _, session = self.session_of(request)
            if session is None:
                return web.Response(status=401, text="sign in first", content_type="text/plain")
            snapshot = await self._snapshot()
            who = self.view_session(session)
            if name == "jobs":
                q = JobsQuery.parse(request.query)
                return _html(await self._render_shared(snapshot, q.url(name), pages.jobs_fragment, snapshot, q, who))
            return _html(await self._render_shared(snapshot, name, getattr(pages, f"{name}_fragment"), snapshot, who))
        return fragment

    async def _render_shared(self, snapshot: dict, key: str, build, *args) -> str:
        """``build(*args)`` rendered once per snapshot and ``key`` however many dashboards poll it: 20 open
        jobs pages cost one rendering a snapshot, not twenty, in the coordinator's process."""
        if self._shared_of is not snapshot:
            self._shared_of, self._shared = snapshot, {}
        pending = self._shared.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._render(build, *args))
            if len(self._shared) < SHARED_RENDERINGS:
                self._shared[key] = pending
        return await asyncio.shield(pending)

    async def snapshot_json(self, request: web.Request) -> web.Response:
        _, session = self.session_of(request)
        if session is None:
            return web.Response(status=401, body=encode({"error": "sign in first"}), content_type="application/json")
        snapshot = await self._snapshot()
        body = await asyncio.get_running_loop().run_in_executor(self.render_pool, encode, snapshot)
        return web.Response(body=body, content_type="application/json")

    async def static(self, request: web.Request) -> web.Response:
        _, session = self.session_of(request)
        if session is None:
            return web.Response(status=401, text="sign in first", content_type="text/plain")
        name = request.match_info["name"]
        if name not in STATIC:
            return web.Response(status=404, text="no such file", content_type="text/plain")
        data = resources.files("pcs_ray.dashboard").joinpath("static", name).read_bytes()
        return web.Response(body=data, content_type=STATIC[name], headers={"Cache-Control": "private, max-age=3600"})

    # -- one job ------------------------------------------------------------------------
    def may_cancel(self, snapshot: dict, job: dict, caller: Caller) -> bool:
        """Whether the ownership rules in force let ``caller`` cancel ``job`` (the coordinator decides again)."""
        raw = snapshot["tenants"].get("tenants")
        try:
            tenants = tenants_from_dict(raw, "tenants") if raw else None
            check_cancel(tenants, caller, job["id"], job.get("tenant"), job.get("user"))
        except (CoordinatorError, TenantsError):
            return False
        return True

    async def _job_page(self, session: DashboardSession, job_id: int, message: str | None = None,
                        error: bool = False, status: int = 200) -> web.Response:
        snapshot = await self._snapshot()
        who = self.view_session(session)
        job = job_by_id(snapshot, job_id)
        if job is None:
            return _html(await self._render(pages.not_found_page, f"no job with id {job_id}", who), 404)
        logs = await self._logs(job_id, metrics=True)
        history = self.keeper.history.of(job_id)
        may = self.may_cancel(snapshot, job, session.caller)
        return _html(await self._render(pages.job_page, job, history, snapshot["now"], logs, who, may, message,
                                        error), status)

    async def job(self, request: web.Request) -> web.Response:
        _, session = self.session_of(request)
        if session is None:
            return _see(f"{PREFIX}/login")
        return await self._job_page(session, int(request.match_info["id"]))

    async def job_fragment(self, request: web.Request) -> web.Response:
        _, session = self.session_of(request)
        if session is None:
            return web.Response(status=401, text="sign in first", content_type="text/plain")
        job_id = int(request.match_info["id"])
        snapshot = await self._snapshot()
        job = job_by_id(snapshot, job_id)
        if job is None:
            return web.Response(status=404, text=f"no job with id {job_id}", content_type="text/plain")
        reports = await self._reports(job_id)
        return _html(await self._render(pages.job_fragment, job, self.keeper.history.of(job_id), snapshot["now"],
                                        self.view_session(session), reports))

    async def _reports(self, job_id: int) -> list[dict] | None:
        """The job's current run's reports, read at most every ``REPORTS_MAX_AGE_S`` however many of its
        pages are open (a run may log 100,000 of them; each open page polls every second)."""
        kept = self._reports_of.get(job_id)
        if kept is not None and time.monotonic() - kept[0] < REPORTS_MAX_AGE_S:
            return kept[1]
        reports = (await self._logs(job_id, metrics=True) or {}).get("metrics")
        if len(self._reports_of) >= SHARED_RENDERINGS:
            self._reports_of.clear()
        self._reports_of[job_id] = (time.monotonic(), reports)
        return reports

    async def _logs(self, job_id: int, metrics: bool = False) -> dict | None:
        """The job's logs (and with ``metrics``, its current run's reports), or None where there are none."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, partial(self.target.logs, job_id,
                                                                                      metrics=metrics))
        except (CoordinatorError, OSError):
            return None

    async def logs_fragment(self, request: web.Request) -> web.Response:
        _, session = self.session_of(request)
        if session is None:
            return web.Response(status=401, text="sign in first", content_type="text/plain")
        job_id = int(request.match_info["id"])
        logs = await self._logs(job_id)
        return _html(await self._render(pages.logs_fragment, job_id, logs, self.view_session(session)))

    async def cancel(self, request: web.Request) -> web.Response:
        session, _, refused = await self._csrf_checked(request)
        if refused is not None:
            return refused
        job_id = int(request.match_info["id"])
        caller = session.caller.to_wire()
        try:
            view = await asyncio.get_running_loop().run_in_executor(
                self.pool, lambda: self.target.cancel(job_id, caller))
        except CoordinatorError as e:
            return await self._job_page(session, job_id, " ".join(str(e).split()), error=True, status=status_of(e))
        self.keeper.invalidate()
        return await self._job_page(session, job_id, f"job {job_id}: cancel requested ({view['state']})")

