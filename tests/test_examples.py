"""Every file in ``examples/`` is exercised, and one that no rule below covers fails the suite.

Job files parse through the real validator with the real workload catalog and
fit the laptop cluster; cluster specs load and their topologies build a
placement; the sweep script imports and validates its grid; the READMEs name
only files that exist. No Ray and no torch: this runs in a second or two.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
from pathlib import Path

import pytest

from pcs_ray.cluster import load_cluster_spec
from pcs_ray.jobs.jobfile import load_job
from pcs_ray.workloads.catalog import registered_workloads

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
LAPTOP = EXAMPLES / "clusters" / "laptop.yaml"
# Each example file matches one of these patterns (paths relative to examples/); each pattern has its test below.
# user-code/tune_*.py and user-code/TUNE.md: tests/test_tune_example.py (runs them under Ray).
# user-code/train_mlp.py, ray_train_port.py: tests/test_user_code.py (run, stopped and resumed) and the job files below;
# user-code/driver.py: tests/test_live_jobsubmit.py (ray job submit --working-dir examples/user-code).
COVERED = ("jobs/*.yaml", "clusters/*.yaml", "clusters/*.topo", "sweep.py", "user-code/tune_*.py", "user-code/TUNE.md",
           "user-code/*.yaml", "user-code/train_mlp.py", "user-code/ray_train_port.py", "user-code/driver.py",
           "README.md")


def files(pattern: str) -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*") if p.is_file() and fnmatch.fnmatch(rel(p), pattern))


def rel(path: Path) -> str:
    return path.relative_to(EXAMPLES).as_posix()


def test_every_example_file_is_covered_by_a_test():
    stray = [rel(p) for p in EXAMPLES.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and not any(fnmatch.fnmatch(rel(p), c) for c in COVERED)]
    assert not stray, f"examples no test covers (add a rule to tests/test_examples.py): {stray}"
    assert all(files(c) for c in COVERED), "a rule that matches no example"


@pytest.mark.parametrize("path", files("jobs/*.yaml"), ids=rel)
def test_job_files_are_valid_and_fit_the_laptop_cluster(path):
    job = load_job(path, capacity=load_cluster_spec(LAPTOP).num_gpus, workloads=registered_workloads())
    assert job.name and job.executor == "runner"


@pytest.mark.parametrize("path", files("user-code/*.yaml"), ids=rel)
def test_user_code_job_files_name_code_that_exists_and_fit_the_laptop_cluster(path):
    job = load_job(path, capacity=load_cluster_spec(LAPTOP).num_gpus, workloads=registered_workloads())
    assert job.user_code and job.name and Path(job.working_dir) == path.parent


def test_the_job_examples_show_one_gpu_elastic_and_rigid_multi_gpu_jobs():
    jobs = [load_job(p) for p in files("jobs/*.yaml")]
    assert any(j.gpus == 1 for j in jobs)
    assert any(j.fewest_gpus < j.gpus for j in jobs)
    assert any(j.fewest_gpus == j.gpus > 1 for j in jobs)


@pytest.mark.parametrize("path", files("clusters/*.yaml"), ids=rel)
def test_cluster_specs_load_and_their_topologies_build_a_placement(path):
    from pcs_ray.placement import create_placement

    spec = load_cluster_spec(path)
    placement = create_placement("combined", spec)
    assert all(t is not None for t in placement.topologies), "every example node declares its links"


@pytest.mark.parametrize("path", files("clusters/*.topo"), ids=rel)
def test_topology_files_are_used_by_a_cluster_spec(path):
    used = {n.topology for spec in files("clusters/*.yaml") for n in load_cluster_spec(spec).nodes}
    assert str(path.resolve()) in used


def _sweep():
    spec = importlib.util.spec_from_file_location("examples_sweep", EXAMPLES / "sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sweep_script_builds_a_valid_grid():
    sweep = _sweep()
    points = sweep.grid_params(sweep.parse_args([]))
    assert len(points) == 6 and all(set(p) == {"lr", "momentum", "num_samples"} for p in points)
    for params in points:
        registered_workloads().check("tiny_cnn", params)


@pytest.mark.parametrize("argv, message", [
    (["--lr", "0.1", "100"], "lr: 100.0 is outside the allowed range 1e-06 to 10 for tiny_cnn"),
    (["--workload", "resnet"], "--workload: unknown workload 'resnet'"),
])
def test_the_sweep_script_rejects_a_bad_grid_before_connecting(argv, message, capsys):
    assert _sweep().main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("readme", [EXAMPLES / "README.md", ROOT / "README.md"], ids=["examples", "root"])
def test_the_readmes_name_only_examples_that_exist(readme):
    named = set(re.findall(r"examples/[\w./-]+\.(?:yaml|py|topo|md)", readme.read_text()))
    if readme.parent == EXAMPLES:  # its own links are relative: jobs/..., clusters/..., sweep.py
        named |= {f"examples/{m}" for m in re.findall(r"\((\w[\w./-]*\.(?:yaml|py|topo))\)", readme.read_text())}
        assert {f"examples/{rel(p)}" for c in COVERED[:-1] for p in files(c)} <= named, "every example is listed"
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"{readme.name} names examples that do not exist: {missing}"
