"""Job specs: valid files load, every kind of mistake is one line naming the field."""

from __future__ import annotations

import pytest

from pcs_ray.jobfile import JobSpecError, load_job, parse_job
from workloads.catalog import registered_workloads


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
        ("steps: 5\n", "workload: Field required"),
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
