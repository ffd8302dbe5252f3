"""The dashboard's pages as static files (``pcs-ray report --html``): the same HTML, readable offline.

The pages are rendered without a session (no polling, no actions) and their
links rewritten to the files written beside them: ``cluster.html``,
``jobs.html`` (and ``jobs-N.html``, one per page of 100 jobs),
``timeline.html``, ``tenants.html``, ``policy.html``, and the style sheet in
``static/``. Job pages are not written; a job's link points at its row.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from pcs_ray.dashboard import pages
from pcs_ray.dashboard.jobs_table import PAGE_ROWS, JobsQuery
from pcs_ray.dashboard.markup import PREFIX

MAX_JOB_PAGES = 1000  # 100,000 jobs
_LINK = re.compile(r'(href|src|action)="' + re.escape(PREFIX) + r'/([^"]*)"')


def _local(match: re.Match) -> str:
    attr, target = match.group(1), match.group(2).replace("&amp;", "&")
    path, _, query = target.partition("?")
    if path.startswith("static/"):
        return f'{attr}="{path}"'
    if path.startswith("jobs/"):
        return f'{attr}="jobs.html"'
    if path == "jobs":
        page = re.search(r"(?:^|&)page=(\d+)", query)
        return f'{attr}="{"jobs.html" if page is None or page.group(1) == "1" else f"jobs-{page.group(1)}.html"}"'
    return f'{attr}="{path}.html"'


def static_html(html: str) -> str:
    """A page's links to the dashboard's routes, as links to the files written beside it."""
    return _LINK.sub(_local, html)


def write_pages(snapshot: dict, folder: Path) -> list[Path]:
    """Write every page of ``snapshot`` under ``folder``; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "static").mkdir(exist_ok=True)
    written = []
    for name in ("dashboard.css", "favicon.svg"):
        target = folder / "static" / name
        target.write_bytes(resources.files("pcs_ray.dashboard").joinpath("static", name).read_bytes())
        written.append(target)
    built = {"cluster.html": pages.cluster_page(snapshot), "timeline.html": pages.timeline_page(snapshot),
             "tenants.html": pages.tenants_page(snapshot), "policy.html": pages.policy_page(snapshot)}
    count = min(MAX_JOB_PAGES, max(1, -(-len(snapshot["jobs"]) // PAGE_ROWS)))
    for page in range(1, count + 1):
        built["jobs.html" if page == 1 else f"jobs-{page}.html"] = pages.jobs_page(snapshot, JobsQuery(page=page))
    for name, html in built.items():
        target = folder / name
        target.write_text(static_html(html), encoding="utf-8")
        written.append(target)
    return written
