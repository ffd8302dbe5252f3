"""The coordinator's HTTP API: nothing served without the cluster's token, one-line 4xx refusals for malformed
requests, the advert clients find it by, retries across a restart that land once, and a CLI that needs no Ray."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from api_helpers import TOKEN, local_host, served

from pcs_ray.api.advert import API_ENV, read_advert, remove_advert, write_advert
from pcs_ray.api.discovery import find_api
from pcs_ray.api.transport import HttpTransport
from pcs_ray.api.wire import CALLS, MAX_BODY, encode
from pcs_ray.client import Client

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    host = local_host(tmp_path_factory.mktemp("http"))
    with served(host) as server:
        yield host, server


def request(server, method: str, path: str, body: bytes | None = None, token: str | None = TOKEN,
            headers: dict | None = None) -> tuple[int, dict | None]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=body, headers=sent)
        reply = conn.getresponse()
        raw = reply.read()
        return reply.status, (json.loads(raw) if raw else None)
    finally:
        conn.close()


def one_line_error(body) -> str:
    message = body["error"]["message"]
    assert message and "\n" not in message and "Traceback" not in message
    return message


# -- authentication -------------------------------------------------------------------------------
@pytest.mark.parametrize("token", [None, "", "wrong", TOKEN + "x", TOKEN[:-1], " " + TOKEN.upper()])
@pytest.mark.parametrize("method, path", [("GET", "/v1/status"), ("POST", "/v1/submit"), ("GET", "/v1/nope"),
                                          ("GET", "/"), ("DELETE", "/v1/cancel")])
def test_nothing_is_served_without_the_clusters_token(api, token, method, path):
    host, server = api
    before = len(host.core.jobs)
    body = json.dumps({"args": [{"workload": "tiny_cnn", "steps": 5}]}).encode() if method == "POST" else None
    status, reply = request(server, method, path, body, token=token)
    assert status == 401 and reply["error"]["type"] == "Unauthorized"
    assert "Authorization: Bearer" in one_line_error(reply) and "RAY_AUTH_TOKEN" in one_line_error(reply)
    assert len(host.core.jobs) == before


def test_a_client_with_a_wrong_or_no_token_gets_one_line_naming_what_to_set(api, monkeypatch, tmp_path):
    _, server = api
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "not-the-token")
    with pytest.raises(ConnectionError) as wrong:
        Client(api=server.url).status()
    assert "the token from $RAY_AUTH_TOKEN is not the cluster's; set $RAY_AUTH_TOKEN" in str(wrong.value)
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    with pytest.raises(ConnectionError) as missing:
        Client(api=server.url).status()
    assert "none was found; put it in ~/.ray/auth_token, or set $RAY_AUTH_TOKEN" in str(missing.value)
    for e in (wrong.value, missing.value):
        assert "\n" not in str(e) and server.url in str(e)


def test_the_server_refuses_to_start_without_a_token(api):
    from pcs_ray.coordinator.http_server import ApiServer

    with pytest.raises(ValueError, match="needs the Ray cluster's token"):
        ApiServer(api[0], "")


# -- malformed requests ------------------------------------------------------------------------------
@pytest.mark.parametrize("method, path, body, status", [
    ("POST", "/v1/status", b"{not json", 400),
    ("POST", "/v1/status", b"[1, 2]", 400),
    ("POST", "/v1/status", b'{"args": {}}', 400),
    ("POST", "/v1/status", b'{"extra": 1}', 400),
    ("POST", "/v1/predict", b'{"args": []}', 400),  # a missing argument
    ("POST", "/v1/predict", b'{"args": ["x"]}', 400),  # a job id that is no number
    ("POST", "/v1/predict", b'{"args": [1, 2, 3]}', 400),
    ("POST", "/v1/predict", b'{"kwargs": {"nope": 1}}', 400),
    ("POST", "/v1/predict", b'{"args": [123456]}', 404),  # an unknown job
    ("POST", "/v1/submit", b'{"args": [[]]}', 400),
    ("POST", "/v1/drain", b"{}", 404),  # not a call the API serves
    ("POST", "/v1/__init__", b"{}", 404),
    ("GET", "/v1/submit", None, 405),  # writes take POST
    ("PUT", "/v1/status", b"{}", 405),
    ("GET", "/v2/status", None, 404),
    ("POST", "/v1/status", b"[" * 100_000 + b"]" * 100_000, 400),  # nested past the JSON parser's recursion limit
])
def test_malformed_requests_get_a_4xx_with_one_line(api, method, path, body, status):
    got, reply = request(api[1], method, path, body)
    assert got == status, reply
    one_line_error(reply)


def test_bodies_are_bounded(api):
    got, reply = request(api[1], "POST", "/v1/status", b" " * (MAX_BODY + 1))
    assert got == 413
    one_line_error(reply)
    assert request(api[1], "GET", "/v1/status")[0] == 200  # still serving


@pytest.mark.parametrize("raw, status", [
    (b"GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n\r\n", 401),  # not UTF-8
    (b"GET /v1/st\xffatus HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"POST /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
     b"\r\nContent-Length: 5000000\r\n\r\n{}", 413),  # refused on its declared length, without waiting for it
    (b"GARBAGE\r\n\r\n", 400),
])
def test_requests_http_client_cannot_send_are_refused_below_500(api, raw, status):
    import socket

    with socket.create_connection(("127.0.0.1", api[1].port), timeout=10) as s:
        s.sendall(raw)
        assert s.recv(200).split(b"\r\n")[0].split()[1] == str(status).encode()
    assert request(api[1], "GET", "/v1/ping")[0] == 200


def test_read_calls_answer_get_with_query_arguments(api):
    host, server = api
    status, reply = request(server, "GET", "/v1/status")
    assert status == 200 and isinstance(reply["result"]["jobs"], list)
    jid = host.submit({"workload": "tiny_cnn", "steps": 5}).id
    status, reply = request(server, "GET", f"/v1/predict?job_id={jid}")
    assert status == 200 and reply["result"]["id"] == jid
    assert (reply["result"]["basis"], reply["result"]["refresh_age_s"]) == ("fresh", None)  # no refresh play yet
    assert request(server, "GET", "/v1/ping")[1]["result"]["jobs"] == len(host.core.jobs)
    assert set(CALLS) >= {"submit", "status", "predict", "cancel", "config", "set_config"}


def test_calls_are_the_hosts_methods_even_where_an_attribute_shadows_one(tmp_path):
    """The Ray actor keeps its settings in ``self.config``; ``config`` is still the call."""
    host = local_host(tmp_path)
    host.config = {"not": "the call"}
    with served(host) as server:
        status, reply = request(server, "GET", "/v1/config")
    assert status == 200 and reply["result"]["policy"] == json.loads(json.dumps(host.core.config()["policy"]))


# -- finding the API -----------------------------------------------------------------------------
def test_clients_find_the_api_from_the_env_or_the_advert_for_their_cluster(tmp_path, monkeypatch):
    """(The well-known ports are not asked here: ``ports=()``; see test_api_discovery.py.)"""
    monkeypatch.delenv(API_ENV, raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert find_api(None, tmp_path, ports=()) is None
    write_advert(tmp_path, "http://127.0.0.1:1234", "127.0.0.1:6379", 42)
    assert (tmp_path / "api.json").stat().st_mode & 0o777 == 0o600
    assert find_api(None, tmp_path, ports=()) == "http://127.0.0.1:1234"
    assert find_api("127.0.0.1:6379", tmp_path, ports=()) == "http://127.0.0.1:1234"
    assert find_api("ray://127.0.0.1:6379", tmp_path, ports=()) == "http://127.0.0.1:1234"
    assert find_api("localhost:6379", tmp_path, ports=()) == "http://127.0.0.1:1234"
    assert find_api("10.0.0.9:6379", tmp_path, ports=()) is None  # another cluster's coordinator
    assert find_api("127.0.0.1:6380", tmp_path, ports=()) is None
    write_advert(tmp_path, "http://127.0.0.1:1234", "192.0.2.2:6379", 42)  # Ray names the node by its IP
    assert find_api("127.0.0.1:6379", tmp_path, ports=()) == "http://127.0.0.1:1234"
    assert find_api("192.0.2.3:6379", tmp_path, ports=()) is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    assert find_api(None, tmp_path, ports=()) is None
    monkeypatch.setenv(API_ENV, "http://127.0.0.1:999")
    assert find_api("10.0.0.9:6379", tmp_path, ports=()) == "http://127.0.0.1:999"
    remove_advert(tmp_path, pid=7)  # someone else's: kept
    assert read_advert(tmp_path) is not None
    remove_advert(tmp_path, pid=42)
    assert read_advert(tmp_path) is None


def test_a_restarted_coordinator_is_found_again_and_a_retried_submission_lands_once(tmp_path, monkeypatch):
    """The server goes away after a submission; the client's retry of the next one waits, re-reads the
    advert (the new server has another port) and lands it once; the first one is not submitted again."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    host = local_host(tmp_path)
    first = served(host)
    server = first.__enter__()
    write_advert(tmp_path, server.url, None, os.getpid())
    transport = HttpTransport(server.url, retry_s=30.0, rediscover=lambda: find_api(None, tmp_path, ports=()))
    client = Client(api=server.url)
    client.http = transport
    spec = {"workload": "tiny_cnn", "steps": 20}
    a = client.submit(spec, "before")
    first.__exit__(None, None, None)  # the coordinator dies

    second = served(host)
    def restart():
        time.sleep(1.0)
        write_advert(tmp_path, second.__enter__().url, None, os.getpid())

    thread = threading.Thread(target=restart)
    thread.start()
    try:
        b = client.submit(spec, "after")  # refused until the restart, then found at the new URL
        assert client.submit(spec, "after").id == b.id and client.submit(spec, "before").id == a.id
        assert transport.url != server.url
        ids = [j["id"] for j in client.status()["jobs"]]
        assert sorted(ids) == sorted({a.id, b.id}) and a.id != b.id
    finally:
        thread.join()
        second.__exit__(None, None, None)


def test_a_stopped_coordinator_is_reported_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    with served(local_host(tmp_path)) as server:
        url = server.url
    transport = HttpTransport(url, retry_s=30.0, rediscover=lambda: find_api(None, tmp_path, ports=()))  # no advert left
    began = time.monotonic()
    with pytest.raises(ConnectionError, match="stopped"):
        transport.call("status")
    assert time.monotonic() - began < 5
    with pytest.raises(ConnectionError, match="cannot reach") as gone:
        HttpTransport(url, retry_s=0.3).call("status")
    assert "\n" not in str(gone.value)
    heard: list[str] = []
    with pytest.raises(ConnectionError, match="cannot reach"):
        HttpTransport(url, retry_s=1.0, on_wait=heard.append).call("status")
    assert len(heard) == 1 and "does not answer" in heard[0] and "up to 1 s" in heard[0]  # said once, not per retry


def test_a_restarted_coordinator_takes_its_old_port_and_rewrites_the_advert(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from pcs_ray.coordinator.http_advert import serve_api

    host = local_host(tmp_path)
    config = SimpleNamespace(state_dir=str(tmp_path), api_host="127.0.0.1", api_port=0)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "no-token"))
    assert serve_api(host, config) is None and read_advert(tmp_path) is None  # nothing served without a token
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    first = serve_api(host, config)
    assert read_advert(tmp_path)["url"] == first.advertised
    first.server.stop()  # killed: its advert stays behind
    second = serve_api(host, config)
    try:
        assert second.advertised == first.advertised and read_advert(tmp_path)["pid"] == os.getpid()
        assert Client(api=second.advertised).status()["jobs"] == []
    finally:
        second.close()
    assert read_advert(tmp_path) is None



def test_replies_are_strict_json_with_a_missing_figure_as_null():
    """jq and browsers refuse NaN and Infinity: the API writes them as null, also inside dataclasses and numpy."""
    import dataclasses

    import numpy as np

    @dataclasses.dataclass
    class Reply:
        bound: float
        eta: object

    def refuse(constant):
        raise ValueError(constant)

    body = encode({"result": [float("nan"), Reply(float("inf"), np.float64("-inf")), np.float32(1.5), True, 3]})
    assert json.loads(body, parse_constant=refuse) == {"result": [None, {"bound": None, "eta": None}, 1.5, True, 3]}

# -- the CLI over HTTP -----------------------------------------------------------------------------
PROBE = """
import sys
from pcs_ray.cli import run
code = run(sys.argv[1:])
heavy = sorted(m for m in ("ray", "torch", "aiohttp") if m in sys.modules)
print("IMPORTED", ",".join(heavy) or "-", file=sys.stderr)
sys.exit(code)
"""


def _cli(server, *argv, token=TOKEN, tmp_home=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PCS_RAY_"))}
    env.update({API_ENV: server.url, "RAY_AUTH_TOKEN": token, "PYTHONPATH": str(ROOT), "HOME": str(tmp_home)})
    return subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_the_cli_talks_http_and_imports_neither_ray_nor_torch(api, tmp_path):
    host, server = api
    job = tmp_path / "job.yaml"
    job.write_text("workload: tiny_cnn\nsteps: 30\n")
    sub = _cli(server, "submit", str(job), "--json", tmp_home=tmp_path)
    assert sub.returncode == 0, sub.stderr
    jid = json.loads(sub.stdout)["id"]
    assert jid in host.core.jobs and "IMPORTED -" in sub.stderr
    for argv in (["status", "--json"], ["predict", str(jid), "--json"], ["status"], ["predict", str(jid)],
                 ["config", "show"], ["tenants", "show"], ["cancel", str(jid)]):
        out = _cli(server, *argv, tmp_home=tmp_path)
        assert out.returncode == 0, (argv, out.stderr)
        assert "IMPORTED -" in out.stderr, (argv, out.stderr)
    assert host.core.jobs[jid].state in ("cancelled", "stopping")
    status = json.loads(_cli(server, "status", "--json", tmp_home=tmp_path).stdout)
    assert any(j["id"] == jid for j in status["jobs"])
    missing = _cli(server, "predict", "99999", tmp_home=tmp_path)
    assert missing.returncode == 2 and missing.stderr.splitlines()[0] == "error: no job with id 99999"
    refused = _cli(server, "status", token="wrong", tmp_home=tmp_path)
    assert refused.returncode == 2
    line = refused.stderr.splitlines()[0]
    assert line.startswith("error: the pcs-ray coordinator's API at") and "set $RAY_AUTH_TOKEN" in line
