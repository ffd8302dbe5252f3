"""Finding the coordinator's API from what a user has: the cluster's address (the well-known ports on its host), a
state folder's advert, or ``$PCS_RAY_API``; the ports a coordinator takes; and joining Ray, said once, only where
no API answers. No Ray here: an in-process coordinator served on loopback says which Ray cluster it serves."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from api_helpers import TOKEN, local_host, served

from pcs_ray.api import discovery
from pcs_ray.api.advert import (
    API_ENV,
    read_advert,
    same_cluster,
    well_known_ports,
    write_advert,
)
from pcs_ray.api.discovery import Found, discover, probe, rediscover
from pcs_ray.client import Client
from pcs_ray.coordinator.http_advert import candidate_ports, serve_api

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "127.0.0.1:6399"  # the Ray cluster the test coordinator says it serves (no Ray runs there)


@pytest.fixture(autouse=True)
def _token(monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    monkeypatch.delenv(API_ENV, raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pcs-ray advert of a real cluster


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    host = local_host(tmp_path_factory.mktemp("discovery"))
    host.ray_address = CLUSTER
    return host


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_coordinator_tries_the_advert_s_port_then_the_well_known_ones_then_any():
    assert candidate_ports(8270, None) == [*range(8270, 8280), 0]
    assert candidate_ports(8270, {"url": "http://127.0.0.1:8273"}) == [8273, 8270, 8271, 8272, *range(8274, 8280), 0]
    assert candidate_ports(8270, {"url": "http://127.0.0.1:40000"}) == [*range(8270, 8280), 0]  # found by its advert only
    assert candidate_ports(9000, None) == [*range(9000, 9010), 0]
    assert candidate_ports(0, {"url": "http://127.0.0.1:40000"}) == [40000, 0]
    assert candidate_ports(0, None) == [0]
    assert list(well_known_ports(65530)) == [*range(65530, 65536)]


def test_a_taken_port_moves_the_api_to_the_next_where_a_client_given_only_the_address_finds_it(host, tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.setattr(discovery, "REPLY_S", 0.5)  # the holder never answers: each probe of it waits this long
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    first = holder.getsockname()[1]
    config = SimpleNamespace(state_dir=str(tmp_path), api_host="127.0.0.1", api_port=first)
    served_api = serve_api(host, config)
    try:
        port = served_api.server.port
        assert port != first and read_advert(tmp_path)["url"] == served_api.advertised
        assert port in well_known_ports(first)  # (fails only where another process holds all nine after it)
        ports = well_known_ports(first)
        assert probe(CLUSTER, ports) == served_api.advertised
        assert probe("localhost:6399", ports) == f"http://localhost:{port}"
        assert probe("127.0.0.1:6400", ports) is None  # another cluster's address: not this coordinator
        assert probe(None, ports) == served_api.advertised  # no address: the one on loopback
        assert probe(CLUSTER, ports, token="wrong") == served_api.advertised  # the user hears what to set
    finally:
        served_api.close()
        holder.close()
    assert read_advert(tmp_path) is None


def test_the_env_then_the_advert_for_the_cluster_then_the_well_known_ports(host, tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    with served(host, port=_unused_port()) as server:
        ports = [_unused_port(), server.port]  # nothing listens on the first
        assert discover(CLUSTER, state, ports) == Found(server.url, "port")
        write_advert(state, "http://127.0.0.1:1", "127.0.0.1:6400", 1)  # another cluster's advert: passed over
        assert discover(CLUSTER, state, ports) == Found(server.url, "port")
        write_advert(state, server.url, CLUSTER, 1)
        assert discover(CLUSTER, state, ports=()) == Found(server.url, "advert")
        assert discover(None, state, ports=()) == Found(server.url, "advert")
        monkeypatch.setenv("RAY_ADDRESS", CLUSTER)
        assert discover(None, state, ports=()) == Found(server.url, "advert")
        monkeypatch.setenv(API_ENV, "http://127.0.0.1:2")
        assert discover(CLUSTER, state, ports) == Found("http://127.0.0.1:2", "env")
        monkeypatch.setenv(API_ENV, "ray")  # no HTTP: through Ray
        assert discover(CLUSTER, state, ports) is None


def test_a_client_retries_an_api_found_on_a_port_but_not_one_whose_advert_was_withdrawn(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    by_port = rediscover(CLUSTER, empty, Found("http://127.0.0.1:1", "port"))
    by_advert = rediscover(CLUSTER, empty, Found("http://127.0.0.1:1", "advert"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(discovery, "well_known_ports", lambda: [_unused_port()])
        assert by_port() == "http://127.0.0.1:1"  # restarting: it takes its port again
        assert by_advert() is None  # `pcs-ray stop` withdrew it


def test_a_host_that_does_not_answer_is_not_asked_on_each_port(monkeypatch):
    asked = []

    def silent(host, port, token):
        asked.append(port)
        raise TimeoutError("timed out")

    monkeypatch.setattr(discovery, "_ping", silent)
    assert probe("192.0.2.77:6379", range(8270, 8280)) is None
    assert asked == [8270]


def test_the_api_on_loopback_is_found_from_this_machine_s_own_address(host):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: the route says which interface
            mine = s.getsockname()[0]
        except OSError:
            mine = socket.gethostbyname(socket.gethostname())
    if mine.startswith("127."):
        pytest.skip("this machine has no address but loopback")
    assert discovery._is_this_machine(mine) and not discovery._is_this_machine("192.0.2.254")
    original = host.ray_address
    host.ray_address = f"{mine}:6399"  # Ray names the head by its IP; the API listens on loopback
    try:
        with served(host, port=_unused_port()) as server:
            assert probe(f"{mine}:6399", [server.port]) == server.url
    finally:
        host.ray_address = original
    assert same_cluster("localhost:6399", f"{mine}:6399") and not same_cluster("192.0.2.254:6399", f"{mine}:6399")


def test_a_client_that_finds_no_api_says_once_that_it_joins_ray(tmp_path, monkeypatch):
    import pcs_ray.client as client_module

    joined = []
    monkeypatch.setattr(client_module, "connect", lambda address, namespace: joined.append(address))
    monkeypatch.setattr(client_module, "get_coordinator", lambda: "actor")
    monkeypatch.setattr(discovery, "well_known_ports", lambda: [_unused_port()])
    heard: list[str] = []
    client = Client("127.0.0.1:6400", state_dir=tmp_path, on_fallback=heard.append)
    assert client.actor == "actor" and client.http is None and joined == ["127.0.0.1:6400"]
    assert len(heard) == 1 and "joined the Ray cluster as a driver" in heard[0] and "\n" not in heard[0]
    monkeypatch.setenv(API_ENV, "ray")  # asked for: nothing to say
    heard.clear()
    assert Client("127.0.0.1:6400", state_dir=tmp_path, on_fallback=heard.append).actor == "actor" and heard == []


def _cli(home: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PCS_RAY_"))}
    base.update({"RAY_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT), "HOME": str(home), **env})
    return subprocess.run([sys.executable, "-m", "pcs_ray.cli", *argv], env=base, capture_output=True, text=True, check=False,
                          timeout=120, cwd=ROOT)


def test_commands_given_only_a_state_dir_or_an_address_reach_the_api(host, tmp_path):
    """The CLI as a user runs it: ``--state-dir`` reads that folder's advert; the address alone finds the API on
    the first free well-known port (no Ray runs at the fake address: a command that joined Ray would fail)."""
    state = tmp_path / "state"
    state.mkdir()
    port = next((p for p in well_known_ports() if _free(p)), None)
    if port is None:
        pytest.skip(f"every well-known port {well_known_ports()[0]}-{well_known_ports()[-1]} is taken on this machine")
    with served(host, port=port) as server:
        by_address = _cli(tmp_path, "status", "--json", RAY_ADDRESS=CLUSTER)
        assert by_address.returncode == 0 and by_address.stdout.startswith("{"), by_address.stderr
        by_flag = _cli(tmp_path, "status", "--address", CLUSTER)
        assert by_flag.returncode == 0, by_flag.stderr
        write_advert(state, server.url, None, 1)
        by_state = _cli(tmp_path, "config", "show", "--state-dir", str(state))
        assert by_state.returncode == 0 and by_state.stdout.startswith("policy "), by_state.stderr
        for out in (by_address, by_flag, by_state):
            assert "joined the Ray cluster" not in out.stderr
    nothing = _cli(tmp_path, "status", "--state-dir", str(tmp_path / "nothing"))
    assert nothing.returncode == 2 and nothing.stderr.startswith("error: nothing in ") and "\n" not in nothing.stderr.strip()


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
