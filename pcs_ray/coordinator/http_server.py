"""The coordinator's calls over HTTP (aiohttp), served from a thread of the process that hosts it.

It answers from the host's state through the same methods the Ray actor
serves (:class:`~pcs_ray.coordinator.host.CoordinatorHost`), run on a small
thread pool so a call that waits for the coordinator's lock never holds up
the event loop. Every request must carry the Ray cluster's token
(``Authorization: Bearer <token>``), compared in constant time; anything else
is refused with 401 before its body is read. Bodies are bounded
(:data:`~pcs_ray.api.wire.MAX_BODY`), and a malformed request gets a 4xx
with a one-line JSON error. The wire format is :mod:`pcs_ray.api.wire`.
The web dashboard is served beside the calls, under ``/dashboard/``, guarded
by sessions signed in with the same token (:mod:`.dashboard_routes`).
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import json
import logging
import threading
import types
import typing
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from pcs_ray.api.wire import CALLS, MAX_BODY, PREFIX, READ_ONLY, UNAUTHORIZED, encode, error_body, status_of
from pcs_ray.contract import CoordinatorAPI, CoordinatorError
from pcs_ray.coordinator.dashboard_routes import DashboardRoutes

log = logging.getLogger("pcs_ray.coordinator.http")


def _accepted(hint) -> tuple[type, ...]:
    """The JSON types an annotation of ``CoordinatorAPI`` admits (an int where a float is asked)."""
    parts = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union else (hint,)
    out: list[type] = []
    for part in parts:
        part = typing.get_origin(part) or part
        out += [int, float] if part is float else [type(None)] if part is None or part is type(None) else [part]
    return tuple(out)


_HINTS = {name: {arg: _accepted(hint) for arg, hint in typing.get_type_hints(getattr(CoordinatorAPI, name)).items()
                 if arg != "return"}
          for name in CALLS if hasattr(CoordinatorAPI, name)}


def _check_types(call: str, arguments: dict) -> None:
    """Refuse, before the call runs, an argument of a JSON type the contract does not take (a null policy)."""
    for arg, value in arguments.items():
        accepted = _HINTS.get(call, {}).get(arg)
        if accepted and not isinstance(value, accepted):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in accepted)
            raise TypeError(f"{arg} must be {names}, not {type(value).__name__ if value is not None else 'null'}")


def _from_query(call: str, query) -> dict:
    """Query arguments (text) as the numbers the call takes where they read as numbers."""
    out = {}
    for arg, text in query.items():
        accepted = _HINTS.get(call, {}).get(arg, ())
        value = text
        for kind in (int, float):
            if kind in accepted and not isinstance(value, kind):
                try:
                    value = kind(text)
                except ValueError:
                    pass
        out[arg] = value
    return out


def _reply(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")


def _refuse(status: int, kind: str, message: str) -> web.Response:
    return _reply(status, error_body(kind, message))


class ApiServer:
    """Serves ``target``'s calls (a :class:`~pcs_ray.contract.CoordinatorAPI` with ``ping``) on ``host:port``."""

    def __init__(self, target, token: str, host: str = "127.0.0.1", port: int = 0, max_body: int = MAX_BODY,
                 workers: int = 8) -> None:
        if not token:
            raise ValueError("the coordinator's API needs the Ray cluster's token; none was found")
        self.target = target
        self._token = token.encode()
        self.host, self.port = host, port
        self.max_body = max_body
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pcs-ray-api")
        # From the class: an instance attribute may shadow a call (the actor keeps its settings in ``config``).
        self._calls = {name: getattr(type(target), name).__get__(target) for name in CALLS
                       if callable(getattr(type(target), name, None))}
        self._signatures = {name: inspect.signature(call) for name, call in self._calls.items()}
        # The dashboard, for a host that keeps its sign-in sessions (``CoordinatorHost.dashboard``).
        self.dashboard = DashboardRoutes(target, self._token, self._pool) if hasattr(target, "dashboard") else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # -- lifecycle -------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> str:
        """Listen (on a thread of its own); returns the URL. Port 0 takes a free one."""
        ready = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._listen())
            except BaseException as e:  # the port is taken, the interface does not exist ...
                failed.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="pcs-ray-api", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise TimeoutError(f"the coordinator's API did not start in {timeout_s:.0f} s")
        if failed:
            raise failed[0]
        return self.url

    async def _listen(self) -> None:
        app = web.Application(client_max_size=self.max_body, middlewares=[self._guard])
        app.router.add_route("*", PREFIX + "{call}", self._call)
        if self.dashboard is not None:
            self.dashboard.add_to(app)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.dashboard is not None:
            self.dashboard.close()

    # -- requests ----------------------------------------------------------------------
    @web.middleware
    async def _guard(self, request: web.Request, handler):
        """Authentication first (nothing is served without the token), then one-line JSON for every refusal.
        The dashboard's paths guard themselves (sessions signed in with the same token, see ``dashboard_routes``)."""
        if self.dashboard is not None and self.dashboard.owns(request.path):
            return await self.dashboard.guard(request, handler)
        given = request.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        offered = token.strip().encode("utf-8", "replace")  # a header of non-UTF-8 bytes is just a wrong token
        if scheme.lower() != "bearer" or not hmac.compare_digest(offered, self._token):
            what = "a wrong token" if given else "no token"
            return _refuse(401, UNAUTHORIZED, f"{what}: send the Ray cluster's token as 'Authorization: Bearer "
                           f"<token>' (pcs-ray clients read $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)")
        try:
            return await handler(request)
        except web.HTTPException as e:  # aiohttp's own: 404, 405, 413 ...
            return _refuse(e.status, type(e).__name__.removeprefix("HTTP"), e.text or e.reason)

    async def _call(self, request: web.Request) -> web.Response:
        name = request.match_info["call"]
        signature = self._signatures.get(name)
        if signature is None:
            return _refuse(404, "NotFound", f"no call {name!r}; the calls are {', '.join(self._signatures)}")
        if request.method == "GET" and name in READ_ONLY:
            args, kwargs = [], _from_query(name, request.query)
        elif request.method == "POST":
            args, kwargs = await self._arguments(request)
        else:
            return _refuse(405, "MethodNotAllowed", f"{name} takes POST" + (" or GET" if name in READ_ONLY else ""))
        if isinstance(args, web.Response):
            return args
        try:
            _check_types(name, signature.bind(*args, **kwargs).arguments)
        except TypeError as e:
            return _refuse(400, "BadArguments", f"{name}: {e}")
        try:
            call = self._calls[name]
            result = await asyncio.get_running_loop().run_in_executor(self._pool, lambda: call(*args, **kwargs))
        except CoordinatorError as e:
            return _refuse(status_of(e), type(e).__name__, str(e))
        except (TypeError, ValueError, OverflowError) as e:  # an argument the call could not take (a job id "x")
            return _refuse(400, "BadArguments", f"{name}: {e}")
        except Exception as e:
            log.exception("API call %s", name)
            return _refuse(500, "InternalError", f"{name} failed: {type(e).__name__}: {e}")
        try:
            return _reply(200, encode({"result": result}))
        except (TypeError, ValueError) as e:
            log.exception("API reply of %s", name)
            return _refuse(500, "InternalError", f"{name}: the reply is not JSON ({e})")

    async def _arguments(self, request: web.Request):
        """``(args, kwargs)`` from a JSON body, or the 4xx response that refuses it."""
        if (request.content_length or 0) > self.max_body:  # refused before any of it is read
            return _refuse(413, "RequestEntityTooLarge", f"the body is over {self.max_body} bytes"), {}
        raw = await request.read()  # over max_body without a length: aiohttp raises 413, answered by the guard
        if not raw.strip():
            return [], {}
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as e:
            return _refuse(400, "BadRequest", f"the body is not JSON ({type(e).__name__})"), {}
        if not isinstance(body, dict) or set(body) - {"args", "kwargs"}:
            return _refuse(400, "BadRequest", 'the body must be a JSON object {"args": [...], "kwargs": {...}}'), {}
        args, kwargs = body.get("args", []), body.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            return _refuse(400, "BadRequest", '"args" must be a list and "kwargs" an object'), {}
        return args, kwargs
