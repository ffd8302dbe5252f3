"""The emulated-hosts harness (tests/hosts.py): separate machines on one box, really separate.

No shared disk, no shared loopback, a Ray cluster started as an operator starts one with each node on its
own host, a real S3 endpoint that can go away and come back, and nothing left behind. Needs root (skips
otherwise; ``PCS_RAY_HOST_TESTS=required`` makes that a failure).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import uuid
from pathlib import Path

import pytest

import hosts as hosts_mod
from hosts import emulated_hosts, hosts_fixture, require_hosts

pytestmark = pytest.mark.slow

HOSTS = ("head", "w1", "w2")


hosts = hosts_fixture("module", names=HOSTS, gpus_per_host=2)


@pytest.fixture(scope="module")
def ray_hosts(hosts):
    """The same hosts with Ray started on them (once for the module)."""
    hosts.start_ray()
    return hosts


def _exists(hosts, host: str, path: str) -> bool:
    return hosts.run(host, ["test", "-e", path], check=False).returncode == 0


def test_no_shared_disk(hosts):
    name = f"marker-{uuid.uuid4().hex[:8]}"
    in_tmp, in_state, in_shm = f"/tmp/{name}", f"{hosts.state_dir}/{name}", f"/dev/shm/{name}"
    hosts.run("w1", f"echo w1 > {in_tmp} && echo w1 > {in_state} && echo w1 > {in_shm}")
    # a later command on w1 sees what the first wrote (one mount namespace per host, not per command)
    assert hosts.run("w1", ["cat", in_tmp, in_state, in_shm]).stdout.split() == ["w1", "w1", "w1"]
    for other in ("w2", "head"):
        for path in (in_tmp, in_state, in_shm):
            assert not _exists(hosts, other, path), f"{path} written on w1 is visible on {other}"
    for path in (in_tmp, in_state, in_shm):
        assert not Path(path).exists(), f"{path} written on w1 is visible in the root namespace"
    # each host is its own machine by name and by process table too
    assert hosts.run("w2", "hostname").stdout.strip() == "w2"
    assert hosts.run("w1", ["getent", "hosts", "w2"]).stdout.split()[0] == hosts.ip["w2"]
    marker = hosts.popen("w1", "exec sleep 6123")
    try:
        assert "sleep 6123" in hosts.run("w1", ["ps", "-eo", "args"]).stdout
        assert "sleep 6123" not in hosts.run("w2", ["ps", "-eo", "args"]).stdout
    finally:
        marker.kill()
        marker.wait()


SERVER = r"""
import select, socket, sys
port, addrs = int(sys.argv[1]), sys.argv[2:]
socks = []
for addr in addrs:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen()
    socks.append(s)
print("ready", flush=True)
while True:
    for s in select.select(socks, [], [])[0]:
        conn, _ = s.accept()
        conn.sendall(b"hello from w1\n")
        conn.close()
"""

CLIENT = r"""
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:
        print(s.recv(100).decode().strip())
except OSError as e:
    print(type(e).__name__)
"""


def test_no_shared_loopback(hosts):
    port = random.randint(20000, 30000)
    server = hosts.popen("w1", [str(hosts_mod.VENV_BIN / "python"), "-c", SERVER, str(port), "127.0.0.1",
                                hosts.ip["w1"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready", server.stderr.read()

        def connect(host, addr):
            return hosts.python(host, CLIENT.replace("sys.argv[1]", repr(addr)).replace("sys.argv[2]", str(port))
                                ).stdout.strip()

        assert connect("w1", "127.0.0.1") == "hello from w1"  # the server is there, on w1's loopback
        assert connect("w2", "127.0.0.1") == "ConnectionRefusedError"  # w2's loopback is w2's own
        assert connect("head", "127.0.0.1") == "ConnectionRefusedError"
        assert connect("w2", hosts.ip["w1"]) == "hello from w1"  # across the bridge it is reachable
    finally:
        server.kill()
        server.wait()


WHERE = r"""
import json, socket, sys
import ray
ray.init(address="auto", log_to_driver=False)

@ray.remote(num_cpus=0)
def where():
    return {"ip": ray.util.get_node_ip_address(), "hostname": socket.gethostname()}

hosts = sys.argv[1:]
refs = {h: where.options(resources={f"{h}_gpu0": 0.01}).remote() for h in hosts}
print(json.dumps({"driver_ip": ray.util.get_node_ip_address(),
                  "where": {h: ray.get(r, timeout=120) for h, r in refs.items()}}))
"""


def test_ray_across_hosts(ray_hosts):
    hosts = ray_hosts
    assert hosts_mod.active_nodes(hosts.ray_status()) == 3
    assert hosts.ray_address == f"{hosts.ip['head']}:6379"
    out = hosts.run("head", [str(hosts_mod.VENV_BIN / "python"), "-c", WHERE, *HOSTS], timeout=180).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["driver_ip"] == hosts.ip["head"]
    for h in HOSTS:
        assert result["where"][h] == {"ip": hosts.ip[h], "hostname": h}
    # the commands an operator runs are the ones that ran
    assert set(hosts.ray_commands) == set(HOSTS)
    assert "ray start --head" in hosts.ray_commands["head"][-1]
    assert all(f"--address={hosts.ray_address}" in hosts.ray_commands[w][-1] for w in ("w1", "w2"))


S3_CLIENT = r"""
import os, sys
from pyarrow import fs
endpoint = os.environ["AWS_ENDPOINT_URL"].split("://", 1)[1]
s3 = fs.S3FileSystem(endpoint_override=endpoint, scheme="http", region=os.environ["AWS_REGION"],
                     retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1), connect_timeout=2, request_timeout=5)
op, key = sys.argv[1], sys.argv[2]
try:
    if op == "put":
        with s3.open_output_stream(key) as f:
            f.write(sys.argv[3].encode())
        print("ok")
    else:
        with s3.open_input_stream(key) as f:
            print(f.read().decode())
except OSError as e:
    print("error:", str(e).splitlines()[0])
"""


def test_s3_endpoint_survives_restart(hosts):
    s3 = hosts.s3
    assert hosts.storage_uri == f"s3://{s3.bucket}/{s3.prefix}" and s3.host == hosts.bridge_ip
    key = f"{s3.bucket}/{s3.prefix}/obj-{uuid.uuid4().hex[:6]}.txt"

    def on(host, *args):
        return hosts.run(host, [str(hosts_mod.VENV_BIN / "python"), "-c", S3_CLIENT, *args], timeout=60).stdout.strip()

    assert on("w1", "put", key, "written on w1") == "ok"
    assert on("w2", "get", key) == "written on w1"
    port = s3.port
    s3.stop()
    try:
        assert on("w2", "get", key).startswith("error:")
    finally:
        s3.start()
    assert s3.port == port
    assert on("head", "get", key) == "written on w1"
    body = s3.client().get_object(Bucket=s3.bucket, Key=key.split("/", 1)[1])["Body"].read()
    assert body == b"written on w1"


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_teardown_leaves_nothing():
    require_hosts()
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="test body failed"):
        with emulated_hosts(("a", "b"), gpus_per_host=1) as h:
            suffix, root, port = h.suffix, h.root, h.s3.port
            assert suffix in _links() and root.is_dir()
            h.popen("a", "sleep 600")
            h.run("a", "setsid sleep 600 > /dev/null 2>&1 < /dev/null &")  # a daemon, as ray start makes
            h.run("b", f"echo kept > {h.state_dir}/disk && echo gone > /tmp/scratch && (sleep 600 > /dev/null 2>&1 &)")
            for ns in h.netns.values():
                pids += hosts_mod._netns_pids(ns)
            assert len(pids) >= 5
            # a machine dying: every process of b at once; its disk outlives it, its /tmp does not
            b_pids = hosts_mod._netns_pids(h.netns["b"])
            h.kill_host("b")
            assert hosts_mod._netns_pids(h.netns["b"]) == []
            assert not any(hosts_mod._start_time(p) and not hosts_mod._is_zombie(p) for p in b_pids)
            with pytest.raises(RuntimeError, match="down"):
                h.run("b", "true")
            h.boot_host("b")
            seen = h.run("b", f"cat {h.state_dir}/disk; ls /tmp").stdout.split()
            assert seen[0] == "kept" and "scratch" not in seen  # (a checkout under /tmp is mounted back there)
            raise RuntimeError("test body failed")
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert suffix not in namespaces
    assert suffix not in _links()
    alive = [p for p in pids if hosts_mod._start_time(p) is not None and not hosts_mod._is_zombie(p)]
    assert alive == []
    assert not root.exists()
    with pytest.raises(OSError):  # moto is gone from the port
        import socket

        socket.create_connection((h.bridge_ip, port), timeout=2).close()


def test_require_hosts_skips_or_fails(monkeypatch):
    monkeypatch.setattr(hosts_mod, "_probe_result", False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv(hosts_mod.REQUIRED_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs root for network and mount namespaces"):
        require_hosts()
    monkeypatch.setenv(hosts_mod.REQUIRED_ENV, "required")
    with pytest.raises(pytest.fail.Exception, match="host tests are required but cannot run"):
        require_hosts()
