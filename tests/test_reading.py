"""Readers take the coordinator's jobs a bounded part per hold of its lock, and see what a whole read sees."""

from __future__ import annotations

import random

import pcs_ray.coordinator.reading as reading
from builders import clocked, submit_random
from pcs_ray.coordinator.dashboard_state import take_snapshot
from pcs_ray.coordinator.local import LocalCoordinator


class CountingLock:
    """The host's lock, counting the jobs a reader copies during each hold."""

    def __init__(self, lock) -> None:
        self.lock, self.depth, self.copies, self.per_hold = lock, 0, 0, []

    def __enter__(self):
        self.lock.__enter__()
        self.depth += 1
        if self.depth == 1:
            self.copies = 0
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        if self.depth == 0:
            self.per_hold.append(self.copies)
        return self.lock.__exit__(*exc)

    def yielder(self, *args, **kwargs):
        return self.lock.yielder(*args, **kwargs)


def _host(n: int) -> LocalCoordinator:
    core, clock = clocked(gpus=8, per_node=4, policy="pcs-bal", workloads=None)
    submit_random(core, clock, random.Random(3), n, gap=1.0)
    return LocalCoordinator(core)


def test_a_read_holds_the_lock_for_a_bounded_part_and_sees_every_job(monkeypatch):
    host = _host(45)
    lock = host.lock = CountingLock(host.lock)
    copy = reading.copy_job

    def counted(job):
        lock.copies += 1
        return copy(job)

    monkeypatch.setattr(reading, "copy_job", counted)
    monkeypatch.setattr(reading, "READ_PART", 10)
    whole = {j["id"]: j for j in host.core.status()["jobs"]}
    status = host.status()
    assert max(lock.per_hold) == 10 and sum(lock.per_hold) >= 45  # READ_PART 10: five parts of 45 jobs
    assert {j["id"]: {k: v for k, v in j.items() if not k.startswith("emulation_")} for j in status["jobs"]} == whole
    lock.per_hold.clear()
    snapshot, held = take_snapshot(host, [], [])
    assert max(lock.per_hold) == 10 and held > 0
    assert [j["id"] for j in snapshot["jobs"]] == list(whole)
    assert {j["id"]: j["waiting"] for j in snapshot["jobs"]} == {jid: j["waiting"] for jid, j in whole.items()}
    assert any(j["waiting"] for j in snapshot["jobs"])  # the queue is long enough for the policy to keep jobs waiting


def test_jobs_submitted_during_a_read_join_its_last_part(monkeypatch):
    host = _host(12)
    parts = iter(range(100))
    real = reading.copy_job

    def copy_and_submit(job):
        if next(parts) == 0:  # during the first part: a new job arrives (the lock is reentrant)
            host.core.submit({"workload": "tiny", "steps": 100, "gpus": 1}, refresh=False)
        return real(job)

    monkeypatch.setattr(reading, "copy_job", copy_and_submit)
    got = reading.read(host, part=5)
    assert [j.job_id for j in got.jobs] == sorted(host.core.jobs) and len(got.jobs) == 13
