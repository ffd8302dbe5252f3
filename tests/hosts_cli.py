"""The operator's commands on an emulated cluster's head machine (``hosts.py``), shared by the tests and benches
that drive one: ``pcs-ray`` as typed there, its status as JSON, and a wait with a message that says for what."""

from __future__ import annotations

import json
import time


def pcs(hosts, *args, timeout=180, check=True):
    """``pcs-ray`` on the head machine, as its operator types it."""
    return hosts.run("head", ["pcs-ray", *map(str, args)], timeout=timeout, check=check)


def one_json(stdout: str) -> dict:
    """A ``--json`` command's one document: Ray's own processes may write into the same stdout (a fresh CI run
    once saw text right after a ``submit --json`` document), so the first object is read and the rest left."""
    return json.JSONDecoder().raw_decode(stdout[stdout.index("{"):])[0]


def status(hosts) -> dict:
    return one_json(pcs(hosts, "status", "--json", "--address", hosts.ray_address).stdout)


def job(hosts, jid: int) -> dict:
    return next(j for j in status(hosts)["jobs"] if j["id"] == jid)


def wait_for(predicate, timeout: float, what: str, every: float = 2.0):
    """``predicate()``'s first true value, asked every ``every`` seconds for up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
