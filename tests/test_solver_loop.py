"""From a coordinator's recorded jobs to its next policy: history -> solve -> pick -> config set.

One in-process coordinator (``LocalCoordinator``, external jobs so no runner
is needed) runs a few jobs and writes their history into its state folder;
``pcs-ray solve --history STATE_DIR`` searches on them, ``--pick --set``
chooses a configuration and ``pcs-ray config set`` applies it to that same
coordinator (its client is the in-process coordinator instead of a Ray actor).
"""

from __future__ import annotations

import json

import pytest

from pcs_ray.cli import run
from pcs_ray.coordinator.local import LocalCoordinator
from pcs_ray.policies import WFQConfig
from pcs_ray.workloads.history import read_history_records
from builders import Clock, local_start

GPUS = 4


def run_jobs(link: LocalCoordinator, clock: Clock, steps: list[int]) -> None:
    """Submit the jobs a second apart, then finish whatever runs, earliest-due first, until none is left."""
    ids = []
    for i, n in enumerate(steps):
        clock.t += 1.0
        ids.append(link.submit({"workload": "tiny_cnn", "steps": n, "gpus": 1 + i % 2, "step_time": 1.0,
                                "executor": "external"}).id)
    left = set(ids)
    while left:
        running = [link.assignment(j) for j in sorted(left)]
        running = [a for a in running if a["state"] == "running"]
        assert running, "the coordinator left GPUs idle with jobs waiting"
        first = min(running, key=lambda a: a["steps"])
        clock.t += float(first["steps"])
        link.external_ended(first["id"], first["attempt"], "finished", step=first["steps"], step_time_s=1.0)
        left.discard(first["id"])


def test_history_solve_pick_and_config_set_on_the_coordinator(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PCS_RAY_WFQ_CONFIG", str(tmp_path / "solver" / "wfq_config.json"))
    state = tmp_path / "state"
    clock = Clock()
    link = local_start(state, gpus=GPUS, clock=clock)
    steps = [300, 20, 50, 900, 10, 120, 40, 600, 15, 200]
    run_jobs(link, clock, steps)
    records = read_history_records(state)  # the state folder, as `solve --history` is given it
    assert sorted(r.job_id for r in records) == sorted(link.core.jobs)
    # 1 s a step on its GPUs: a step is iteration_time GPU-seconds at one GPU, 1 s on one GPU and at most 2 s
    # on two (the speed model's scaling, measured or declared, is never super-linear)
    by_steps = sorted(zip(steps, (1 + i % 2 for i in range(len(steps)))))
    for record, (n, gpus) in zip(sorted(records, key=lambda r: r.service / r.iteration_time), by_steps):
        assert record.service == pytest.approx(n * record.iteration_time)
        assert 1.0 - 1e-9 <= record.iteration_time <= gpus + 1e-9

    front = tmp_path / "front.json"
    solve = ["solve", "--history", str(state), "--gpus", str(GPUS), "--serial", "--space", "cuts",
             "--max-queues", "3", "--generations", "2", "--population", "6", "--samples", "1",
             "--test-samples", "1", "--num-jobs", "20", "--out", str(front)]
    assert run(solve) == 0, capsys.readouterr().err
    written = json.loads(front.read_text())
    assert written["front"] and written["problem"]["space"]["kind"] == "cuts"
    assert written["problem"]["workload"] | {"label": str(state), "jobs": len(steps)} == written["problem"]["workload"]

    # a configuration with several queues (FIFO's would match a coordinator that ignored the thresholds)
    chosen_index = next(p["index"] for p in written["front"] if len(p["config"]["class_thresholds"]) > 1)
    assert run(["solve", "--front", str(front), "--pick", str(chosen_index), "--set"]) == 0
    chosen = WFQConfig.from_dict(written["front"][chosen_index]["config"])
    capsys.readouterr()

    monkeypatch.setattr("pcs_ray.commands.config.coordinator_client", lambda *where: link)
    assert link.config()["policy"] == {"policy": "fifo"}
    assert run(["config", "set", "--json"]) == 0
    reply = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert reply["source"] == "set" and reply["since"] == clock.t
    in_force = link.config()["policy"]
    assert in_force["policy"] == "pcs"
    assert in_force["class_thresholds"] == chosen.to_dict()["class_thresholds"]
    assert in_force["class_rates"] == pytest.approx(list(chosen.normalised_weights))
    link.core.journal.close()
