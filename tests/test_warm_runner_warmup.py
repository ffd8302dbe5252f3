"""A warm runner's first run waits for the runner's background imports and CUDA warm-up.

Two threads importing torch's modules at once can get a partially initialized module from Python's
import-deadlock breaker; on an H200 every built-in run on a fresh warm runner failed so. These tests
hold the background warm-up and check that no run begins before it ends, whatever it raised.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from pcs_ray.contract import GPUSlot, RunOutcome
from pcs_ray.executors import pool
from pcs_ray.workloads import models


class HeldImports:
    """A workload whose import list blocks until released (or raises, with ``fail``)."""

    def __init__(self, fail: bool = False):
        self.release, self.entered, self.fail = threading.Event(), threading.Event(), fail

    @property
    def imports(self):
        self.entered.set()
        self.release.wait(30)
        if self.fail:
            raise RuntimeError("warm-up broke")
        return ()


@pytest.fixture
def runner_with(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(pool.gc, "freeze", lambda: None)
    began: list[bool] = []

    def make(workload: HeldImports) -> pool.WarmRunner:
        monkeypatch.setattr(models, "WORKLOADS", {"held": workload})
        runner = pool.WarmRunner(GPUSlot("n0", 0))

        def train_rank(request, should_stop, rank, world_size, master, timings, **kw):
            began.append(runner._warm.is_set())
            return RunOutcome(job_id=request.job_id, status="finished", step=1)

        monkeypatch.setattr(pool, "train_rank", train_rank)
        return runner

    return make, began


def _run_in_thread(runner: pool.WarmRunner) -> tuple[threading.Thread, list]:
    out: list = []
    request = SimpleNamespace(job_id="j1", attempt=0, reporter=None)
    thread = threading.Thread(target=lambda: out.append(runner.run(request, 0, 1, None, [], 0.0)), daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("fail", [False, True], ids=["warm-up-ends", "warm-up-raises"])
def test_first_run_waits_for_background_warmup(runner_with, fail):
    make, began = runner_with
    workload = HeldImports(fail=fail)
    runner = make(workload)
    assert workload.entered.wait(30), "the background warm-up did not start"
    thread, out = _run_in_thread(runner)
    thread.join(0.5)
    assert thread.is_alive() and began == [], "a run began while the warm-up was importing"
    workload.release.set()
    thread.join(30)
    assert not thread.is_alive()
    assert began == [True]
    assert out[0].status == "finished" and out[0].runner == "warm"
