"""The coordinator's journal has one interpreter: the live state, its replay after a restart and
``pcs-ray report`` read it alike, and the hosts change the state only through journaled events."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from pcs_ray.commands.report import journal_status
from pcs_ray.coordinator import Coordinator
from builders import Clock, coordinator

ROOT = Path(__file__).resolve().parent.parent
# What a job's view says that the journal holds (forecasts other than the one at submission are not journaled).
JOURNALED = ("state", "steps", "preemptions", "attempts", "emulated", "segments", "submit", "finish", "skips",
             "error", "lost_steps", "demand", "name", "class")


def core_on(path: Path, clock: Clock) -> Coordinator:
    """A core of two GPUs journaling to ``path`` and every progress report with it."""
    return coordinator(gpus=2, journal=path, checkpoint_root=path.parent / "ckpt", clock=clock, progress_journal_every=0.0)


def test_the_report_rebuilds_what_the_live_coordinator_shows(tmp_path):
    clock = Clock()
    core = core_on(tmp_path / "journal.sqlite", clock)
    first, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 0.1, "name": "first"})
    core.note_prediction(first)
    second, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 0.1})
    dropped, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 1, "step_time": 0.1})
    clock.t += 2.0
    core.progress(first, 3, 0.1, emulated=True)
    core.cancel(dropped)  # still queued: cancelled at once, with no run to end
    clock.t += 3.0
    core.run_ended(first, 1, "finished", 10, emulated=True)
    clock.t += 1.0
    core.run_ended(second, 1, "failed", 4, error="CUDA error")  # retried: back to the queue, then started again
    clock.t += 2.0
    core.run_ended(second, 2, "finished", 10)
    live = {j["id"]: j for j in core.status()["jobs"]}
    core.journal.close()
    (tmp_path / "cluster-spec.yaml").write_text(json.dumps(core.cluster.model_dump(mode="json")))

    rebuilt, names = journal_status(tmp_path)
    assert names == ["node0:0", "node0:1"]
    report = {j["id"]: j for j in rebuilt["jobs"]}
    assert report.keys() == live.keys() == {first, second, dropped}
    for jid, view in live.items():
        assert {k: report[jid][k] for k in JOURNALED} == {k: view[k] for k in JOURNALED}, jid
    assert report[dropped]["state"] == "cancelled" and report[first]["emulated"]
    assert report[second]["attempts"] == 2 and report[second]["error"] == "CUDA error"
    assert report[first]["first_predicted"] == live[first]["first_predicted"] is not None


def test_a_restart_keeps_the_prediction_at_submission_and_an_emulated_run(tmp_path):
    clock = Clock()
    core = core_on(tmp_path / "journal.sqlite", clock)
    jid, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 1, "step_time": 0.1})
    core.note_prediction(jid)
    predicted = core.jobs[jid].first_predicted
    clock.t += 1.0
    core.run_ended(jid, 1, "finished", 10, emulated=True)
    core.journal.close()
    clock.t += 5.0
    again = core_on(tmp_path / "journal.sqlite", clock)
    assert again.jobs[jid].emulated and again.jobs[jid].first_predicted == predicted is not None


def core_writes(path: Path) -> list[str]:
    """Where a module assigns to anything reached through ``self.core`` or touches the core's journal."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        found += [f"{path.name}:{node.lineno} {ast.unparse(t)}" for t in targets if ast.unparse(t).startswith("self.core.")]
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "self.core.journal":
            found.append(f"{path.name}:{node.lineno} self.core.journal")
    return found


def test_the_hosts_change_the_state_only_through_the_core():
    hosts = [ROOT / "pcs_ray" / "coordinator" / f"{name}.py" for name in ("host", "local", "actor")]
    assert [w for path in hosts for w in core_writes(path)] == []


def test_the_host_check_sees_a_direct_write(tmp_path):
    module = tmp_path / "host.py"
    module.write_text("def f(self, jid):\n    self.core.jobs[jid].emulated = True\n"
                      "    self.core.journal.append(0.0, 'predicted', jid, {})\n")
    assert core_writes(module) == ["host.py:2 self.core.jobs[jid].emulated", "host.py:3 self.core.journal"]


def test_a_record_the_report_cannot_read_is_a_one_line_error(tmp_path, capsys):
    from pcs_ray.cli import run

    clock = Clock()
    core = core_on(tmp_path / "journal.sqlite", clock)
    core.submit({"workload": "tiny", "steps": 10, "gpus": 1, "step_time": 0.1})
    core.journal.append(core.now(), "progress", 99, {"step": 1, "step_time": None})  # a job the journal never had
    core.journal.close()
    assert run(["report", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "record 4 (progress) cannot be read" in err and err.count("\n") == 1
