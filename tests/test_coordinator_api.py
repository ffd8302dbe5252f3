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
    assert len(CALLS) == 11
    for name in CALLS:
        want = list(inspect.signature(getattr(CoordinatorAPI, name)).parameters)
        got = list(inspect.signature(getattr(host, name)).parameters)
        assert got == want, f"{host.__name__}.{name}{got} != CoordinatorAPI.{name}{want}"


def test_terminal_states_are_defined_once_and_views_carry_plain_strings():
    assert TERMINAL == {JobStatus.FINISHED, JobStatus.CANCELLED, JobStatus.FAILED}
    assert [s for s in JobStatus if s.done] == sorted(TERMINAL, key=list(JobStatus).index)
    assert {s for s in JobStatus if s.holds_gpus} == {JobStatus.RUNNING, JobStatus.STOPPING}
    assert "finished" in TERMINAL and JobStatus("stopping").holds_gpus


def test_refusals_are_coordinator_errors_and_value_errors():
    from pcs_ray.contract import ConfigError, JobSpecError, UnknownJobError
    from pcs_ray.jobfile import JobSpecError as FromJobfile

    assert FromJobfile is JobSpecError  # one class, wherever it is imported from
    for error in (ConfigError, JobSpecError, UnknownJobError):
        assert issubclass(error, CoordinatorError) and issubclass(error, ValueError)
