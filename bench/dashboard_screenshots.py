"""The README's dashboard screenshots, from a real local cluster (never drawn by hand, so they never drift).

    PYTHONPATH=. python bench/dashboard_screenshots.py [--out docs/screenshots] [--settle 40]

Brings up `pcs-ray up --local --cluster-spec examples/clusters/laptop.yaml
--placement combined` (2 nodes x 4 logical GPUs, a private token file, a
temporary state folder), applies a tenants file of two teams, submits the
examples as their users would (`examples/jobs/*.yaml`, `examples/user-code/mlp.yaml`),
signs in through the one-time link `pcs-ray dashboard` prints, watches the
jobs page while the cluster runs for ``--settle`` seconds, and saves a PNG of
every page (cluster, jobs, timeline, tenants, policy, and a running job's own
page, the user-code job's where it runs) with the system's
Chromium through Playwright. The cluster is stopped at the end (`pcs-ray down`).
Prints one JSON object: the files written and the jobs they show.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import tempfile
import time
from pathlib import Path

from common import Cli, cli_env, up_local

from pcs_ray.api import strict_json

ROOT = Path(__file__).resolve().parent.parent

LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync"]
TENANTS = "tenants:\n  vision: {quota: 4}\n  speech: {quota: 4}\nmin_runtime_s: 30\noperators: [ops]\n"
#: (job file, who submits it): the README's examples, split between the two teams.
EXAMPLES = [("examples/jobs/one-gpu.yaml", ("alice", "vision")), ("examples/jobs/elastic.yaml", ("bob", "speech")),
            ("examples/jobs/rigid-4gpu.yaml", ("alice", "vision")), ("examples/user-code/mlp.yaml", ("bob", "speech")),
            ("examples/jobs/one-gpu.yaml", ("carol", "vision"))]
PAGES = ("cluster", "jobs", "timeline", "tenants", "policy")


def shoot(link: str, out: Path, prefer: int, settle: float, chromium: str) -> tuple[list[str], int | None]:
    """Sign in, keep the jobs page open while the cluster runs ``settle`` seconds (the dashboard keeps each job's
    prediction history while it is watched), then shoot every page and one running job's own page (``prefer``
    when it is running)."""
    from playwright.sync_api import sync_playwright

    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS)
        page = browser.new_context(viewport={"width": 1280, "height": 860}, device_scale_factor=1).new_page()
        page.goto(link)
        if "/dashboard/login" in page.evaluate("location.pathname"):
            raise SystemExit(f"error: the one-time link did not sign in: {page.locator('p.error').all_inner_texts()}")
        base = link.split("/dashboard/", 1)[0]
        page.goto(f"{base}/dashboard/jobs")
        page.wait_for_timeout(1000 * settle)
        running = [int(i) for i in page.locator("table#jobs tbody tr[data-state=running]").evaluate_all(
            "rs => rs.map(r => r.dataset.jobId)")]
        job_page = prefer if prefer in running or not running else running[0]
        targets = [(name, f"{base}/dashboard/{name}") for name in PAGES]
        if job_page is not None:
            targets.append(("job", f"{base}/dashboard/jobs/{job_page}"))
        for name, url in targets:
            page.goto(url, wait_until="load")
            page.wait_for_timeout(1500)  # one live refresh, so the shot shows the page as it keeps itself
            path = out / f"{name}.png"
            page.screenshot(path=str(path), full_page=True)
            written.append(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path))
        browser.close()
    return written, job_page


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--settle", type=float, default=40.0, help="seconds the cluster runs before the shots")
    args = ap.parse_args()
    chromium = os.environ.get("PCS_RAY_CHROMIUM") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        raise SystemExit(f"error: no Chromium at {chromium}: apt-get install chromium, or set $PCS_RAY_CHROMIUM")
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pcs-dashboard-shots-"))
    (work / "token").write_text(secrets.token_hex(32))
    (work / "token").chmod(0o600)
    (work / "tenants.yaml").write_text(TENANTS)
    cli = Cli(cli_env(work / "token", RAY_USAGE_STATS_ENABLED="0", PCS_RAY_USER="ops", PCS_RAY_TENANT=""))
    with up_local(cli, work / "state", "--cluster-spec", ROOT / "examples" / "clusters" / "laptop.yaml",
                  "--placement", "combined") as cluster:
        cli.env.update(RAY_ADDRESS=cluster.up["address"], PCS_RAY_API=cluster.up["api"])
        cli("tenants", "apply", work / "tenants.yaml")
        jobs = []
        for path, (user, tenant) in EXAMPLES:
            reply = cli.json("submit", ROOT / path, env={"PCS_RAY_USER": user, "PCS_RAY_TENANT": tenant})
            jobs.append({"id": reply["id"], "file": path, "user": user, "tenant": tenant})
            time.sleep(3)
        printed = cli("dashboard", env={"PCS_RAY_USER": "alice", "PCS_RAY_TENANT": "vision"}).stdout
        links = re.findall(r"https?://\S+/dashboard/login\?ticket=\S+", printed)
        if not links:
            raise SystemExit(f"error: `pcs-ray dashboard` printed no sign-in link: {printed.strip()[:300]}")
        user_code = next(j["id"] for j in jobs if "user-code" in j["file"])
        written, shown = shoot(links[0], args.out, user_code, args.settle, chromium)
        states = {j["id"]: j["state"] for j in cli.json("status")["jobs"]}
    print(strict_json.dumps({"screenshots": written, "job_page": shown, "jobs": [{**j, "state": states.get(j["id"])} for j in jobs]},
                            indent=1))


if __name__ == "__main__":
    main()
