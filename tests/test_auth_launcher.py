"""Token discovery and refusal messages (no Ray), and the local launcher's bookkeeping by PID (no Ray)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import time

import pytest

from pcs_ray.api import ray_token as auth
from pcs_ray.commands import local_cluster as lc


def test_token_is_found_where_ray_documents_it_in_ray_order(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert auth.token_source({}) is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t")
    assert auth.token_source({}) == str(tmp_path / ".ray" / "auth_token")
    other = tmp_path / "tok"
    other.write_text("u")
    assert auth.token_source({"RAY_AUTH_TOKEN_PATH": str(other)}).startswith(str(other))
    assert auth.token_source({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")}) is None
    assert auth.token_source({"RAY_AUTH_TOKEN": "x", "RAY_AUTH_TOKEN_PATH": str(other)}) == "$RAY_AUTH_TOKEN"


def test_token_mode_is_turned_on_when_a_token_exists_and_never_off(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {"RAY_AUTH_TOKEN": "x"}
    assert auth.prefer_token(env) == "$RAY_AUTH_TOKEN" and env["RAY_AUTH_MODE"] == "token"
    env = {"RAY_AUTH_TOKEN": "x", "RAY_AUTH_MODE": "disabled"}
    auth.prefer_token(env)
    assert env["RAY_AUTH_MODE"] == "disabled"  # the user's explicit choice is kept
    env = {}
    assert auth.prefer_token(env) is None and "RAY_AUTH_MODE" not in env


@pytest.mark.parametrize("env, says", [
    ({"RAY_AUTH_MODE": "disabled"}, "RAY_AUTH_MODE=disabled is set; set RAY_AUTH_MODE=token"),
    ({}, "none was found; put it in ~/.ray/auth_token"),
    ({"RAY_AUTH_TOKEN": "wrong", "RAY_AUTH_MODE": "token"}, "the token from $RAY_AUTH_TOKEN is not the cluster's"),
])
def test_a_refusal_is_one_line_that_says_what_to_set(env, says, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    stderr = "gcs_client.cc:210: Failed to get cluster ID from GCS server: Unauthenticated: RPC error: InvalidAuthToken\n" * 3
    text = auth.refusal_message("127.0.0.1:6379", "Failed to connect to Ray cluster at 127.0.0.1:6379", stderr, env)
    assert says in text and "\n" not in text and "127.0.0.1:6379" in text and "ray get-auth-token" in text


def test_a_cluster_that_is_not_there_is_not_blamed_on_the_token():
    text = auth.refusal_message("127.0.0.1:1", "Failed to connect to Ray cluster at 127.0.0.1:1", "", {})
    assert "authentication" not in text and "pcs-ray up --local" in text


def _spawn_session():
    """A stand-in node: a session leader with a child, as `ray start --block` and its raylet."""
    proc = subprocess.Popen(["bash", "-c", "sleep 300 & wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(lc.session_pids(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def test_down_stops_exactly_the_recorded_sessions(tmp_path):
    node, bystander = _spawn_session(), _spawn_session()
    try:
        pids = lc.session_pids(node.pid)
        assert len(pids) == 2
        record = lc.ClusterRecord("127.0.0.1:1", "http://127.0.0.1:2", str(tmp_path), "", "x", [
            lc.NodeRecord("node0", 1, node.pid, lc._stat(node.pid)[1], pids, head=True)])
        lc.save(record, tmp_path / lc.STATE_FILE)
        result = lc.down(tmp_path)
        assert sorted(result["stopped"]["node0"]) == pids and result["left"] == {}
        node.wait(timeout=10)
        assert all(lc._stat(p) is None for p in pids)
        assert len(lc.session_pids(bystander.pid)) == 2  # not ours to stop
        assert not (tmp_path / lc.STATE_FILE).exists()
    finally:
        for proc in (node, bystander):
            for pid in lc.session_pids(proc.pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)
            proc.wait(timeout=10)


def test_a_reused_pid_is_never_taken_for_ours(tmp_path):
    other = _spawn_session()
    try:
        stale = lc.NodeRecord("node0", 1, other.pid, lc._stat(other.pid)[1] + 12345, [other.pid])
        assert lc._ours(stale) == []
    finally:
        for pid in lc.session_pids(other.pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)
        other.wait(timeout=10)


@pytest.mark.parametrize("argv, says", [
    (["up"], "only --local"),
    (["up", "--local", "--gpus-per-node", "2", "--cluster-spec", "x.yaml"], "not both"),
    (["up", "--local", "--cluster-spec", "/nonexistent.yaml"], "nonexistent"),
    (["down", "--state-dir", "/nonexistent-pcs-ray"], "no local cluster recorded"),
])
def test_up_and_down_refuse_in_one_line(argv, says, tmp_path):
    from pcs_ray.cli import run

    if "--cluster-spec" in argv and "x.yaml" not in argv:
        argv = [*argv, "--state-dir", str(tmp_path)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert run(argv) == 2
    assert err.getvalue().startswith("error: ") and err.getvalue().count("\n") == 1 and says in err.getvalue()
