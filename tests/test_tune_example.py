"""Ray's own ASHA example (``examples/user-code/tune_asha.py``) runs under pcs-ray with only its tuner lines changed.

The first test holds the port to its claim: the file, less its licence
header, differs from the copy of the example that ships in the installed Ray
by exactly the diff ``examples/user-code/TUNE.md`` shows. The second runs the
script itself as ``__main__`` (``--smoke-test``: trials of one iteration) on
the session's local Ray, its ``Client()`` answered by an in-process
coordinator core, as the other Tune tests set it up; the test asks for 4 of
the example's 20 samples (each trial is a new Ray worker, seconds apiece).
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "user-code" / "tune_asha.py"
TUNE_MD = ROOT / "examples" / "user-code" / "TUNE.md"
ORIGINAL = "tune/examples/async_hyperband_example.py"
SAMPLES = 4


def _ported_body() -> list[str]:
    """The example without its licence header (the comment lines right after the shebang)."""
    lines = EXAMPLE.read_text().splitlines(keepends=True)
    end = 1
    while lines[end].startswith("#"):
        end += 1
    return lines[:1] + lines[end:]


def test_the_port_differs_from_rays_example_only_by_the_diff_tune_md_shows():
    original = Path(importlib.util.find_spec("ray").origin).parent / ORIGINAL
    header = EXAMPLE.read_text().splitlines()[1:8]
    assert any("Apache License, Version 2.0" in h for h in header) and any(ORIGINAL in h for h in header)
    diff = list(difflib.unified_diff(original.read_text().splitlines(keepends=True), _ported_body()))[2:]
    [shown] = re.findall(r"```diff\n(.*?)```", TUNE_MD.read_text(), flags=re.S)
    assert "".join(diff) == shown
    changed = [line[1:].strip() for line in diff if line[:1] in "+-" and line[1:].strip()]
    assert changed == ["from pcs_ray.executors.tune import PCSTuner", "from pcs_ray.client import Client",
                       "tuner = tune.Tuner(", "tuner = PCSTuner(",
                       "client=Client(), iterations=1 if args.smoke_test else 100,"]


def test_rays_asha_example_runs_under_pcs_ray(ray_local, tmp_path, monkeypatch, capsys):
    import ray.train.constants
    from ray import tune

    import pcs_ray.client
    from pcs_ray.coordinator.local import LocalCoordinator
    from builders import coordinator

    core = coordinator(checkpoint_root=tmp_path / "ckpt", workloads=("tiny_cnn",))
    link = LocalCoordinator(core)
    monkeypatch.setattr(pcs_ray.client, "Client", lambda *a, **k: link)
    monkeypatch.setattr(ray.train.constants, "DEFAULT_STORAGE_PATH", str(tmp_path / "ray_results"))
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--smoke-test"])
    config = tune.TuneConfig
    monkeypatch.setattr(tune, "TuneConfig", lambda **kw: config(**{**kw, "num_samples": SAMPLES}))

    ran = runpy.run_path(str(EXAMPLE), run_name="__main__")
    results, sched = ran["results"], ran["tuner"].scheduler
    assert not results.errors and len(results) == SAMPLES
    assert all(r.metrics["training_iteration"] == 1 and "mean_loss" in r.metrics for r in results)
    assert "Best hyperparameters found" in capsys.readouterr().out
    # Every trial ran on GPUs the coordinator gave the sweep, which it then finished as one job.
    assert len(sched.log.placements) == SAMPLES
    assert {g for ps in sched.log.placements.values() for gs in ps for g in gs} <= {f"node0_gpu{i}" for i in range(4)}
    sweep = core.jobs[ran["tuner"].job_id]
    assert sweep.state == "finished" and sweep.steps == SAMPLES and sweep.spec.name == "asynchyperband_test"
