"""One protocol for every way to reach the coordinator, and one definition of job states."""

from __future__ import annotations

import inspect

import pytest

from pcs_ray.client import Client
from pcs_ray.contract import TERMINAL, CoordinatorAPI, CoordinatorError, JobStatus
from pcs_ray.coordinator.actor import CoordinatorService
from pcs_ray.coordinator.local import LocalCoordinator

CALLS = [name for name, member in vars(CoordinatorAPI).items() if not name.startswith("_") and callable(member)]


@pytest.mark.parametrize("host", [LocalCoordinator, CoordinatorService, Client], ids=lambda c: c.__name__)
def test_every_host_answers_every_call_with_the_same_parameters(host):
    assert len(CALLS) == 16
    for name in CALLS:
        want = list(inspect.signature(getattr(CoordinatorAPI, name)).parameters)
        got = list(inspect.signature(getattr(host, name)).parameters)
        assert got == want, f"{host.__name__}.{name}{got} != CoordinatorAPI.{name}{want}"


def test_terminal_states_are_defined_once_and_views_carry_plain_strings():
    assert TERMINAL == {JobStatus.FINISHED, JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.TIMED_OUT}
    assert [s for s in JobStatus if s.done] == sorted(TERMINAL, key=list(JobStatus).index)
    assert {s for s in JobStatus if s.holds_gpus} == {JobStatus.RUNNING, JobStatus.STOPPING}
    assert "finished" in TERMINAL and JobStatus("stopping").holds_gpus


def test_refusals_are_coordinator_errors_and_value_errors():
    from pcs_ray.contract import ConfigError, JobSpecError, UnknownJobError
    from pcs_ray.jobs.jobfile import JobSpecError as FromJobfile

    assert FromJobfile is JobSpecError  # one class, wherever it is imported from
    for error in (ConfigError, JobSpecError, UnknownJobError):
        assert issubclass(error, CoordinatorError) and issubclass(error, ValueError)


# -- the same calls over HTTP -----------------------------------------------------------------
@pytest.fixture(scope="module")
def over_http(tmp_path_factory):
    """One in-process coordinator on a fixed clock, and a ``Client`` that reaches it only over HTTP."""
    from api_helpers import TOKEN, local_host, served
    from builders import Clock

    host = local_host(tmp_path_factory.mktemp("api"), clock=Clock())
    with served(host) as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_TOKEN", TOKEN)
        client = Client(api=server.url)
        assert client.http is not None and client.actor is None  # no Ray on this path
        yield host, client


def _wire(value) -> str:
    from pcs_ray.api.wire import encode

    return encode(value).decode()


def test_the_http_client_answers_every_call_as_the_coordinator_does(over_http):
    host, client = over_http
    spec = {"workload": "tiny_cnn", "steps": 50, "name": "a"}
    job = client.submit(spec, "submission-1")
    assert (job.id, job.predicted_completion, job.bound) == tuple(host.predict(job.id)[k] for k in
                                                                 ("id", "predicted_completion", "bound"))
    assert client.submit(spec, "submission-1").id == job.id  # a retried submission lands once
    assert [j["id"] for j in host.status()["jobs"]].count(job.id) == 1
    for call, args in (("status", ()), ("predict", (job.id,)), ("config", ())):
        assert _wire(getattr(client, call)(*args)) == _wire(getattr(host, call)(*args)), call

    client.report_progress(job.id, 7, 0.25)
    assert host.core.jobs[job.id].steps == 7

    ext = client.submit({"workload": "tiny_cnn", "steps": 40, "gpus": 2, "executor": "external"}, "submission-2")
    assert _wire(client.assignment(ext.id)) == _wire(host.assignment(ext.id))
    assert _wire(client.set_demand(ext.id, 1, 30)) == _wire(host.assignment(ext.id))
    attempt = host.core.jobs[ext.id].attempt
    assert _wire(client.external_ended(ext.id, attempt, "finished", 30, 0.5)) == _wire(host.assignment(ext.id))
    assert host.core.jobs[ext.id].state == JobStatus.FINISHED

    assert client.cancel(job.id)["state"] == host.core.job_view(job.id)["state"]
    assert host.core.jobs[job.id].state in (JobStatus.CANCELLED, JobStatus.STOPPING)
    assert client.set_config("fifo")["policy"]["policy"] == "fifo" == host.config()["policy"]["policy"]


@pytest.mark.parametrize("call, args", [
    ("predict", (999,)), ("cancel", (999,)), ("assignment", (999,)), ("submit", ({"workload": "nope", "steps": 1},)),
    ("submit", ({"workload": "tiny_cnn", "steps": -1},)), ("set_config", ("nonsense",)), ("set_config", ("pcs",)),
])
def test_typed_refusals_cross_http_as_themselves(over_http, call, args):
    host, client = over_http
    with pytest.raises(CoordinatorError) as direct:
        getattr(host, call)(*args)
    with pytest.raises(CoordinatorError) as remote:
        getattr(client, call)(*args) if call != "submit" else client._call("submit", *args, None)
    assert type(remote.value) is type(direct.value) and type(direct.value) is not CoordinatorError
    assert str(remote.value) == str(direct.value) and "\n" not in str(remote.value)
