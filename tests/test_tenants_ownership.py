"""Ownership: a tenants file applied to a running coordinator (journaled, kept across a restart), the caller every
client declares, and the refusals it brings: another tenant's cancel, a non-operator's config set, tenants apply
and stop. Without a tenants file nothing is refused. In-process cores and an in-process host served over HTTP
(no Ray); the CLI runs in this process against it."""

from __future__ import annotations

import http.client
import json

import pytest
from api_helpers import TOKEN, local_host, served

from pcs_ray.api.advert import API_ENV
from pcs_ray.cli import run
from pcs_ray.client import Client
from pcs_ray.contract import ConfigError, JobSpecError, PermissionDeniedError
from pcs_ray.tenants.identity import TENANT_ENV, USER_ENV, Caller
from builders import Clock, external_submission, local_start

TENANTS = {"tenants": {"a": {"quota": 2}, "b": {"quota": 2}}, "operators": ["root"]}
ALICE, BOB, ROOT = Caller("alice", "a"), Caller("bob", "b"), Caller("root", None)


def gpus_of(link, jid: int) -> int:
    return len(link.core.model.plan().get(jid, ()))


# -- apply, and a restart keeps it ------------------------------------------------------------------
def test_an_applied_tenants_file_wraps_the_policy_lends_reclaims_and_survives_a_restart(tmp_path):
    link = local_start(tmp_path / "state", gpus=4, clock=Clock())
    a = link.submit(external_submission(gpus=4, min_gpus=1), caller=ALICE.to_wire()).id
    assert link.core.jobs[a].spec.tenant == "a" and link.core.jobs[a].spec.user == "alice"  # the caller's
    assert link.tenants()["tenants"] is None and gpus_of(link, a) == 4

    reply = link.set_tenants(TENANTS, ROOT.to_wire())
    assert reply["tenants"]["tenants"]["a"]["quota"] == 2 and reply["since"] == 1000.0
    assert reply["usage"]["a"] == {"jobs": 1, "waiting": 0, "gpus": 4}
    policy = link.config()["policy"]
    assert policy["policy"] == "tenants" and policy["inner"] == {"policy": "fifo"}
    assert gpus_of(link, a) == 4  # b's idle quota is lent
    b = link.submit(external_submission(gpus=2), caller=BOB.to_wire()).id
    assert gpus_of(link, a) == 2 and gpus_of(link, b) == 2  # and given back when b submits
    link.set_config("srsf", caller=ROOT.to_wire())  # a new policy is wrapped too
    assert link.config()["policy"]["inner"] == {"policy": "srsf"}
    link.core.journal.close()

    again = local_start(tmp_path / "state", gpus=4, clock=Clock(1010.0))
    assert again.tenants()["tenants"] == reply["tenants"] and again.tenants()["since"] == 1000.0
    assert again.config()["policy"]["policy"] == "tenants" and again.config()["policy"]["inner"] == {"policy": "srsf"}
    assert gpus_of(again, a) == 2 and gpus_of(again, b) == 2
    with pytest.raises(PermissionDeniedError):  # and its refusals
        again.cancel(a, BOB.to_wire())


def test_jobs_of_a_tenant_the_file_leaves_out_refuse_the_apply_and_jobs_without_one_run_as_guests(tmp_path):
    link = local_start(tmp_path / "state", gpus=4, clock=Clock())
    old = link.submit(external_submission(gpus=1)).id  # from before tenants: no tenant
    stray = link.submit(external_submission(gpus=1, tenant="c")).id
    before = len(link.core.journal)
    with pytest.raises(ConfigError, match=rf"active jobs name tenants it does not declare: 'c' \(job {stray}\)"):
        link.set_tenants(TENANTS, ROOT.to_wire())
    assert len(link.core.journal) == before and link.tenants()["tenants"] is None
    link.cancel(stray)
    link.set_tenants(TENANTS, ROOT.to_wire())
    assert link.core.active[old].spec.tenant is None and link.tenants()["usage"][""]["jobs"] == 1
    with pytest.raises(JobSpecError, match="names no tenant .*tenants: a, b"):  # new jobs must name one
        link.submit(external_submission(gpus=1), caller=Caller("carol").to_wire())
    with pytest.raises(JobSpecError, match="unknown tenant 'c'; tenants: a, b"):
        link.submit(external_submission(gpus=1, tenant="c"), caller=ALICE.to_wire())


# -- refusals --------------------------------------------------------------------------------------
def test_cancel_is_for_the_jobs_tenant_its_submitter_or_an_operator(tmp_path):
    link = local_start(tmp_path / "state", gpus=4, clock=Clock())
    link.set_tenants(TENANTS, ROOT.to_wire())
    jobs = [link.submit(external_submission(gpus=1), caller=ALICE.to_wire()).id for _ in range(4)]
    with pytest.raises(PermissionDeniedError) as refused:
        link.cancel(jobs[0], BOB.to_wire())
    message = str(refused.value)
    assert message.startswith(f"job {jobs[0]} belongs to tenant 'a'; user 'bob' of tenant 'b' may not cancel it")
    assert "\n" not in message and not link.core.jobs[jobs[0]].cancel_requested
    with pytest.raises(PermissionDeniedError, match="an anonymous caller may not"):
        link.cancel(jobs[0], None)
    assert link.cancel(jobs[0], Caller("dave", "a").to_wire())["state"] != "running"  # its tenant
    assert link.cancel(jobs[1], Caller("alice", None).to_wire())  # its submitter, whatever tenant they declare now
    assert link.cancel(jobs[2], ROOT.to_wire())  # an operator
    assert all(link.core.jobs[j].cancel_requested for j in jobs[:3])


def test_operators_commands_are_refused_to_others_once_the_file_names_operators(tmp_path):
    link = local_start(tmp_path / "state", gpus=4, clock=Clock())
    link.set_tenants({"tenants": {"a": {"quota": 2}}}, BOB.to_wire())  # no operators yet: anyone may
    link.set_config("srsf", caller=BOB.to_wire())
    link.check_stop(BOB.to_wire())
    with pytest.raises(ConfigError, match=r"its operators \(alice\) leave out bob"):  # no locking oneself out
        link.set_tenants({**TENANTS, "operators": ["alice"]}, BOB.to_wire())
    link.set_tenants(TENANTS, ROOT.to_wire())
    before = len(link.core.journal)
    for refused in (lambda: link.set_config("fifo", caller=ALICE.to_wire()),
                    lambda: link.set_tenants(TENANTS, ALICE.to_wire()),
                    lambda: link.check_stop(ALICE.to_wire())):
        with pytest.raises(PermissionDeniedError, match=r"is for operators \(root\); user 'alice' of tenant 'a' is not"):
            refused()
    assert len(link.core.journal) == before and link.config()["policy"]["inner"] == {"policy": "srsf"}
    link.check_stop(ROOT.to_wire())


def test_without_tenants_nothing_is_refused(tmp_path):
    link = local_start(tmp_path / "state", gpus=4, clock=Clock())
    jid = link.submit(external_submission(gpus=1), caller=ALICE.to_wire()).id
    other = link.submit(external_submission(gpus=1)).id
    link.cancel(jid, BOB.to_wire())
    link.cancel(other, None)
    assert link.core.jobs[jid].cancel_requested and link.core.jobs[other].cancel_requested
    link.set_config("srsf", caller=Caller().to_wire())
    link.check_stop(None)
    assert link.config()["policy"] == {"policy": "srsf"}


def test_a_malformed_caller_is_one_line(tmp_path):
    link = local_start(tmp_path / "state", gpus=4, clock=Clock())
    for bad in ("alice", {"user": 3}, {"user": "x", "role": "admin"}, {"tenant": "t" * 101}):
        with pytest.raises(Exception, match="^caller: ") as e:
            link.submit(external_submission(gpus=1), caller=bad)
        assert isinstance(e.value, ValueError) and "\n" not in str(e.value)
    assert not link.core.jobs


# -- the identity clients declare ----------------------------------------------------------------
def test_the_caller_is_the_env_else_the_login(monkeypatch):
    import getpass

    monkeypatch.setenv(USER_ENV, "alice")
    monkeypatch.setenv(TENANT_ENV, "a")
    assert Caller.from_env() == Caller("alice", "a") and Caller.from_env("b") == Caller("alice", "b")
    monkeypatch.delenv(USER_ENV)
    monkeypatch.delenv(TENANT_ENV)
    monkeypatch.setattr(getpass, "getuser", lambda: "login")
    assert Caller.from_env() == Caller("login", None)


def test_a_trainer_sends_its_tenant():
    from pcs_ray.train import Trainer

    spec = Trainer("train.py:main", steps=10, tenant="a", min_runtime_s=60, client=object()).spec()
    assert spec["tenant"] == "a" and spec["min_runtime_s"] == 60
    assert "tenant" not in Trainer("train.py:main", steps=10, client=object()).spec()


# -- over HTTP, through the CLI ----------------------------------------------------------------------
@pytest.fixture()
def api(tmp_path, monkeypatch):
    host = local_host(tmp_path, gpus=4, per_node=4)
    with served(host) as server:
        monkeypatch.setenv(API_ENV, server.url)
        monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
        monkeypatch.setenv("HOME", str(tmp_path))
        yield host, server


def as_caller(monkeypatch, caller: Caller) -> None:
    monkeypatch.setenv(USER_ENV, caller.user)
    if caller.tenant:
        monkeypatch.setenv(TENANT_ENV, caller.tenant)
    else:
        monkeypatch.delenv(TENANT_ENV, raising=False)


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err.strip()


def test_the_cli_applies_shows_and_refuses_in_one_line(api, monkeypatch, capsys, tmp_path):
    host, server = api
    path = tmp_path / "tenants.yaml"
    path.write_text("tenants:\n  a: {quota: 2}\n  b: {quota: 2, weight: 2}\noperators: [root]\n")
    job = tmp_path / "job.yaml"
    job.write_text("workload: tiny_cnn\nsteps: 30\n")

    assert cli(capsys, "tenants", "show")[1].startswith("no tenants file applied")
    as_caller(monkeypatch, ROOT)
    code, out, _ = cli(capsys, "tenants", "apply", path)
    assert code == 0 and "a: quota 2, weight 1" in out and "operators: root" in out
    as_caller(monkeypatch, ALICE)
    code, out, _ = cli(capsys, "submit", job, "--json")
    jid = json.loads(out)["id"]
    assert host.core.jobs[jid].spec.tenant == "a" and host.core.jobs[jid].spec.user == "alice"
    assert [(j["tenant"], j["user"]) for j in json.loads(cli(capsys, "status", "--json")[1])["jobs"]] == [("a", "alice")]
    assert json.loads(cli(capsys, "tenants", "show", "--json")[1])["usage"]["a"]["jobs"] == 1

    as_caller(monkeypatch, BOB)
    code, _, err = cli(capsys, "cancel", jid)
    assert code == 2 and err.startswith(f"error: job {jid} belongs to tenant 'a'; user 'bob'") and "\n" not in err
    code, _, err = cli(capsys, "tenants", "apply", path)
    assert code == 2 and err.startswith("error: tenants apply is for operators (root)") and "\n" not in err
    assert not host.core.jobs[jid].cancel_requested
    as_caller(monkeypatch, Caller("carol", "a"))
    assert cli(capsys, "cancel", jid)[0] == 0 and host.core.jobs[jid].cancel_requested


def test_the_refusal_is_http_403_with_one_line(api):
    host, server = api
    host.set_tenants(TENANTS, ROOT.to_wire())
    jid = host.submit(external_submission(gpus=1), caller=ALICE.to_wire()).id
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("POST", "/v1/cancel", body=json.dumps({"args": [jid, BOB.to_wire()]}),
                     headers={"Authorization": f"Bearer {TOKEN}"})
        reply = conn.getresponse()
        body = json.loads(reply.read())
    finally:
        conn.close()
    assert reply.status == 403 and body["error"]["type"] == "PermissionDeniedError"
    assert "\n" not in body["error"]["message"]
    with pytest.raises(PermissionDeniedError):  # a Client raises it as itself
        Client(api=server.url, identity=BOB).cancel(jid)


@pytest.mark.parametrize("text, message", [
    ("tenants:\n  a: {quota: -1}\n", "tenants.a.quota: Input should be greater than or equal to 0"),
    ("tenants:\n  a: {quota: 1, colour: red}\n", "tenants.a.colour: Extra inputs are not permitted"),
    ("tenant: {}\n", "tenant: Extra inputs are not permitted"),
    ("tenants:\n  a: {quota: 3}\n  b: {quota: 2}\n", "tenant quotas add up to 5 GPUs, more than the cluster's 4"),
    ("tenants: [", "not valid YAML"),
], ids=["negative-quota", "unknown-tenant-key", "unknown-key", "past-the-cluster", "not-yaml"])
def test_a_bad_tenants_file_is_one_line_and_changes_nothing(api, monkeypatch, capsys, tmp_path, text, message):
    host, _ = api
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    before = len(host.core.journal)
    code, _, err = cli(capsys, "tenants", "apply", path)
    assert code == 2 and err.startswith("error: ") and message in err and "\n" not in err
    assert len(host.core.journal) == before and host.core.tenants is None


def test_tenants_help_says_who_may_do_what(capsys):
    assert run(["tenants"]) == 0
    out = capsys.readouterr().out
    assert "$PCS_RAY_TENANT" in out and "operators" in out and "guests" in out
    assert run(["tenants", "apply", "--help"]) == 0 and "journaled" in capsys.readouterr().out
