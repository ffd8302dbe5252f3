"""What a job file cannot do: read outside the dataset roots, choose where checkpoints go, exceed the bounds;
and what product code never does: unpickle, load a checkpoint without ``weights_only``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pcs_ray.contract import JobSpecError, StartRun
from pcs_ray.jobs.jobfile import parse_job
from pcs_ray.workloads.catalog import registered_workloads
from builders import Clock, coordinator

ROOT = Path(__file__).resolve().parent.parent


def _parse(params, **kw):
    return parse_job({"workload": "tiny_cnn", "steps": 10, "params": params, **kw}, "job.yaml",
                     workloads=registered_workloads())


def test_data_root_must_lie_inside_a_configured_dataset_root(tmp_path, monkeypatch):
    data = tmp_path / "datasets"
    (data / "cifar").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (data / "escape").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("PCS_RAY_DATASETS", str(data))
    assert _parse({"data_root": str(data / "cifar")}).params["data_root"] == str(data / "cifar")
    for bad in ("/etc", str(data / ".." / "elsewhere"), str(data / "escape"), "~", ""):
        with pytest.raises(JobSpecError, match="outside the dataset roots") as refused:
            _parse({"data_root": bad})
        assert "\n" not in str(refused.value) and str(refused.value).startswith("job.yaml: params.data_root")
    monkeypatch.delenv("PCS_RAY_DATASETS")
    with pytest.raises(JobSpecError, match="none configured"):
        _parse({"data_root": str(data / "cifar")})


def test_a_job_file_cannot_choose_where_its_checkpoints_go(tmp_path):
    core = coordinator(checkpoint_root=tmp_path / "ckpt", clock=Clock(0.0), workloads=registered_workloads())
    jid, actions = core.submit({"workload": "tiny_cnn", "steps": 10, "name": "../../../etc/x"})
    start = next(a for a in actions if isinstance(a, StartRun))
    assert Path(start.request.checkpoint_dir) == tmp_path / "ckpt" / str(jid)
    with pytest.raises(JobSpecError):
        core.submit({"workload": "tiny_cnn", "steps": 10, "checkpoint_dir": "/etc"})  # not a field: refused


@pytest.mark.parametrize("spec, field", [
    ({"steps": 10**12}, "steps"), ({"steps": 10, "gpus": 10**6}, "gpus"),
    ({"steps": 10, "params": {"batch_size": 10**9}}, "batch_size"), ({"steps": 10, "params": {"threads": 10**4}}, "threads"),
    ({"steps": 10, "params": {"num_samples": 10**12}}, "num_samples"), ({"steps": 10, "step_time": 1e9}, "step_time"),
])
def test_parameters_are_bounded_at_submission(spec, field):
    with pytest.raises(JobSpecError, match=field) as refused:
        parse_job({"workload": "tiny_cnn", **spec}, "job.yaml", workloads=registered_workloads())
    assert "\n" not in str(refused.value)


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            base = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
            yield node, base, name


#: The only places a pickle module may appear: a function the user sends by value is pickled in the user's
#: own driver (``Trainer``) and unpickled only inside that user's own run process, which runs their code anyway.
#: The coordinator, the runners' shared processes and everything else never touch it.
USER_PICKLES = {("pcs_ray/train/trainer/__init__.py", "cloudpickle"), ("executors/user_run.py", "cloudpickle")}
#: And one more: ``simulate --workers`` pickles its own setup (jobs, policy, placement) in this process, before the
#: run changes it, and hands the bytes to the worker processes it starts, as multiprocessing does with every call;
#: nothing it unpickles was read from outside.
OWN_PICKLES = {("pcs_ray/sim/run.py", "pickle")}


def test_product_code_never_unpickles_and_loads_checkpoints_weights_only():
    offenders = []
    for pkg in ("pcs_ray", "executors", "solver", "workloads"):
        for path in (ROOT / pkg).rglob("*.py"):
            where = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                    found = [n for n in names if n in ("pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve")]
                    if any((where, n) not in USER_PICKLES | OWN_PICKLES for n in found):
                        offenders.append(f"{path}:{node.lineno} imports a pickle module")
            for node, base, name in _calls(tree):
                if base == "torch" and name == "load":
                    kw = {k.arg: k.value for k in node.keywords}
                    if not (isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True):
                        offenders.append(f"{path}:{node.lineno} torch.load without weights_only=True")
                if base == "yaml" and name in ("load", "unsafe_load", "full_load"):
                    offenders.append(f"{path}:{node.lineno} yaml.{name}")
                if base == "np" and name == "load" and not any(k.arg == "allow_pickle" for k in node.keywords):
                    pass  # numpy refuses pickles by default
    assert offenders == []


def test_a_cluster_spec_cannot_ask_for_unbounded_memory(tmp_path):
    from pcs_ray.cluster import ClusterSpecError, load_cluster_spec

    spec = tmp_path / "huge.yaml"
    spec.write_text("nodes:\n  - {name: n0, gpus: 1000000000000}\n")  # found by the fuzz suite: it exhausted memory
    with pytest.raises(ClusterSpecError, match="1 to 65536") as refused:
        load_cluster_spec(spec)
    assert "\n" not in str(refused.value)
