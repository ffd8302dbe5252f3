"""The operator's policy configuration: picked up at start, swapped while running, kept across restarts.

In-process (``LocalCoordinator`` on ``build_core``), with external jobs so that
no runner is needed: the decisions show in their assignments.
"""

from __future__ import annotations

import math

import pytest

from pcs_ray.cli import run
from pcs_ray.contract import ConfigError, JobSpecError, UnknownJobError
from pcs_ray.coordinator.config import build_core, choose_policy
from pcs_ray.coordinator.local import LocalCoordinator
from pcs_ray.data import pcs_config
from pcs_ray.policies import WFQConfig
from builders import Clock, core_config, external_submission, local_start


@pytest.fixture(autouse=True)
def solver_config(tmp_path, monkeypatch):
    """Where `pcs-ray solve --set` writes: a private path (nothing written yet)."""
    path = tmp_path / "solver" / "wfq_config.json"
    monkeypatch.setenv("PCS_RAY_WFQ_CONFIG", str(path))
    return path


def predicted(link: LocalCoordinator, jid: int) -> float:
    return link.predict(jid)["predicted_completion"]


def same_wfq(described: dict, config: WFQConfig) -> bool:
    """A policy's parameters are ``config`` (weights are normalised each time they are read: compare them loosely)."""
    got = dict(described)
    rates, want_rates = got.pop("class_rates"), config.to_dict().pop("class_rates")
    want = {"policy": "pcs", **config.to_dict()}
    want.pop("class_rates")
    return got == want and rates == pytest.approx(want_rates)


def test_build_core_runs_the_configuration_the_solver_wrote(tmp_path, solver_config):
    from pcs_ray.solver.preference import set_wfq_config

    bundled = WFQConfig.load(pcs_config("themis1", "bal"))
    assert same_wfq(build_core(core_config(tmp_path / "a" / "state", policy=None)).config()["policy"], bundled)
    assert choose_policy().source == "the default"

    written = set_wfq_config(WFQConfig.from_params((100.0, 5000.0, math.inf), W=1.0, zeta_min=0.5))
    assert written == solver_config
    chosen = WFQConfig.load(written)
    assert not same_wfq({"policy": "pcs", **bundled.to_dict()}, chosen)
    assert same_wfq(build_core(core_config(tmp_path / "b" / "state", policy=None)).config()["policy"], chosen)
    assert str(written) in choose_policy().source
    named = build_core(core_config(tmp_path / "c" / "state", policy="fifo"))
    assert named.config()["policy"] == {"policy": "fifo"}  # named wins


def test_config_set_changes_decisions_and_predictions_and_survives_a_restart(tmp_path):
    clock = Clock()
    link = local_start(tmp_path / "state", clock=clock)
    long_job = link.submit(external_submission(steps=1000)).id
    short = link.submit(external_submission(steps=10)).id
    assert link.assignment(long_job)["state"] == "running" and link.assignment(short)["state"] == "queued"
    assert predicted(link, short) == pytest.approx(1000 + 1000 + 10, abs=0.5)  # FIFO: after the long one

    clock.t += 100
    reply = link.set_config("srsf")
    assert reply["policy"] == {"policy": "srsf"} and reply["source"] == "set" and reply["since"] == 1100
    assert link.assignment(long_job)["state"] == "stopping"  # SRSF runs the short job first
    assert predicted(link, short) == pytest.approx(1100 + 10, abs=0.5)
    assert predicted(link, long_job) == pytest.approx(1100 + 10 + 1000, abs=0.5)  # no step of it reported yet
    link.external_ended(long_job, 1, "preempted", step=100)
    assert link.assignment(short)["state"] == "running" and link.assignment(long_job)["state"] == "queued"
    assert predicted(link, long_job) == pytest.approx(1100 + 10 + 900, abs=0.5)
    link.core.journal.close()

    # A restart with the same start configuration (what Ray does to a dead actor) keeps what was set.
    clock.t += 5
    again = local_start(tmp_path / "state", clock=clock)
    assert again.config()["policy"] == {"policy": "srsf"} and again.config()["source"] == "set"
    assert again.config()["since"] == 1100
    assert again.assignment(short)["state"] == "running" and again.assignment(long_job)["state"] == "queued"
    assert predicted(again, short) < predicted(again, long_job)
    again.core.journal.close()

    # A start that names another policy takes over.
    clock.t += 5
    fair = local_start(tmp_path / "state", policy="fair", clock=clock)
    assert fair.config()["policy"] == {"policy": "fair"} and fair.config()["source"] == "start"
    fair.core.journal.close()
    assert local_start(tmp_path / "state", policy="fair", clock=clock).config()["source"] == "start"


def test_a_wfq_configuration_is_set_and_bad_ones_are_refused_before_the_journal(tmp_path):
    link = local_start(tmp_path / "state", clock=Clock())
    wfq = WFQConfig.from_params((100.0, math.inf), W=0.5, zeta_min=0.0)
    assert same_wfq(link.set_config("pcs", wfq.to_dict())["policy"], wfq)
    before = len(link.core.journal)
    with pytest.raises(ConfigError, match="unknown policy 'nope'"):
        link.set_config("nope")
    with pytest.raises(ConfigError, match="needs a WFQ configuration"):
        link.set_config("pcs")
    with pytest.raises(ConfigError, match="missing key"):
        link.set_config("pcs", {"class_rates": [1.0]})
    assert len(link.core.journal) == before and link.config()["policy"]["policy"] == "pcs"


def test_refusals_are_typed(tmp_path):
    link = local_start(tmp_path / "state", clock=Clock())
    with pytest.raises(UnknownJobError, match="no job with id 7"):
        link.predict(7)
    with pytest.raises(UnknownJobError):
        link.cancel(7)
    with pytest.raises(JobSpecError, match="the cluster has 1"):
        link.submit({"workload": "tiny_cnn", "steps": 5, "gpus": 2})
    assert not issubclass(UnknownJobError, JobSpecError)


@pytest.mark.parametrize(
    "args, message",
    [
        (["config", "set", "--policy", "nonsense"], "unknown policy 'nonsense'"),
        (["config", "set", "--policy", "pcs"], "needs a WFQ configuration"),
        (["config", "set", "missing.json"], "no such WFQ config file"),
        (["config", "set", "BAD", "--policy", "fifo"], "not both"),
        (["config", "set"], "has written no configuration"),
        (["start", "--policy", "fifo", "--pcs-config", "BAD"], "is for policy 'pcs'"),
    ],
    ids=["unknown-policy", "pcs-without-file", "missing-file", "file-and-policy", "nothing-written", "start-file-not-pcs"],
)
def test_bad_config_input_is_one_line_before_connecting(tmp_path, capsys, monkeypatch, args, message):
    bad = tmp_path / "bad.json"
    bad.write_text('{"class_rates": [1]}')
    monkeypatch.chdir(tmp_path)
    assert run([a.replace("BAD", str(bad)) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1


def test_config_help_explains(capsys):
    assert run(["config"]) == 0
    assert "pcs-ray solve" in capsys.readouterr().out
    for cmd in ("show", "set"):
        assert run(["config", cmd, "--help"]) == 0
    assert "journaled" in capsys.readouterr().out


def test_emulation_overruns_are_counted_per_run_and_shown_in_status(tmp_path):
    link = local_start(tmp_path / "state")
    jid = link.submit({"workload": "tiny_cnn", "steps": 100, "gpus": 1, "step_time": 0.1}).id
    link.report_progress(str(jid), 5, 0.1, emulated=True, overruns=2)
    link.report_progress(str(jid), 9, 0.1, emulated=True, overruns=3)  # a running total: 3, not 5
    link.report_progress(str(jid), 10, 0.1, emulated=True, overruns=1)  # a late, older report changes nothing
    link.count_overruns(jid, 7, 4)  # another run of the job (its outcome's count)
    status = link.status()
    assert status["emulation_overruns"] == 7
    assert [j["emulation_overruns"] for j in status["jobs"] if j["id"] == jid] == [7]
    assert "runners" not in status  # no pool in this host
