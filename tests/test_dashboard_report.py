"""`pcs-ray report --html`: the dashboard's pages as static files from a journal, the same HTML the live
dashboard serves, with links that resolve to the files beside them."""

from __future__ import annotations

import contextlib
import io
import json
import re

from dashboard_helpers import dom
from builders import Clock, coordinator


def test_report_html_writes_the_pages_of_a_finished_run(tmp_path):
    from pcs_ray.cli import run

    state = tmp_path / "state"
    clock = Clock()
    core = coordinator(gpus=4, per_node=2, journal=state / "journal.sqlite", clock=clock)
    core.set_tenants({"tenants": {"t1": {"quota": 2}, "t2": {"quota": 2}}})
    first, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 0.1, "name": "<first>",
                            "tenant": "t1"})
    clock.t += 1
    second, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 0.1, "tenant": "t2"})
    clock.t += 3
    core.run_ended(first, 1, "finished", 10)
    clock.t += 2
    core.run_ended(second, 1, "finished", 10)
    epoch = core.epoch
    core.journal.close()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run(["report", str(state), "--out", str(tmp_path / "r"), "--html", "--json"]) == 0
    result = json.loads(out.getvalue())
    folder = tmp_path / "r" / "html"
    assert result["html"] == str(folder / "timeline.html") and result["html_pages"] == 5
    timeline = dom((folder / "timeline.html").read_text()).one("svg", id="timeline")
    ran = {int(r.attrs["data-job-id"]): (float(r.attrs["data-start"]), float(r.attrs["data-finish"]))
           for r in timeline.all("rect", class_="past")}
    assert ran == {first: (epoch + 0.0, epoch + 4.0), second: (epoch + 1.0, epoch + 6.0)}
    assert not timeline.all("rect", class_="predicted")  # the journal keeps no forecast to draw
    jobs_html = (folder / "jobs.html").read_text()
    rows = dom(jobs_html).one("table", id="jobs").one("tbody").all("tr")
    assert [(r.attrs["data-job-id"], r.attrs["data-state"], r.attrs["data-tenant"]) for r in rows] == [
        (str(first), "finished", "t1"), (str(second), "finished", "t2")]
    assert "&lt;first&gt;" in jobs_html
    history = dom((folder / "policy.html").read_text()).one("table", id="config-history")
    assert [r.attrs["data-kind"] for r in history.one("tbody").all("tr")] == ["tenants apply", "start"]
    assert "t1 2" in history.text
    for page in folder.glob("*.html"):
        html = page.read_text()
        assert not re.search(r'(href|src|action|hx-get)="/', html) and "<script" not in html and "http://" not in html.replace(
            'xmlns="http://www.w3.org/2000/svg"', "")
        for target in re.findall(r'(?:href|src)="([^"#]+)"', html):
            assert (folder / target).is_file(), (page.name, target)


def test_report_reads_a_journal_from_the_clusters_storage(tmp_path):
    """`pcs-ray report s3://...`: the journal's mirror in the storage is the run, with no head's disk."""
    from pcs_ray.cli import run
    from pcs_ray.coordinator.journal_mirror import JournalMirror
    from pcs_ray.storage import open_storage

    state = tmp_path / "state"
    clock = Clock()
    core = coordinator(gpus=2, per_node=2, journal=state / "journal.sqlite", clock=clock)
    uri = f"file://{tmp_path}/bucket"
    mirror = JournalMirror(open_storage(uri), state / "journal.sqlite", interval_s=0.05)
    mirror.start()
    job, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 0.1})
    clock.t += 2
    core.run_ended(job, 1, "finished", 10)
    assert mirror.wait(10)
    mirror.close()
    core.journal.close()
    import shutil

    shutil.rmtree(state)  # the head's disk is gone
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run(["report", uri, "--out", str(tmp_path / "r"), "--json"]) == 0
    assert json.loads(out.getvalue())["finished"] == 1
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert run(["report", f"file://{tmp_path}/empty", "--json"]) == 2
    assert "no journal in" in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1
