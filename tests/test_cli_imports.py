"""The calls users poll import only what they use: each command's modules, in a CLI process of its own that talks
to a coordinator over HTTP, are held here (pcs-ray's exactly; other packages within the command line's own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from api_helpers import TOKEN, local_host, served

from pcs_ray.api.advert import API_ENV

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, sys
from pcs_ray.cli import run
code = run(sys.argv[1:])
print("MODULES", json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""

# What every call loads: the entry point, the client and its standard-library transport, the API's discovery.
CALL = {"pcs_ray", "pcs_ray.cli", "pcs_ray.client", "pcs_ray.contract", "pcs_ray.commands", "pcs_ray.commands.target",
        "pcs_ray.api", "pcs_ray.api.advert", "pcs_ray.api.discovery", "pcs_ray.api.ray_token", "pcs_ray.api.transport",
        "pcs_ray.api.wire", "pcs_ray.api.strict_json", "pcs_ray.tenants", "pcs_ray.tenants.identity"}
TABLES = {"pcs_ray.commands.live", "pcs_ray.commands.format", "pcs_ray.commands.views"}
JOB_FILE = {"pcs_ray.jobs", "pcs_ray.jobs.jobfile", "pcs_ray.jobs.usercode", "pcs_ray.jobs.train_options",
            "pcs_ray.cluster", "pcs_ray.cluster.spec", "pcs_ray.cluster.nvml"}  # submit checks the file before it connects (NVML itself is imported lazily)
PCS_RAY = {
    "status": CALL | TABLES,
    "predict": CALL | TABLES,
    "cancel": CALL | TABLES,
    "submit": CALL | TABLES | JOB_FILE,
    "logs": CALL | {"pcs_ray.commands.logs"},
    "config": CALL | TABLES | {"pcs_ray.commands.config"},
}
# The command line's own packages (typer and what it loads: click, rich, pydantic); PyYAML for a job file.
COMMAND_LINE = {"typer", "click", "rich", "pygments", "markdown_it", "mdurl", "shellingham", "annotated_doc",
                "annotated_types", "pydantic", "pydantic_core", "typing_extensions", "typing_inspection"}
NEVER = {"ray", "torch", "numpy", "aiohttp", "pandas", "scipy", "deap", "psutil", "grpc", "matplotlib", "yaml"}


def _modules(url: str, home: Path, *argv: str) -> tuple[set[str], subprocess.CompletedProcess]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PCS_RAY_"))}
    env.update({API_ENV: url, "RAY_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT), "HOME": str(home)})
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=120, check=False,
                         cwd=ROOT)
    line = next((x for x in out.stderr.splitlines() if x.startswith("MODULES ")), None)
    assert out.returncode == 0 and line is not None, (argv, out.stderr[-2000:])
    return set(json.loads(line.removeprefix("MODULES "))), out


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    host = local_host(tmp_path_factory.mktemp("imports"))
    with served(host) as server:
        yield host, server


@pytest.mark.parametrize("argv", [["status"], ["status", "--json"], ["predict", "{job}"], ["predict", "{job}", "--json"],
                                  ["submit", "{file}", "--json"], ["cancel", "{job}"], ["logs", "{job}"],
                                  ["config", "show"]])
def test_each_call_imports_only_what_it_uses(api, tmp_path, argv):
    host, server = api
    job = tmp_path / "job.yaml"
    job.write_text("workload: tiny_cnn\nsteps: 30\n")
    jid = host.submit({"workload": "tiny_cnn", "steps": 30}).id
    words = [w.format(job=jid, file=job) for w in argv]
    modules, out = _modules(server.url, tmp_path, *words)
    ours = {m for m in modules if m.split(".")[0] == "pcs_ray"}
    assert ours == PCS_RAY[argv[0]], (sorted(ours - PCS_RAY[argv[0]]), sorted(PCS_RAY[argv[0]] - ours))
    roots = {m.split(".")[0] for m in modules if not m.startswith("_")} - set(sys.stdlib_module_names) - {"pcs_ray", "cython_runtime"}
    allowed = COMMAND_LINE | ({"yaml"} if argv[0] == "submit" else set())
    assert roots <= allowed, sorted(roots - allowed)
    assert not roots & (NEVER - allowed), sorted(roots & NEVER)
    assert "joined the Ray cluster" not in out.stderr
