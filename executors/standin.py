"""Stand-in runners for load tests: start, report progress, checkpoint and stop like real ones, without training.

One async Ray actor plays every run (a real runner is a process with torch,
~0.8 GB each; 256 of them do not fit here). ``launch`` has the signature of
``pcs_ray.executors.launch.launch`` and returns a handle with ``done``,
``request_stop`` and ``kill``; a run sleeps ``STEP_S`` per step, reports
progress to the coordinator at most every ``request.report_interval_s``,
keeps a checkpoint (the step, in memory) every ``request.checkpoint_every``
steps and on a stop, and resumes from it. Pass
``launcher="pcs_ray.executors.standin:launch"`` in the coordinator's config.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import ray

from pcs_ray.contract import RunOutcome, RunRequest

STEP_S = 0.05
NAME = "pcs-ray-standin"


@ray.remote(num_cpus=0, max_concurrency=100_000)
class StandIn:
    def __init__(self) -> None:
        self.checkpoints: dict[str, int] = {}
        self.stops: dict[str, str] = {}

    async def run(self, request: RunRequest) -> RunOutcome:
        jid, key = request.job_id, f"{request.job_id}:{request.attempt}"
        start = step = self.checkpoints.get(jid, 0)
        last_report = 0.0
        while step < request.total_steps:
            await asyncio.sleep(STEP_S)
            step += 1
            if request.checkpoint_every and step % request.checkpoint_every == 0:
                self.checkpoints[jid] = step
            now = time.monotonic()
            if request.reporter is not None and (now - last_report >= request.report_interval_s or step == start + 1):
                request.reporter.report_progress.remote(jid, step, STEP_S)
                last_report = now
            why = self.stops.pop(key, None)
            if why == "stop":
                self.checkpoints[jid] = step
                return RunOutcome(jid, "preempted", step, STEP_S, start_step=start, gpus=request.gpus)
            if why == "kill":
                return RunOutcome(jid, "failed", self.checkpoints.get(jid, 0), None, error="killed", start_step=start)
        self.checkpoints[jid] = step
        return RunOutcome(jid, "finished", step, STEP_S, start_step=start, gpus=request.gpus)

    def signal(self, key: str, why: str) -> None:
        self.stops[key] = why


@dataclass
class StandInHandle:
    request: RunRequest
    actor: object
    done: ray.ObjectRef

    @property
    def job_id(self) -> str:
        return self.request.job_id

    def request_stop(self) -> None:
        self.actor.signal.remote(f"{self.request.job_id}:{self.request.attempt}", "stop")

    def kill(self) -> None:
        self.actor.signal.remote(f"{self.request.job_id}:{self.request.attempt}", "kill")


def launch(request: RunRequest, after=None) -> StandInHandle:
    actor = StandIn.options(name=NAME, namespace="pcs-ray", lifetime="detached", get_if_exists=True).remote()
    return StandInHandle(request, actor, actor.run.remote(request))
