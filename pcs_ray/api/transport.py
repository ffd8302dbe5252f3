"""Calls to the coordinator's HTTP API with the standard library: no Ray, no event loop, one kept-alive connection.

A call that cannot reach the server (refused, reset: the coordinator is
restarting) asks ``rediscover`` for the URL again and retries until
``retry_s`` has passed; submissions carry an id, so a retried one lands once.
``on_wait`` hears, once per call, that it is waiting (a command says so on stderr
rather than hang silently).
"""

from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

from pcs_ray.api.wire import PREFIX, UNAUTHORIZED, decode_result, encode, refusal
from pcs_ray.api.ray_token import api_refusal, read_token
from pcs_ray.contract import CoordinatorError

_UNREACHABLE = (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError,
                http.client.RemoteDisconnected, http.client.BadStatusLine)


class HttpTransport:
    """One coordinator API endpoint; :meth:`call` answers as the in-process call does, or raises its typed error."""

    def __init__(self, url: str, token: str | None = None, retry_s: float = 60.0, timeout_s: float = 120.0,
                 rediscover=None, on_wait=None) -> None:
        self.token = read_token() if token is None else token
        self.retry_s = retry_s
        self.timeout_s = timeout_s
        self.rediscover = rediscover  # () -> URL or None (the coordinator is gone for good)
        self.on_wait = on_wait  # (message) -> None: told once per call that the API does not answer yet
        self._conn: http.client.HTTPConnection | None = None
        self._set_url(url)

    def _set_url(self, url: str) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not an http:// URL of a pcs-ray coordinator API: {url!r}")
        self.url = f"http://{parts.netloc}"
        self._host, self._port = parts.hostname, parts.port or 80
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def call(self, method: str, *args):
        deadline = time.monotonic() + self.retry_s
        delay = 0.0  # a kept-alive connection the server closed: retry at once
        told = False
        while True:
            try:
                return self._once(method, args)
            except _UNREACHABLE as e:
                self.close()
                if time.monotonic() + delay > deadline:
                    raise ConnectionError(f"cannot reach the pcs-ray coordinator's API at {self.url} "
                                          f"({type(e).__name__}); is it running? (`pcs-ray start`, or set $PCS_RAY_API)") from None
                if delay and not told and self.on_wait is not None:  # not a kept-alive connection's one retry
                    told = True
                    self.on_wait(f"the coordinator's API at {self.url} does not answer ({type(e).__name__}); "
                                 f"retrying for up to {self.retry_s:.0f} s (it may be restarting)")
                time.sleep(delay)
                delay = min(max(2 * delay, 0.1), 2.0)
                if self.rediscover is not None:
                    url = self.rediscover()
                    if url is None:
                        raise ConnectionError("the pcs-ray coordinator stopped (start one with `pcs-ray start`)") from None
                    if url != self.url:
                        self._set_url(url)

    def _once(self, method: str, args: tuple):
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._conn.request("POST", PREFIX + method, body=encode({"args": list(args)}), headers=headers)
        reply = self._conn.getresponse()
        raw = reply.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"error": {"type": "", "message": raw.decode(errors="replace")[:200]}}
        if reply.status == 200 and isinstance(body, dict) and "result" in body:
            return decode_result(method, body["result"])
        error = body.get("error") if isinstance(body, dict) else None
        message = " ".join(str(error.get("message", "")).split()) if isinstance(error, dict) else ""
        if reply.status == 401 or (isinstance(error, dict) and error.get("type") == UNAUTHORIZED):
            raise ConnectionError(api_refusal(self.url))
        typed = refusal(body)
        if typed is not None:
            raise typed
        if 400 <= reply.status < 500:
            raise CoordinatorError(f"the coordinator refused {method}: {message or reply.reason}")
        raise RuntimeError(f"the coordinator's API failed on {method} (HTTP {reply.status}): {message or reply.reason}")

