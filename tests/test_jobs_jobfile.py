"""Job specs: valid files load, every kind of mistake is one line naming the field."""

from __future__ import annotations

import pytest

from pcs_ray.jobs.jobfile import JobSpecError, load_job, parse_job
from pcs_ray.workloads.catalog import registered_workloads


def write(tmp_path, text, name="job.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_full_spec_loads(tmp_path):
    job = load_job(write(tmp_path, """
name: resnet-a
workload: tiny_cnn
steps: 200
gpus: 4
min_gpus: 2
class: C
step_time: 0.5
checkpoint_every: 50
params: {batch_size: 16, seed: 3}
"""), capacity=8, workloads=registered_workloads())
    assert (job.workload, job.steps, job.gpus, job.fewest_gpus, job.job_class) == ("tiny_cnn", 200, 4, 2, "C")
    assert job.to_dict()["class"] == "C" and job.params == {"batch_size": 16, "seed": 3}


def test_defaults_make_a_rigid_one_gpu_class_a_job():
    job = parse_job({"workload": "tiny_cnn", "steps": 5})
    assert (job.gpus, job.fewest_gpus, job.job_class, job.checkpoint_every) == (1, 1, "A", 0)


@pytest.mark.parametrize(
    "text, message",
    [
        ("workload: nope\nsteps: 5\n", "workload: unknown workload 'nope'; valid workloads: "),
        ("workload: tiny_cnn\nsteps: 5\ngpus: 9\n", "gpus: the job needs at least 9 GPUs; the cluster has 8"),
        ("workload: tiny_cnn\nsteps: -5\n", "steps: Input should be greater than 0"),
        ("workload: tiny_cnn\nsteps: 5\ngpus: -1\n", "gpus: Input should be greater than or equal to 1"),
        ("workload: tiny_cnn\nsteps: 5\nstep_time: -0.1\n", "step_time: Input should be greater than 0"),
        ("workload: tiny_cnn\nsteps: 5\ncolour: red\n", "colour: Extra inputs are not permitted"),
        ("workload: tiny_cnn\nsteps: 5\nclass: E\n", "class: Input should be 'A', 'B', 'C' or 'D'"),
        ("workload: tiny_cnn\nsteps: 5\nparams: {bogus: 1}\n", "params: workload 'tiny_cnn': unknown parameter(s) bogus"),
        ("steps: 5\n", "workload: missing; name a built-in workload or your own entrypoint"),
        ("workload: [tiny\n", "not valid YAML at line"),
        ("", "empty job spec"),
        ("- 1\n- 2\n", "expected a mapping"),
    ],
)
def test_mistakes_are_one_line_errors_naming_the_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(JobSpecError) as info:
        load_job(path, capacity=8, workloads=registered_workloads())
    text = str(info.value)
    assert "\n" not in text and message in text and text.startswith(str(path))


def test_missing_file():
    with pytest.raises(JobSpecError, match="no such job spec file"):
        load_job("/nonexistent/job.yaml")


def test_the_workload_registry_is_read():
    names = registered_workloads()
    assert names is not None and "tiny_cnn" in names and "resnet18" in names


# -- bounds: each one accepts its edge and rejects just past it, in one line naming field, value and range ---------

JOB_BOUNDS = {  # field: (lowest accepted, highest accepted, just below, just above)
    "steps": (1, 10_000_000, 0, 10_000_001),
    "gpus": (1, 1024, 0, 1025),
    "min_gpus": (1, 1024, 0, 1025),
    "checkpoint_every": (0, 10_000_000, -1, 10_000_001),
    "step_time": (1e-9, 3600, 0, 3600.001),
}


def _job(**fields):
    base = {"workload": "tiny_cnn", "steps": 10, "gpus": 1024 if fields.get("min_gpus") else 1}
    return parse_job({**base, **fields}, "job.yaml", workloads=registered_workloads())


@pytest.mark.parametrize("field", sorted(JOB_BOUNDS))
def test_job_field_bounds(field):
    low, high, below, above = JOB_BOUNDS[field]
    assert getattr(_job(**{field: low}), field) == low and getattr(_job(**{field: high}), field) == high
    for bad in (below, above):
        with pytest.raises(JobSpecError) as info:
            _job(**{field: bad})
        text = str(info.value)
        assert text.startswith(f"job.yaml: {field}: ") and f"got {bad}" in text and "\n" not in text
        assert f"allowed {'0 (exclusive)' if field == 'step_time' else low} to {high}" in text


def _edges(param):
    """(accepted edges, rejected values just outside) of a numeric parameter declaration."""
    if param.kind is int:
        return (param.low, param.high), (param.low - 1, param.high + 1)
    below = param.low - 1e-9 if param.low == 0 else param.low * (1 - 1e-6)
    return (param.low, param.high), (below, param.high * (1 + 1e-6))


NUMERIC = [(w, name) for w, spec in registered_workloads().items() for name, p in spec.params.items() if p.kind is not str]


@pytest.mark.parametrize("workload, name", NUMERIC, ids=[f"{w}.{n}" for w, n in NUMERIC])
def test_every_numeric_param_is_bounded(workload, name):
    param = registered_workloads()[workload].params[name]
    accepted, rejected = _edges(param)
    for value in accepted:
        assert _job(workload=workload, params={name: value}).params == {name: value}
    for value in rejected:
        with pytest.raises(JobSpecError) as info:
            _job(workload=workload, params={name: value})
        text = str(info.value)
        assert text.startswith(f"job.yaml: params.{name}: {value!r} is outside the allowed range ") and "\n" not in text
        assert param.allowed() in text and workload in text


def test_the_issue_example_is_rejected_at_submission():
    with pytest.raises(JobSpecError, match=r"^job.yaml: params.num_samples: 100000000000 is outside the allowed "
                                           r"range 1 to 10000000 \(or null\) for tiny_cnn$"):
        _job(params={"num_samples": 100000000000})


@pytest.mark.parametrize(
    "params, message",
    [
        ({"lr": "fast"}, "params.lr: 'fast' is not a number; allowed 1e-06 to 10"),
        ({"lr": float("nan")}, "params.lr: nan is not a number"),
        ({"batch_size": 16.5}, "params.batch_size: 16.5 is not a whole number"),
        ({"batch_size": True}, "params.batch_size: True is not a whole number"),
        ({"optimizer": "lbfgs"}, "params.optimizer: 'lbfgs' is not one of 'sgd' or 'adam'"),
        ({"data_root": 5}, "params.data_root: 5 is not text"),
        ({"seq_len": 64}, "params: workload 'tiny_cnn': unknown parameter(s) seq_len"),
    ],
)
def test_param_types_are_checked(params, message):
    with pytest.raises(JobSpecError) as info:
        _job(params=params)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_numbers_yaml_reads_as_text_are_accepted(tmp_path):
    """YAML 1.1 reads ``1e-3`` as a string; the catalog takes it as the number it spells."""
    job = load_job(write(tmp_path, "workload: tiny_cnn\nsteps: 5\nparams: {lr: 1e-3, num_samples: 1e4}\n"),
                   workloads=registered_workloads())
    resolved = registered_workloads()["tiny_cnn"].resolve(job.params)
    assert resolved["lr"] == 0.001 and resolved["num_samples"] == 10_000 and isinstance(resolved["num_samples"], int)


def test_every_default_is_within_its_own_bounds():
    for spec in registered_workloads().values():
        defaults = {name: p.default for name, p in spec.params.items()}
        assert spec.resolve(defaults) == defaults


def test_names_only_checks_names_and_external_jobs_skip_the_catalog():
    assert parse_job({"workload": "mine", "steps": 1, "params": {"anything": 1}}, workloads=("mine",)).workload == "mine"
    sweep = parse_job({"workload": "sweep", "steps": 1, "executor": "external", "params": {"lr": 99}},
                      workloads=registered_workloads())
    assert sweep.params == {"lr": 99}


def test_validation_needs_no_torch():
    import subprocess
    import sys

    code = "import sys, pcs_ray.jobs.jobfile, pcs_ray.workloads.catalog; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_readme_tables_are_generated_from_the_declarations():
    from pathlib import Path

    from pcs_ray.jobs.jobfile import fields_table
    from pcs_ray.workloads.catalog import params_table

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert fields_table() in readme and params_table() in readme
