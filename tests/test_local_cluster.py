"""A real two-raylet cluster from `pcs-ray up --local`: token auth, DDP across raylets, a node killed, `down`.

Everything goes through the CLI as a user would, with token authentication on
(the token in a private file named by RAY_AUTH_TOKEN_PATH, so ~/.ray is not
touched) and no RAY_AUTH_MODE set: pcs-ray finds the token itself. Ray's node
health checks are tightened for this instance only (a killed node is declared
dead in ~3 s instead of ~30 s). The cluster is stopped by PID in the fixture.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from builders import wait_until
from local_up import ROOT, cli, one_json, private_env, up_local

from pcs_ray.commands import local_cluster as lc
from pcs_ray.contract import TERMINAL

pytestmark = [pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the local launcher reads /proc"),
              pytest.mark.slow]  # starts local Ray clusters through the CLI


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local-cluster")
    env = private_env(tmp, RAY_health_check_period_ms="500", RAY_health_check_failure_threshold="3")
    state = tmp / "state"
    with up_local(env, state, "--nodes", 2, "--gpus-per-node", 1) as info:
        yield {"env": {**env, "RAY_ADDRESS": info["address"]}, "up": info, "state": state}


def _jobs(env) -> dict[int, dict]:
    return {j["id"]: j for j in one_json(cli(env, "status", "--json").stdout)["jobs"]}


def test_up_prints_the_cluster_and_records_its_processes_privately(cluster):
    up, state = cluster["up"], cluster["state"]
    assert set(up) == {"address", "api", "dashboard", "state_dir", "nodes"}
    assert up["api"].startswith("http://127.0.0.1:")  # loopback unless the operator binds another interface
    advert = json.loads((state / "api.json").read_text())
    assert advert["url"] == up["api"] and stat.S_IMODE((state / "api.json").stat().st_mode) == 0o600
    assert [(n["name"], n["gpus"]) for n in up["nodes"]] == [("node0", 1), ("node1", 1)]
    assert all(n["pids"] for n in up["nodes"]) and not set(up["nodes"][0]["pids"]) & set(up["nodes"][1]["pids"])
    assert stat.S_IMODE((state / lc.STATE_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    with pytest.raises(lc.LocalClusterError, match="already recorded"):
        from pcs_ray.commands.up import up_cmd

        up_cmd(local=True, state_dir=state)


def test_the_cli_talks_http_and_finds_a_killed_coordinator_again(cluster, tmp_path):
    """Over the API (no Ray driver): a submission after the coordinator's process is killed waits for Ray's
    restart of it and lands once; the one before it is still there, once."""
    from pcs_ray.api.transport import HttpTransport

    env, state = {**cluster["env"], "PCS_RAY_API": cluster["up"]["api"]}, cluster["state"]
    job = tmp_path / "external.yaml"
    job.write_text("workload: tiny_cnn\nsteps: 100\ngpus: 1\nexecutor: external\n")
    before = len(_jobs(env))
    first = one_json(cli(env, "submit", job, "--json").stdout)["id"]
    killed = json.loads((state / "api.json").read_text())["pid"]
    os.kill(killed, 9)
    second = one_json(cli(env, "submit", job, "--json").stdout)["id"]
    assert json.loads((state / "api.json").read_text())["pid"] != killed
    jobs = _jobs(env)
    assert len(jobs) == before + 2 and first != second and {first, second} <= set(jobs)
    api = HttpTransport(cluster["up"]["api"], token=Path(env["RAY_AUTH_TOKEN_PATH"]).read_text().strip())
    for jid in (first, second):  # free their GPUs as their executor would
        cli(env, "cancel", jid)
        view = api.call("assignment", jid)
        if view["state"] == "stopping":
            api.call("external_ended", jid, view["attempt"], "preempted", view["steps"])
    assert all(_jobs(env)[jid]["state"] == "cancelled" for jid in (first, second))
    refused = cli({**env, "RAY_AUTH_TOKEN": "wrong"}, "status", check=False)
    assert refused.returncode == 2 and refused.stderr.startswith("error: the pcs-ray coordinator's API at")


WITHOUT_RAY = """
import sys
from pcs_ray.cli import run
code = run(sys.argv[1:])
print("RAY IMPORTED" if "ray" in sys.modules else "NO RAY", file=sys.stderr)
sys.exit(code)
"""


def test_commands_given_only_the_address_or_the_state_dir_reach_the_api_without_ray(cluster):
    """A cluster started with its own --state-dir: its API took a well-known port on the head, where a command
    given only the address finds it; given only --state-dir, the advert there. Neither joins Ray."""
    from pcs_ray.api.advert import well_known_ports

    up, env = cluster["up"], {k: v for k, v in cluster["env"].items() if k != "PCS_RAY_API"}
    assert int(up["api"].rsplit(":", 1)[1]) in well_known_ports()
    no_address = {k: v for k, v in env.items() if k != "RAY_ADDRESS"}
    for where, argv in ((env, ["status", "--json"]), (env, ["config", "show"]),
                        (no_address, ["status", "--json", "--state-dir", str(cluster["state"])])):
        out = subprocess.run([sys.executable, "-c", WITHOUT_RAY, *argv], env=where, capture_output=True, text=True,
                             timeout=120, cwd=ROOT, check=False)
        assert out.returncode == 0, (argv, out.stderr[-2000:])
        assert "NO RAY" in out.stderr and "joined the Ray cluster" not in out.stderr, (argv, out.stderr[-2000:])


def _is_ray_worker(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::")
    except OSError:
        return False


def _niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_ddp_across_raylets_survives_the_loss_of_a_worker_node(cluster, tmp_path):
    env, state = cluster["env"], cluster["state"]
    job = tmp_path / "ddp.yaml"
    job.write_text("workload: tiny_cnn\nsteps: 1500\ngpus: 2\nmin_gpus: 1\ncheckpoint_every: 100\n")
    jid = one_json(cli(env, "submit", job, "--json").stdout)["id"]
    running = wait_until(lambda: (j := _jobs(env)[jid])["state"] == "running" and j["steps"] >= 250 and j,
                    120, "the DDP job to pass two checkpoints")
    assert sorted(running["gpus"]) == ["node0:0", "node1:0"]  # one rank on each raylet
    record = lc.load(state)
    # The runners pacing emulated devices run at the niceness of their node (Ray's default adds 15).
    workers = {pid: node.leader for node in record.nodes for pid in lc.session_pids(node.leader) if _is_ray_worker(pid)}
    assert workers and {pid: _niceness(pid) for pid in workers} == {pid: _niceness(lead) for pid, lead in workers.items()}
    assert lc.kill_node(record.nodes[1])  # the worker node dies as a machine would (SIGKILL, all at once)
    final = wait_until(lambda: (j := _jobs(env)[jid])["state"] in TERMINAL and j, 180,
                  "the job to finish on the node left")
    assert final["state"] == "finished" and final["steps"] == 1500, (final["error"], final["attempts"], final["segments"])
    assert final["segments"][0]["gpus"] == ["node0:0", "lost:1"] and final["segments"][-1]["gpus"] == ["node0:0"]


def test_down_stops_exactly_what_up_started(cluster):
    record = lc.load(cluster["state"])
    result = one_json(cli(cluster["env"], "down", "--state-dir", cluster["state"], "--json").stdout)
    assert result["left"] == {}
    assert all(lc._stat(pid) is None or lc._stat(pid)[0] not in {n.leader for n in record.nodes}
               for n in record.nodes for pid in n.pids)
    assert not (cluster["state"] / lc.STATE_FILE).exists() and not (cluster["state"] / "api.json").exists()


def test_a_recorded_process_that_ends_while_down_looks_is_not_an_error(monkeypatch):
    """``down`` asks /proc for each recorded PID; one that ends between two looks is gone, not a crash
    (a 1,100-job load run lost its figures to a TypeError there)."""
    node = lc.NodeRecord("node0", 8, leader=4242, leader_start=7, pids=[4242, 4343, 4444])
    reads = {4242: [(4242, 7)], 4343: [(4242, 9), None], 4444: [None]}  # 4343 ends after its first read

    def stat(pid):
        seq = reads.get(pid, [None])
        return seq.pop(0) if len(seq) > 1 else seq[0]

    monkeypatch.setattr(lc, "_stat", stat)
    monkeypatch.setattr(lc, "session_pids", lambda leader: [])
    assert lc._ours(node) == [4242, 4343]
