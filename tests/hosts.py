"""Separate machines on one Linux box, for tests that need a real multi-host Ray cluster (DESIGN.md §8c).

``emulated_hosts(("head", "w1", "w2"))`` gives each named host what a machine of its own would have:

* its own **network**: a network namespace joined by a veth pair to a bridge in the root namespace (the
  "switch"), on a random private /24 that no interface here uses (bridge ``.1``, hosts ``.10``, ``.11``, …).
  Each host has its own loopback, so ``127.0.0.1`` on one host is not ``127.0.0.1`` on another. No default
  route: nothing outside the bridge's subnet is reachable (Ray warns that it cannot reach 8.8.8.8);
* its own **disk**: a private tmpfs on ``/tmp`` and ``/dev/shm`` (lost when the host dies, as on a reboot)
  and a private state folder at the same path on every host (``hosts.state_dir``,
  /var/tmp/pcs-ray-host-state unless told), backed by a per-host directory that outlives :meth:`Hosts.kill_host`
  (a machine's disk survives its crash). Nothing a host writes there is visible to another host or to the
  test process;
* its own **processes**: a PID namespace with its own /proc (``ps``, psutil and even ``ray stop`` on a host
  see that host's processes only), whose init reaps orphans; killing the host kills all of it at once;
* its own **name**: a UTS namespace with the host's name as hostname, and an /etc/hosts listing every host at
  its bridge address (the cluster's DNS).

Shared, as software installed on every machine is: the repository and its virtual environment, and the
operator's HOME (``hosts.home``; ``~/.ray/auth_token`` travels through it, as an NFS home directory would
carry it; ``shared_home=False`` gives each host its own HOME and the harness copies the token instead).
Files the harness hands to a host (a cluster spec, job files) go in ``hosts.inputs`` (``put_file``): that is
the operator copying a file to the machine, not state the hosts share.

A real S3 endpoint (``hosts.s3``): moto's server, in the test process, listening on the bridge address, so
every host reaches it over its network; each host's environment names it (``AWS_ENDPOINT_URL`` and
credentials), and ``hosts.storage_uri`` is a prefix in a fresh bucket. ``hosts.s3.stop()`` / ``start()`` take
the endpoint away and bring it back on the same port with the buckets' contents kept.

Each host is held by one long-lived process (its init, in its own mount, UTS, PID and network namespaces);
:meth:`Hosts.run` enters those namespaces with ``nsenter``, so every command on a host sees the same private
/tmp. Teardown always runs (exceptions, KeyboardInterrupt, SIGTERM, interpreter exit): every process in every
namespace made here is killed by PID, the namespaces, bridge and veths are deleted, moto stops and the run's
folder is removed. Nothing outside those namespaces is ever signalled; a run whose test process died
without tearing down is swept by the next run (:func:`sweep_stale`).

Needs root (network and mount namespaces): tests call :func:`require_hosts`, which skips with one line
saying so, or fails where ``PCS_RAY_HOST_TESTS=required`` (CI) is set.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import json
import os
import random
import re
import select
import shlex
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv"
VENV_BIN = VENV / "bin"
#: Every run's folder is ``RUN_PREFIX + suffix``: inputs, HOME, the per-host disks, logs and a record for sweeping.
RUN_PREFIX = "/var/tmp/pcs-ray-hosts-"
DEFAULT_STATE_DIR = "/var/tmp/pcs-ray-host-state"
NETNS_PREFIX = "pcsh-"
RAY_PORT = 6379

REQUIRED_ENV = "PCS_RAY_HOST_TESTS"
#: Every skip's reason starts with this.
SKIP_PREFIX = "host test skipped"
HOW_TO_RUN = (f"needs root for network and mount namespaces (CI runs them); run as root, "
              f"`{REQUIRED_ENV}=required` makes this fail instead")

S3_ACCESS_KEY = "testing"
S3_SECRET_KEY = "testing"
S3_REGION = "us-east-1"

_HOST_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
#: The init of each host: reaps whatever is orphaned there (Ray daemonizes), forever.
_INIT = ("import os, time\n"
         "while True:\n"
         "    try:\n"
         "        os.wait()\n"
         "    except ChildProcessError:\n"
         "        time.sleep(0.5)\n")

_live: set["Hosts"] = set()
_probe_result: str | None | bool = False  # False: not probed yet; None: fine; str: why not


class HostCommandError(subprocess.CalledProcessError):
    """A command on a host exited non-zero; the message carries the host and the tail of its output."""

    def __init__(self, host: str, returncode, cmd, output=None, stderr=None):
        super().__init__(returncode, cmd, output, stderr)
        self.host = host

    def __str__(self) -> str:
        shown = self.cmd if isinstance(self.cmd, str) else shlex.join(self.cmd)
        return (f"on {self.host}: `{shown[:400]}` exited {self.returncode}\n"
                f"--- stdout ---\n{(self.stdout or '')[-3000:]}\n--- stderr ---\n{(self.stderr or '')[-3000:]}")


# --------------------------------------------------------------------------------------------------------
# Root check for tests


def required() -> bool:
    """Whether host tests that cannot run fail rather than skip (``PCS_RAY_HOST_TESTS=required``)."""
    return os.environ.get(REQUIRED_ENV, "").strip().lower() == "required"


def missing() -> str | None:
    """Why emulated hosts cannot be made here (not root, no ``ip``/``unshare``/``nsenter``, ``ip netns add``
    refused), or None when they can. Probed once per process."""
    global _probe_result
    if _probe_result is not False:
        return _probe_result
    why = None
    if os.geteuid() != 0:
        why = f"{SKIP_PREFIX}: not root; {HOW_TO_RUN}"
    else:
        absent = [t for t in ("ip", "unshare", "nsenter") if shutil.which(t) is None]
        if absent:
            why = f"{SKIP_PREFIX}: no {', '.join(absent)} (iproute2, util-linux); {HOW_TO_RUN}"
        else:
            probe = f"{NETNS_PREFIX}probe-{_suffix()}"
            made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
            if made.returncode != 0:
                why = f"{SKIP_PREFIX}: `ip netns add` failed ({made.stderr.strip()[:120]}); {HOW_TO_RUN}"
            else:
                subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    _probe_result = why
    return why


def require_hosts() -> None:
    """Skip the calling test (fail it with ``PCS_RAY_HOST_TESTS=required``) where hosts cannot be emulated."""
    import pytest

    why = missing()
    if why is not None:
        if required():
            pytest.fail(why.replace(SKIP_PREFIX, "host tests are required but cannot run", 1), pytrace=False)
        pytest.skip(why)


def hosts_fixture(scope: str = "module", *, start_ray: bool = False, name: str | None = None, **kwargs):
    """A pytest fixture yielding a :class:`Hosts` (``require_hosts`` first): in a test module,
    ``hosts = hosts_fixture(start_ray=True)``; ``kwargs`` go to :func:`emulated_hosts`."""
    import pytest

    @pytest.fixture(scope=scope, name=name)
    def _hosts():
        require_hosts()
        with emulated_hosts(**kwargs) as hosts:
            if start_ray:
                hosts.start_ray()
            yield hosts

    return _hosts


# --------------------------------------------------------------------------------------------------------
# Small helpers


def _suffix(n: int = 5) -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=n))


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{shlex.join(args)}` exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _used_networks() -> list[ipaddress.IPv4Network]:
    nets = []
    for line in _sh("ip", "-o", "-4", "addr", "show").stdout.splitlines():
        m = re.search(r"inet (\S+)", line)
        if m:
            nets.append(ipaddress.ip_interface(m.group(1)).network)
    for line in _sh("ip", "-4", "route", "show", "table", "all", check=False).stdout.splitlines():
        first = line.split()[0] if line.split() else ""
        if first not in ("default", "local", "broadcast", "unreachable") and "/" in first:
            with contextlib.suppress(ValueError):
                nets.append(ipaddress.ip_network(first, strict=False))
    return nets


def _pick_subnet() -> ipaddress.IPv4Network:
    used = _used_networks()
    for _ in range(500):
        net = ipaddress.ip_network(f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 for the emulated hosts' bridge")


def _netns_pids(ns: str) -> list[int]:
    proc = _sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in proc.stdout.split() if p.strip().isdigit()]


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat): a PID plus this names one process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _kill_namespace(ns: str, also: list[int] = (), deadline_s: float = 10.0) -> list[int]:
    """SIGKILL every process in network namespace ``ns`` (and ``also``) until none is left, and wait until
    each one signalled has exited; returns the PIDs still alive after ``deadline_s`` (none, normally). Stops
    them all first so that none reacts to the others' deaths."""
    end = time.monotonic() + deadline_s
    signalled: dict[int, str] = {}  # pid → start time: a PID reused meanwhile is not ours
    extra = [p for p in also if p]
    while True:
        listed = set(_netns_pids(ns)) | set(extra)
        extra = []
        fresh = {p: _start_time(p) for p in listed if p != os.getpid() and p not in signalled}
        fresh = {p: t for p, t in fresh.items() if t is not None and not _is_zombie(p)}
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for p in fresh:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, sig)
        signalled.update(fresh)
        alive = [p for p, t in signalled.items() if _start_time(p) == t and not _is_zombie(p)]
        if (not alive and not fresh) or time.monotonic() > end:
            return alive
        if not fresh:
            time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


# --------------------------------------------------------------------------------------------------------
# S3


class S3Endpoint:
    """moto's S3 server in this process on ``host:port`` (the bridge address: every emulated host reaches it),
    with one bucket. ``stop()`` closes the listening socket (requests then fail: connection refused);
    ``start()`` listens again on the same port, with every bucket's contents as they were (moto keeps its
    backends in this process)."""

    def __init__(self, host: str, bucket: str, prefix: str = "pcs-ray", port: int | None = None):
        self.host = host
        self.port = port or self._free_port(host)
        self.bucket = bucket
        self.prefix = prefix
        self._server = None

    @staticmethod
    def _free_port(host: str) -> int:
        with socket.socket() as s:
            s.bind((host, 0))
            return s.getsockname()[1]

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def uri(self) -> str:
        """``s3://bucket/prefix``: where a test's storage goes."""
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def env(self) -> dict[str, str]:
        """What a host needs to reach the endpoint (boto3 and the AWS CLI read ``AWS_ENDPOINT_URL``;
        pyarrow's ``S3FileSystem`` needs ``endpoint_override=`` and ``scheme="http"``)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
            "AWS_REGION": S3_REGION,
            "AWS_DEFAULT_REGION": S3_REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self) -> None:
        if self._server is not None:
            return
        from moto.server import ThreadedMotoServer

        with socket.socket() as probe:  # a taken port would leave ThreadedMotoServer.start waiting forever
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((self.host, self.port))
        server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
        server.start()
        self._server = server

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.stop()
        if server._server is not None:  # werkzeug's serve_forever closes it too; make sure, whatever the version
            server._server.server_close()

    def client(self):
        """A boto3 S3 client on the endpoint (from this process)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id=S3_ACCESS_KEY,
                            aws_secret_access_key=S3_SECRET_KEY, region_name=S3_REGION)

    def create_bucket(self) -> None:
        self.client().create_bucket(Bucket=self.bucket)

    def delete_bucket(self) -> None:
        """Empty and delete the bucket (moto's memory is this process's)."""
        client = self.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=self.bucket, Key=obj["Key"])
        client.delete_bucket(Bucket=self.bucket)


# --------------------------------------------------------------------------------------------------------
# Hosts


class Hosts:
    """Emulated machines; see the module docstring. Made by :func:`emulated_hosts`.

    Attributes: ``names`` (host names, the first is the head), ``head``, ``ip`` (host → address on the
    bridge), ``bridge_ip``, ``subnet``, ``netns`` (host → network namespace name), ``bridge`` and ``veth``
    (interface names in the root namespace), ``suffix`` (this run's), ``root`` (this run's folder),
    ``inputs`` (files handed to hosts), ``home`` (the hosts' HOME), ``state_dir`` (each host's private
    state folder, same path everywhere), ``gpus_per_host``, ``spec_path`` (the cluster spec
    ``start_ray`` writes), ``s3`` (:class:`S3Endpoint` or None), ``storage_uri``, ``ray_address``
    (``"<head ip>:6379"``), ``ray_commands`` (host → the operator's shell commands that started Ray
    there, after ``start_ray``).
    """

    def __init__(self, names=("head", "w1", "w2"), gpus_per_host: int = 2, env: dict | None = None, *,
                 state_dir: str = DEFAULT_STATE_DIR, s3: bool = True, shared_home: bool = True,
                 cpus_per_host: int = 2, object_store_mb: int = 200):
        names = tuple(names)
        if not names or len(set(names)) != len(names) or not all(_HOST_NAME_RE.match(n) for n in names):
            raise ValueError(f"host names must be unique, lowercase, [a-z][a-z0-9-]*: {names!r}")
        if len(names) > 200:
            raise ValueError("at most 200 hosts")
        self.names = names
        self.head = names[0]
        self.gpus_per_host = gpus_per_host
        self.cpus_per_host = cpus_per_host
        self.object_store_mb = object_store_mb
        self.extra_env = dict(env or {})
        self.shared_home = shared_home
        self.state_dir = state_dir
        self.suffix = _suffix()
        self.root = Path(RUN_PREFIX + self.suffix)
        self.inputs = self.root / "shared-inputs"
        self.home = str(self.root / "home")
        self.disks = self.root / "disks"
        self.logs = self.root / "logs"
        self.bridge = f"pcsbr{self.suffix}"
        self.netns = {h: f"{NETNS_PREFIX}{self.suffix}-{h}" for h in names}
        self.veth = {h: f"pcsv{self.suffix}{i}" for i, h in enumerate(names)}
        self.subnet: ipaddress.IPv4Network | None = None
        self.bridge_ip = ""
        self.ip: dict[str, str] = {}
        self.s3: S3Endpoint | None = None
        self._want_s3 = s3
        self.spec_path: Path | None = None
        self.ray_commands: dict[str, list[str]] = {}
        self._init_pid: dict[str, int] = {}  # host → root-namespace PID of its init (the namespaces' holder)
        self._holder: dict[str, subprocess.Popen] = {}  # host → the `ip netns exec … unshare` process
        self._popens: list[subprocess.Popen] = []
        self._closed = False
        self._lock = threading.Lock()

    # -- setup ---------------------------------------------------------------------------------------

    def _setup(self) -> None:
        _live.add(self)
        for d in (self.inputs, Path(self.home), self.logs, self.root / "etc"):
            d.mkdir(parents=True, exist_ok=True)
        for h in self.names:
            (self.disks / h / "state").mkdir(parents=True, exist_ok=True)
            (self.disks / h / "home").mkdir(parents=True, exist_ok=True)
        Path(self.state_dir).mkdir(parents=True, exist_ok=True)  # the mount point; left in place (it is empty)
        self.subnet = _pick_subnet()
        base = self.subnet.network_address
        self.bridge_ip = str(base + 1)
        self.ip = {h: str(base + 10 + i) for i, h in enumerate(self.names)}
        self._write_record()
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{self.bridge_ip}/{self.subnet.prefixlen}", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        etc_hosts = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        etc_hosts += [f"{self.ip[h]} {h}" for h in self.names]
        (self.root / "etc" / "hosts").write_text("\n".join(etc_hosts) + "\n")
        for h in self.names:
            ns, veth = self.netns[h], self.veth[h]
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "link", "set", veth, "master", self.bridge, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.ip[h]}/{self.subnet.prefixlen}", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        for h in self.names:
            self.boot_host(h)
        if self._want_s3:
            self.s3 = S3Endpoint(self.bridge_ip, bucket=f"pcs-ray-{self.suffix}")
            self.s3.start()
            self.s3.create_bucket()

    def _write_record(self) -> None:
        """What :func:`sweep_stale` needs to tear this run down should its process die without doing so."""
        record = {"owner_pid": os.getpid(), "owner_start": _start_time(os.getpid()), "netns": list(self.netns.values()),
                  "bridge": self.bridge, "veth": list(self.veth.values())}
        (self.root / "record.json").write_text(json.dumps(record))

    def boot_host(self, host: str) -> None:
        """Start ``host``'s init: fresh /tmp and /dev/shm, its state folder (and private HOME) mounted, its
        hostname set. Done for every host at setup; after :meth:`kill_host` this is the machine rebooting
        (the state folder's contents are still there, /tmp's are not)."""
        if self.alive(host):
            raise RuntimeError(f"{host} is running")
        disk = self.disks / host
        # The software every machine has installed (this checkout, its venv, the interpreter) may lie under a
        # folder a host gets afresh (a CI clone in /tmp): it is set aside before, and put back after.
        software = sorted({p for p in (REPO, Path(sys.prefix), Path(sys.executable).resolve().parent.parent)
                           if any(p == Path(d) or Path(d) in p.parents for d in ("/tmp", "/dev/shm"))})
        keep, restore = [], []
        for i, path in enumerate(software):
            aside = self.root / "software" / host / str(i)
            aside.mkdir(parents=True, exist_ok=True)
            keep.append(f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(aside))}")
            restore.append(f"mkdir -p {shlex.quote(str(path))} && mount --bind {shlex.quote(str(aside))} "
                           f"{shlex.quote(str(path))}")
        mounts = [
            *keep,
            "mount -t tmpfs -o mode=1777 tmpfs /tmp",
            "mount -t tmpfs -o mode=1777 tmpfs /dev/shm",
            *restore,
            f"mount --bind {shlex.quote(str(disk / 'state'))} {shlex.quote(self.state_dir)}",
        ]
        if not self.shared_home:
            mounts.append(f"mount --bind {shlex.quote(str(disk / 'home'))} {shlex.quote(self.home)}")
        mounts += [
            f"mount --bind {shlex.quote(str(self.root / 'etc' / 'hosts'))} /etc/hosts",
            f"mount -t tmpfs tmpfs {shlex.quote(str(self.disks))}",  # no host sees another's disk
            f"hostname {shlex.quote(host)}",
        ]
        script = " && ".join(mounts) + f" && echo ready && exec {shlex.quote(sys.executable)} -c {shlex.quote(_INIT)}"
        argv = ["ip", "netns", "exec", self.netns[host], "unshare", "--mount", "--uts", "--pid", "--fork",
                "--mount-proc", "--propagation", "private", "sh", "-c", script]
        log = open(self.logs / f"{host}-init.log", "ab")
        holder = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                  env=self._base_env(host), start_new_session=True)
        log.close()
        self._holder[host] = holder
        ready, _, _ = select.select([holder.stdout], [], [], 30)
        line = holder.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            holder.kill()
            holder.wait()
            err = (self.logs / f"{host}-init.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"could not boot host {host}: {err}")
        for _ in range(100):
            kids = _children(holder.pid)
            if kids:
                self._init_pid[host] = kids[0]
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"host {host}: no init process under {holder.pid}")

    # -- commands ------------------------------------------------------------------------------------

    def _base_env(self, host: str) -> dict[str, str]:
        env = {
            "PATH": f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": self.home,
            "USER": "root",
            "LOGNAME": "root",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "VIRTUAL_ENV": str(VENV),
            "PYTHONUNBUFFERED": "1",
            "HOSTNAME": host,
            "RAY_AUTH_MODE": "token",
        }
        if self.s3 is not None:
            env.update(self.s3.env())
        env.update(self.extra_env)
        return env

    def env(self, host: str, extra: dict | None = None) -> dict[str, str]:
        """The environment a command on ``host`` gets: a login's PATH with the venv's bin first, HOME,
        ``RAY_AUTH_MODE=token``, the S3 variables, the harness's ``env`` and then ``extra``. Nothing of the
        test process's own environment leaks in."""
        env = self._base_env(host)
        env.update(extra or {})
        return env

    def argv(self, host: str, cmd: list[str] | str, cwd: str | os.PathLike | None = None) -> list[str]:
        """The root-namespace command line that runs ``cmd`` (a list, or a string for ``sh -c``) on ``host``."""
        if host not in self.netns:
            raise KeyError(f"no host {host!r} (hosts: {', '.join(self.names)})")
        if not self.alive(host):
            raise RuntimeError(f"host {host} is down (kill_host); boot_host({host!r}) brings it back")
        inner = ["sh", "-c", cmd] if isinstance(cmd, str) else [str(c) for c in cmd]
        return ["nsenter", f"--target={self._init_pid[host]}", "--mount", "--uts", "--net", "--pid",
                f"--wd={cwd or REPO}", "--", *inner]

    def run(self, host: str, cmd: list[str] | str, env: dict | None = None, timeout: float = 120,
            check: bool = True, input: str | None = None, cwd: str | os.PathLike | None = None
            ) -> subprocess.CompletedProcess:
        """Run ``cmd`` on ``host`` (in its namespaces, with :meth:`env`), wait for it, capture its output.

        A string runs under ``sh -c``. On timeout the command's process group is killed and
        ``subprocess.TimeoutExpired`` raised; with ``check`` a non-zero exit raises :class:`HostCommandError`
        (its message shows the output). Daemons it starts (``setsid``, as ``ray start``'s) keep running; one
        started in the background must not keep stdout/stderr (redirect them), or this waits for it."""
        proc = subprocess.Popen(self.argv(host, cmd, cwd), env=self.env(host, env), text=True,
                                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                out, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # a daemon kept the pipes: give up on the rest of the output
                out = err = ""
            exc = sys.exc_info()[1]
            if isinstance(exc, subprocess.TimeoutExpired):
                raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
            raise
        result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
        if check and proc.returncode != 0:
            raise HostCommandError(host, proc.returncode, cmd, out, err)
        return result

    def popen(self, host: str, cmd: list[str] | str, env: dict | None = None, cwd=None, **kwargs) -> subprocess.Popen:
        """Start ``cmd`` on ``host`` in the background (kwargs go to ``subprocess.Popen``); teardown kills it."""
        kwargs.setdefault("start_new_session", True)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(self.argv(host, cmd, cwd), env=self.env(host, env), **kwargs)
        self._popens.append(proc)
        return proc

    def python(self, host: str, code: str, **kwargs) -> subprocess.CompletedProcess:
        """Run Python ``code`` with the venv's interpreter on ``host`` (kwargs as :meth:`run`)."""
        return self.run(host, [str(VENV_BIN / "python"), "-c", code], **kwargs)

    def put_file(self, name: str, text: str) -> Path:
        """Hand a file to the hosts (the operator copying it to each machine): written under ``inputs``,
        which every host reads at the same path. Returns that path."""
        path = self.inputs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    # -- Ray -----------------------------------------------------------------------------------------

    @property
    def ray_address(self) -> str:
        return f"{self.ip[self.head]}:{RAY_PORT}"

    @property
    def storage_uri(self) -> str | None:
        return self.s3.uri if self.s3 is not None else None

    def cluster_spec_yaml(self) -> str:
        """A cluster spec with every host as a node of ``gpus_per_host`` logical GPUs."""
        lines = ["# emulated hosts (tests/hosts.py): logical GPUs, nominal speed", "nodes:"]
        lines += [f"  - {{name: {h}, gpus: {self.gpus_per_host}}}" for h in self.names]
        return "\n".join(lines) + "\n"

    def ray_start_commands(self) -> dict[str, list[str]]:
        """The operator's commands on each machine, head first.

        On the head, ``ray get-auth-token --generate`` first: with ``RAY_AUTH_MODE=token`` and no token,
        Ray 2.60's ``ray start --head`` refuses to start (it creates none itself; with the mode unset and no
        token it starts a cluster without authentication). ``pcs-ray node-resources`` prints shell-quoted
        arguments, hence ``eval`` on every machine."""
        if self.spec_path is None:
            self.spec_path = self.put_file("cluster.yaml", self.cluster_spec_yaml())
        spec = shlex.quote(str(self.spec_path))
        small = f"--num-cpus={self.cpus_per_host} --object-store-memory={self.object_store_mb * 1024 * 1024}"
        cmds = {self.head: [
            "RAY_AUTH_MODE=token ray get-auth-token --generate > /dev/null",
            (f"RAY_AUTH_MODE=token eval ray start --head --node-ip-address={self.ip[self.head]} --port={RAY_PORT} "
             f"--disable-usage-stats {small} "
             f"$(pcs-ray node-resources --head --node-name {self.head} --cluster-spec {spec})"),
        ]}
        for h in self.names[1:]:
            cmds[h] = [] if self.shared_home else ["# copy the head's ~/.ray/auth_token to ~/.ray/auth_token here"]
            cmds[h].append(
                f"RAY_AUTH_MODE=token eval ray start --address={self.ray_address} --node-ip-address={self.ip[h]} "
                f"{small} $(pcs-ray node-resources --node-name {h} --cluster-spec {spec})")
        return cmds

    def start_ray(self, timeout: float = 180) -> None:
        """Start Ray as an operator would (:meth:`ray_start_commands`: the head first, then the workers
        together) and wait until ``ray status`` on the head lists every host."""
        cmds = self.ray_start_commands()
        for cmd in cmds[self.head]:
            self.run(self.head, cmd, timeout=timeout)
        if not self.shared_home:  # the operator copies the cluster's token to each machine
            token = self.run(self.head, "cat ~/.ray/auth_token").stdout
            for h in self.names[1:]:
                self.run(h, "mkdir -p ~/.ray && umask 077 && cat > ~/.ray/auth_token", input=token)
        workers = {h: self.popen(h, cmds[h][-1], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for h in self.names[1:]}
        for h, proc in workers.items():
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                raise
            if proc.returncode != 0:
                raise HostCommandError(h, proc.returncode, cmds[h][-1], out, err)
        self.ray_commands = cmds
        self.wait_for_nodes(len(self.names), timeout=timeout)

    def ray_status(self, timeout: float = 60) -> str:
        """``ray status`` run on the head."""
        return self.run(self.head, ["ray", "status"], timeout=timeout).stdout

    def wait_for_nodes(self, n: int, timeout: float = 120) -> str:
        """Poll ``ray status`` on the head until it lists ``n`` active nodes; returns its output."""
        end = time.monotonic() + timeout
        out = ""
        while time.monotonic() < end:
            proc = self.run(self.head, ["ray", "status"], check=False, timeout=60)
            out = proc.stdout + proc.stderr
            if proc.returncode == 0 and active_nodes(out) >= n:
                return out
            time.sleep(1)
        raise TimeoutError(f"ray status on {self.head} did not list {n} nodes in {timeout:.0f} s:\n{out[-3000:]}")

    # -- machines dying ------------------------------------------------------------------------------

    def alive(self, host: str) -> bool:
        holder = self._holder.get(host)
        return holder is not None and holder.poll() is None and host in self._init_pid

    def kill_host(self, host: str) -> None:
        """The machine dies: SIGKILL every process of ``host`` at once (its init, which takes its whole PID
        namespace with it, and whatever else ``ip netns pids`` finds in its network namespace). Its /tmp is
        gone; its state folder stays for :meth:`boot_host`; its network interface stays."""
        init = self._init_pid.pop(host, None)
        holder = self._holder.pop(host, None)
        also = [init] if init and holder is not None and holder.poll() is None else []
        left = _kill_namespace(self.netns[host], also)
        if holder is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                holder.wait(timeout=10)
        if left:
            warnings.warn(f"emulated host {host}: processes {left} survived SIGKILL", stacklevel=2)

    # -- teardown ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Tear everything down (idempotent); problems are warnings, never exceptions."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        problems = []
        if self.s3 is not None:  # before the bridge (its address) goes
            try:
                if self.s3.running:
                    self.s3.delete_bucket()
            except Exception as e:  # noqa: BLE001
                problems.append(f"moto: {e}")
            with contextlib.suppress(Exception):
                self.s3.stop()
        for h in self.names:
            try:
                init = self._init_pid.pop(h, None)
                holder = self._holder.get(h)
                also = [init] if init and holder is not None and holder.poll() is None else []
                left = _kill_namespace(self.netns[h], also)
                if left:
                    problems.append(f"{h}: PIDs {left} survived SIGKILL")
            except Exception as e:  # noqa: BLE001 - go on tearing down
                problems.append(f"{h}: {e}")
        for proc in [*self._holder.values(), *self._popens]:
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()
        existing = set(_sh("ip", "netns", "list", check=False).stdout.split())
        for ns in self.netns.values():
            if ns in existing:
                proc = _sh("ip", "netns", "del", ns, check=False)
                if proc.returncode:
                    problems.append(f"ip netns del {ns}: {proc.stderr.strip()}")
        for link in [*self.veth.values(), self.bridge]:
            if Path(f"/sys/class/net/{link}").exists():
                proc = _sh("ip", "link", "del", link, check=False)
                if proc.returncode and Path(f"/sys/class/net/{link}").exists():  # a veth goes with its netns
                    problems.append(f"ip link del {link}: {proc.stderr.strip()}")
        if self.root.is_dir() and self.root.name.startswith(Path(RUN_PREFIX).name):
            shutil.rmtree(self.root, ignore_errors=True)
        _live.discard(self)
        if problems:
            warnings.warn("emulated hosts teardown: " + "; ".join(problems), stacklevel=2)


def active_nodes(ray_status_output: str) -> int:
    """How many nodes the ``Active:`` section of ``ray status`` lists."""
    count, inside = 0, False
    for line in ray_status_output.splitlines():
        stripped = line.strip()
        if stripped.startswith("Active:"):
            inside = True
            continue
        if inside:
            if re.match(r"^\d+\s+node_[0-9a-f]+", stripped):
                count += int(stripped.split()[0])
            elif stripped and not stripped.startswith("(no"):
                break
    return count


def sweep_stale() -> list[str]:
    """Tear down the runs whose test process died without doing so (its PID gone or reused): kill the
    processes in their namespaces, delete the namespaces, bridge and veths, remove their folders.
    Returns the folders swept."""
    swept = []
    for folder in Path(RUN_PREFIX).parent.glob(Path(RUN_PREFIX).name + "*"):
        record_path = folder / "record.json"
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            continue
        if _start_time(record["owner_pid"]) == record.get("owner_start") and record.get("owner_start"):
            continue  # its owner is alive
        existing = set(_sh("ip", "netns", "list", check=False).stdout.split())
        for ns in record.get("netns", []):
            if ns.startswith(NETNS_PREFIX) and ns in existing:
                _kill_namespace(ns)
                _sh("ip", "netns", "del", ns, check=False)
        for link in [*record.get("veth", []), record.get("bridge", "")]:
            if link.startswith("pcs") and Path(f"/sys/class/net/{link}").exists():
                _sh("ip", "link", "del", link, check=False)
        shutil.rmtree(folder, ignore_errors=True)
        swept.append(str(folder))
    return swept


def _close_all() -> None:
    for hosts in list(_live):
        hosts.close()


atexit.register(_close_all)


@contextlib.contextmanager
def emulated_hosts(names=("head", "w1", "w2"), gpus_per_host: int = 2, env: dict | None = None, **kwargs):
    """Yield :class:`Hosts` for ``names`` (the first is the head), torn down on the way out whatever happens.

    ``env``: extra variables for every command on every host. ``kwargs``: ``state_dir``, ``s3`` (default
    True), ``shared_home`` (default True), ``cpus_per_host`` and ``object_store_mb`` (for ``ray start``).
    While inside, SIGTERM raises SystemExit in the main thread (where nobody else handles it), so a killed
    test run still tears down."""
    sweep_stale()
    hosts = Hosts(names, gpus_per_host, env, **kwargs)
    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        def _on_term(signum, frame):
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        hosts._setup()
        yield hosts
    finally:
        hosts.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
