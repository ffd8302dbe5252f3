"""A real multi-node Ray cluster on one machine: one ``ray start`` per node, stopped by PID.

Each node is its own ``ray start --block`` in a session of its own (its own
ports, temp dir and per-GPU resources, token authentication on), so
everything Ray starts for that node — GCS, raylet, dashboard, agents, and the
workers and actors it spawns later — shares the session id of the process
pcs-ray started. The state file records each node's leader (PID and start
time, so a reused PID is never mistaken for ours) and the PIDs seen at start;
:func:`down` signals exactly the processes of those sessions, and nothing
else (never ``ray stop``). Linux only: it reads ``/proc``.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pcs_ray.executors.emulation import RAY_WORKER_ENV
from pcs_ray.api import strict_json
from pcs_ray.api.advert import remove_advert
from pcs_ray.api.ray_token import AUTH_MODE, TOKEN, TOKEN_PATH, default_token_path, token_source
from pcs_ray.cluster import ClusterSpecError, load_cluster_spec

STATE_FILE = "cluster.json"
BOOT_TIMEOUT_S = 300.0  # a loaded 2-core machine has taken 80 s to start one raylet


class LocalClusterError(ValueError):
    """A local cluster that cannot be started or stopped as asked (one line for the CLI)."""


@dataclass
class NodeRecord:
    name: str
    gpus: int
    leader: int  # the `ray start --block` process: its session holds every process of this node
    leader_start: int  # /proc start time of the leader, in clock ticks since boot
    pids: list[int] = field(default_factory=list)
    temp_dir: str = ""
    log: str = ""
    head: bool = False


@dataclass
class ClusterRecord:
    address: str
    dashboard: str
    state_dir: str
    spec: str
    token_source: str
    nodes: list[NodeRecord]
    api: str = ""  # the coordinator's HTTP API, as it advertised it when `up` started it

    def summary(self) -> dict:
        return {"address": self.address, "api": self.api, "dashboard": self.dashboard, "state_dir": self.state_dir,
                "nodes": [{"name": n.name, "gpus": n.gpus, "pids": n.pids} for n in self.nodes]}


# -- /proc ---------------------------------------------------------------------------------
def _stat(pid: int) -> tuple[int, int] | None:
    """(session id, start time) of a live process, ``None`` when it is gone (or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[3]), int(fields[19])


def session_pids(leader: int) -> list[int]:
    """Every live process in the session ``leader`` started (its own PID is the session id)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None and st[0] == leader:
                out.append(int(entry.name))
    return sorted(out)


def _ours(node: NodeRecord) -> list[int]:
    """The node's processes still alive: its session's, if the leader is the one we started."""
    st = _stat(node.leader)
    if st is not None and st[1] != node.leader_start:
        return []  # the PID was reused by someone else's process: the session id is not ours any more
    found = set(session_pids(node.leader))
    for pid in node.pids:  # recorded ones still in the session (read once: a process can end between two reads)
        st = _stat(pid)
        if st is not None and st[0] == node.leader:
            found.add(pid)
    return sorted(found)


# -- bring-up ---------------------------------------------------------------------------
def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def ensure_token(env: dict) -> str:
    """The token the cluster will demand, found as Ray documents; generated into ~/.ray/auth_token if none."""
    source = token_source(env)
    if source is not None:
        return source
    path = default_token_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))  # what `ray get-auth-token --generate` writes
    return str(path)


def write_spec(state_dir: Path, nodes: int, gpus_per_node: int) -> Path:
    if nodes < 1 or gpus_per_node < 0:
        raise LocalClusterError(f"--nodes must be >= 1 and --gpus-per-node >= 0 (got {nodes}, {gpus_per_node})")
    path = state_dir / "cluster-spec.yaml"
    lines = ["# written by `pcs-ray up --local`: logical GPUs, nominal speed", "nodes:"]
    lines += [f"  - {{name: node{i}, gpus: {gpus_per_node}}}" for i in range(nodes)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _ray_bin() -> str:
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


def _node_args(name: str, spec: Path | None) -> tuple[list[str], int]:
    from pcs_ray.cluster.discovery import local_node, ray_start_args
    from pcs_ray.commands.doctor import warn_failed_checks

    node = local_node(name, spec)
    warn_failed_checks(node)
    return ray_start_args(node), len(node.gpus)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None:
            raise LocalClusterError(f"ray start exited {proc.returncode}; see {log}")
        if time.monotonic() > deadline:
            raise LocalClusterError(f"ray start did not open port {port} in {BOOT_TIMEOUT_S:.0f} s; see {log}")
        time.sleep(0.5)


def start_nodes(state_dir: Path, spec: Path, names: list[str], cpus_per_node: int | None = None,
                env: dict | None = None) -> ClusterRecord:
    """``ray start`` the head (``names[0]``) and one worker per other name; returns what was started."""
    env = dict(os.environ if env is None else env)
    env.pop("RAY_ADDRESS", None)
    env[AUTH_MODE] = "token"  # never started without authentication
    source = ensure_token(env)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    for key, value in RAY_WORKER_ENV.items():  # its GPUs are logical: runners pace emulated devices
        env.setdefault(key, value)
    logs = private_dir(state_dir / "logs")
    record = ClusterRecord("", "", str(state_dir), str(spec), source, [])
    state_path = state_dir / STATE_FILE
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    try:
        for i, name in enumerate(names):
            node = _launch(record, i, name, spec, cpus_per_node, env, logs)
            save(record, state_path)  # on disk before anything else can fail, so `down` finds it
            if i == 0:
                _wait_port(int(record.address.rsplit(":", 1)[1]), node, Path(record.nodes[0].log), deadline)
        retries = {n.name: 2 for n in record.nodes[1:]}

        def relaunch(node: NodeRecord) -> bool:
            """A worker whose `ray start` exited early (a port taken meanwhile by another process): once more."""
            if not retries.get(node.name):
                return False
            retries[node.name] -= 1
            stop_node(node, grace_s=5.0)  # whatever that session still runs
            shutil.rmtree(node.temp_dir, ignore_errors=True)
            i = record.nodes.index(node)
            record.nodes.pop(i)
            _launch(record, i, node.name, spec, cpus_per_node, env, logs)
            save(record, state_path)
            return True

        _wait_nodes(record, env, deadline, relaunch)
    except BaseException:
        down(state_dir)
        raise
    for node in record.nodes:
        node.pids = session_pids(node.leader)
    save(record, state_path)
    return record


def _launch(record: ClusterRecord, i: int, name: str, spec: Path | None, cpus_per_node: int | None, env: dict,
            logs: Path) -> subprocess.Popen:
    """``ray start --block`` node ``name`` in a session of its own; recorded at position ``i`` of ``record``."""
    args, gpus = _node_args(name, spec)
    ports = _free_ports(8)
    temp_dir = tempfile.mkdtemp(prefix=f"pcsray-{name}-", dir="/tmp")  # short: socket paths have a limit
    cmd = [_ray_bin(), "start", "--block", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
           f"--num-cpus={cpus_per_node if cpus_per_node is not None else max(1, gpus)}",
           "--disable-usage-stats", f"--node-manager-port={ports[0]}", f"--object-manager-port={ports[1]}",
           f"--dashboard-agent-listen-port={ports[2]}", f"--dashboard-agent-grpc-port={ports[3]}",
           f"--runtime-env-agent-port={ports[4]}", f"--metrics-export-port={ports[5]}",
           "--object-store-memory=100000000", *args]
    if i == 0:
        gcs, dash = ports[6], ports[7]
        cmd += ["--head", f"--port={gcs}", f"--ray-client-server-port={_free_ports(1)[0]}",
                "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}"]
        record.address, record.dashboard = f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dash}"
    else:
        cmd += [f"--address={record.address}"]
    log = logs / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    st = _stat(proc.pid)
    record.nodes.insert(i, NodeRecord(name, gpus, proc.pid, st[1] if st else 0, [proc.pid], temp_dir, str(log),
                                      head=i == 0))
    return proc


def _wait_nodes(record: ClusterRecord, env: dict, deadline: float, relaunch=lambda node: False) -> None:
    """Until every node's raylet has registered its per-GPU resources with the GCS."""
    probe = ("import json,ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False);"
             "print('PCSRAY-NODES', json.dumps([n['Resources'] for n in ray.nodes() if n['Alive']]))") % record.address
    wanted = {n.name for n in record.nodes}
    while True:
        try:
            proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:  # the GCS is busy: ask again (until the deadline)
            proc = subprocess.CompletedProcess(probe, 1, "", "")
        lines = [line for line in proc.stdout.splitlines() if line.startswith("PCSRAY-NODES ")]
        if proc.returncode == 0 and lines:  # Ray may print its own lines to stdout too
            resources = json.loads(lines[-1].split(" ", 1)[1])
            seen = {n.name for n in record.nodes for r in resources
                    if n.gpus == 0 or f"{n.name}_gpu0" in r}
            if len(resources) >= len(wanted) and seen == wanted:
                return
        for node in list(record.nodes):
            if _stat(node.leader) is None and (node.head or not relaunch(node)):
                raise LocalClusterError(f"node {node.name}: ray start exited; see {node.log}")
        if time.monotonic() > deadline:
            raise LocalClusterError(f"the local cluster did not come up in {BOOT_TIMEOUT_S:.0f} s; see {record.nodes[0].log}")
        time.sleep(1.0)


def save(record: ClusterRecord, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(strict_json.dumps(asdict(record), indent=1))
    os.replace(tmp, path)


def load(state_dir: Path) -> ClusterRecord:
    path = state_dir / STATE_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise LocalClusterError(f"no local cluster recorded in {state_dir} (no {STATE_FILE}; `pcs-ray up --local` writes it)") from None
    except json.JSONDecodeError as e:
        raise LocalClusterError(f"{path}: not a pcs-ray cluster state file ({e.msg})") from None
    try:
        nodes = [NodeRecord(**n) for n in raw.pop("nodes")]
        return ClusterRecord(**raw, nodes=nodes)
    except (TypeError, KeyError) as e:
        raise LocalClusterError(f"{path}: not a pcs-ray cluster state file ({e})") from None


def stop_node(node: NodeRecord, grace_s: float = 10.0) -> list[int]:
    """SIGTERM the node's processes (``ray start --block`` stops its own children), then SIGKILL what is left."""
    pids = _ours(node)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _ours(node):
        time.sleep(0.2)
    for pid in _ours(node):
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _ours(node):
        time.sleep(0.1)
    return pids


def kill_node(node: NodeRecord) -> list[int]:
    """SIGKILL every process of the node at once: the node dies as a machine would."""
    pids = _ours(node)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    return pids


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def down(state_dir: Path) -> dict:
    """Stop every process the state file's nodes started (workers first), by PID; returns what was stopped."""
    record = load(state_dir)
    stopped: dict[str, list[int]] = {}
    for node in sorted(record.nodes, key=lambda n: n.head):
        stopped[node.name] = stop_node(node)
    left = {n.name: _ours(n) for n in record.nodes if _ours(n)}
    for node in record.nodes:
        if node.temp_dir.startswith(tempfile.gettempdir()) and Path(node.temp_dir).name.startswith("pcsray-"):
            shutil.rmtree(node.temp_dir, ignore_errors=True)
    if not left:
        (state_dir / STATE_FILE).unlink(missing_ok=True)
        remove_advert(state_dir)  # its coordinator went with the head node
    return {"state_dir": str(state_dir), "stopped": stopped, "left": left}


def node_names(spec: Path) -> list[str]:
    try:
        cluster = load_cluster_spec(spec)
    except ClusterSpecError:
        raise
    return [n.name for n in cluster.nodes]


def client_hint(record: ClusterRecord) -> str:
    return (f"pcs-ray commands find it (with another --state-dir: pass that --state-dir, or its address, "
            f"--address {shlex.quote(record.address)} or $RAY_ADDRESS); "
            f"the token is in {record.token_source} (elsewhere set {TOKEN} or {TOKEN_PATH}; pcs-ray sets "
            f"{AUTH_MODE}=token when it finds one)")
