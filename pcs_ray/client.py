"""``pcs_ray.client.Client``: the coordinator's calls over HTTP or through Ray, plus what a user needs to follow a job.

::

    client = Client()                      # the Ray cluster this process runs on (or address=...)
    job = client.submit("job.yaml")        # or a dict / JobFile
    print(job.id, job.predicted_completion, job.bound)   # absolute times (time.time() seconds)
    client.wait(job.id)

``Client`` is a :class:`~pcs_ray.contract.CoordinatorAPI`, so a Ray Tune sweep
(``pcs_ray.executors.tune.PCSTuner``) runs through it. The coordinator's refusals
arrive as the typed errors it raised (:class:`~pcs_ray.contract.UnknownJobError`,
:class:`~pcs_ray.contract.JobSpecError`, :class:`~pcs_ray.contract.ConfigError`,
all :class:`~pcs_ray.contract.CoordinatorError`). Every submission carries a
fresh id, so a call retried after the coordinator restarted never creates a
second job. Every call that changes something carries who makes it
(:class:`~pcs_ray.tenants.identity.Caller`: ``$PCS_RAY_USER`` or the OS login, and
``$PCS_RAY_TENANT``); once a tenants file is in force the coordinator refuses
what that caller may not do (:class:`~pcs_ray.contract.PermissionDeniedError`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pcs_ray.api.advert import API_ENV
from pcs_ray.api.ray_token import AUTH_MODE, prefer_token, refusal_message
from pcs_ray.contract import TERMINAL, CoordinatorError, Submitted, UnknownJobError
from pcs_ray.tenants.identity import Caller

if TYPE_CHECKING:
    from pcs_ray.jobs.jobfile import JobFile


@dataclass(frozen=True)
class JobHandle(Submitted):
    """What a submission returns: the job id, its predicted completion and the policy's worst-case bound."""

    client: "Client" = field(repr=False, compare=False)

    def status(self) -> dict:
        return self.client.job(self.id)

    def predict(self) -> dict:
        return self.client.predict(self.id)

    def wait(self, timeout: float | None = None) -> dict:
        return self.client.wait(self.id, timeout)

    def cancel(self) -> dict:
        return self.client.cancel(self.id)


@contextlib.contextmanager
def _stderr_to(path: Path):
    """Ray's C++ core logs each refused retry to fd 2 for 20 s; keep it, to read why, instead of showing it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def connect(address: str | None = None, namespace: str | None = None) -> None:
    """Join the Ray cluster at ``address`` (default ``$RAY_ADDRESS``, else the local one), with its token.

    Token mode follows :mod:`pcs_ray.api.ray_token`; a refusal becomes one ``ConnectionError`` line that says what to set.
    """
    prefer_token()  # before Ray reads the mode; refreshed below if Ray was imported already
    import ray

    if ray.is_initialized():
        return
    if os.environ.get(AUTH_MODE) == "token":
        try:  # Ray's own switch: sets the mode and refreshes its cached config (what `ray start` calls)
            from ray._private.authentication.authentication_token_setup import _enable_token_auth

            _enable_token_auth()
        except ImportError:  # pragma: no cover - a Ray without token auth
            pass
    target = address or os.environ.get("RAY_ADDRESS") or "auto"
    os.environ.setdefault("RAY_LOG_TO_DRIVER", "0")
    with tempfile.TemporaryDirectory(prefix="pcs-ray-connect-") as tmp:
        log = Path(tmp) / "stderr"
        try:
            with _stderr_to(log):
                ray.init(address=target, namespace=namespace, log_to_driver=False, logging_level="ERROR")
        except ConnectionError as e:
            raise ConnectionError(refusal_message(target, str(e), log.read_text(errors="replace"))) from None
        finally:
            captured = log.read_text(errors="replace")
        noise = [line for line in captured.splitlines() if "gcs_client.cc" not in line and line.strip()]
        if noise and ray.is_initialized():
            print("\n".join(noise), file=sys.stderr)


def actor_call(actor, method: str, *args):
    """Call the coordinator actor's ``method`` and wait; its refusal is raised as the typed error it raised."""
    import ray
    from ray.exceptions import RayTaskError

    try:
        return ray.get(getattr(actor, method).remote(*args))
    except RayTaskError as e:
        if isinstance(e.cause, CoordinatorError):
            raise e.cause from None  # the coordinator's refusal, as it raised it
        raise


def _on_ray() -> bool:
    """Whether this process already joined a Ray cluster (without importing Ray to ask)."""
    ray = sys.modules.get("ray")
    return ray is not None and getattr(ray, "is_initialized", lambda: False)()


def get_coordinator():
    """The running coordinator's actor (this process is on its Ray cluster); a :class:`CoordinatorError`
    (one line for the CLI) when there is none."""
    import ray

    from pcs_ray.api.actor_ref import ACTOR_NAME, NAMESPACE

    try:
        return ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    except ValueError:
        raise CoordinatorError("no pcs-ray coordinator is running on this Ray cluster (start one with `pcs-ray start`)") from None


class Client:
    """A connection to the coordinator of the Ray cluster at ``address`` (default: this process's).

    Outside the cluster it speaks HTTP to the coordinator's API, without joining Ray, where it finds one
    (:mod:`pcs_ray.api.discovery`: ``$PCS_RAY_API``, the advert in ``state_dir`` for that cluster, or the API's
    well-known ports on the cluster's host). A process already on the cluster (a runner, a Ray job that called
    ``ray.init``), or a ``coordinator`` handle, uses the actor; so does a client that finds no API, after telling
    ``on_fallback`` (one line). ``api``: the API's URL, instead of looking for it; it and ``$PCS_RAY_API`` are used
    even on the cluster: the caller chose them. ``identity``: who calls (default :meth:`Caller.from_env`).
    ``on_wait``: told (one line) when an HTTP call waits for an API that does not answer yet.
    """

    def __init__(self, address: str | None = None, coordinator=None, api: str | None = None,
                 identity: Caller | None = None, on_wait=None, state_dir: str | Path | None = None,
                 on_fallback=None) -> None:
        self.identity = identity if identity is not None else Caller.from_env()
        self.actor = self.http = None
        explicit = os.environ.get(API_ENV, "").strip()
        fallback_note = ""
        if coordinator is None and (api is not None or explicit or not _on_ray()):
            from pcs_ray.api import discovery

            found = None if api else discovery.discover(address, state_dir)
            if api is not None or found is not None:
                from pcs_ray.api.transport import HttpTransport

                self.http = HttpTransport(api or found.url, on_wait=on_wait,
                                          rediscover=None if api else discovery.rediscover(address, state_dir, found))
                return
            if not discovery.through_ray():
                fallback_note = discovery.not_found(address, state_dir)
        if coordinator is None:
            from pcs_ray.api.actor_ref import NAMESPACE

            connect(address, NAMESPACE)
            coordinator = get_coordinator()
            if on_fallback is not None and fallback_note:  # said once joined: a failed join is one error line
                on_fallback(fallback_note)
        self.actor = coordinator

    def _call(self, method: str, *args):
        if self.http is not None:
            return self.http.call(method, *args)
        return actor_call(self.actor, method, *args)

    def _caller(self, caller: dict | None) -> dict:
        return caller if caller is not None else self.identity.to_wire()

    def submit(self, spec: str | Path | dict | JobFile, submission_id: str | None = None,
               caller: dict | None = None) -> JobHandle:
        """Submit a YAML path, a dict or a :class:`JobFile`; returns at once with a prediction.
        Without its own ``user`` or ``tenant`` the job takes the caller's."""
        from pcs_ray.jobs.jobfile import JobFile, load_job, parse_job  # pydantic: only where a spec is read

        if isinstance(spec, (str, Path)):
            raw = load_job(spec).to_dict()
        elif isinstance(spec, JobFile):
            raw = spec.to_dict()
        else:
            raw = parse_job(spec).to_dict()  # shape errors here; cluster and workload checks at the coordinator
        reply = self._call("submit", raw, submission_id or uuid.uuid4().hex, self._caller(caller))
        return JobHandle(reply.id, reply.predicted_completion, reply.bound, self)

    def status(self) -> dict:
        """The whole cluster: every job with state, GPUs, progress and predictions."""
        return self._call("status")

    def job(self, job_id: int) -> dict:
        for job in self.status()["jobs"]:
            if job["id"] == int(job_id):
                return job
        raise UnknownJobError(f"no job with id {job_id}")

    def predict(self, job_id: int) -> dict:
        return self._call("predict", int(job_id))

    def cancel(self, job_id: int, caller: dict | None = None) -> dict:
        return self._call("cancel", int(job_id), self._caller(caller))

    def logs(self, job_id: int, attempt: int | None = None, offsets: dict | None = None,
             metrics: bool = False) -> dict:
        """What a user run's ranks printed, and with ``metrics`` its reports (``CoordinatorAPI.logs``)."""
        return self._call("logs", int(job_id), attempt, offsets, *([True] if metrics else []))

    def report_progress(self, job_id: int | str, step: int, step_time_s: float | None = None,
                        emulated: bool = False, overruns: int = 0) -> None:
        """Fire-and-forget, as runners report (over HTTP: answered once recorded)."""
        extra = {"overruns": int(overruns)} if overruns else {}
        if self.http is not None:
            self.http.call("report_progress", str(job_id), int(step), step_time_s, bool(emulated), int(overruns))
            return
        self.actor.report_progress.remote(str(job_id), int(step), step_time_s, emulated=emulated, **extra)

    # -- external executors (a Ray Tune sweep, see pcs_ray.executors.tune) ------------------
    def assignment(self, job_id: int) -> dict:
        """The GPUs (custom resource names) an ``executor: external`` job may use now."""
        return self._call("assignment", int(job_id))

    def external_ended(self, job_id: int, attempt: int, status: str, step: int, step_time_s: float | None = None) -> dict:
        return self._call("external_ended", int(job_id), int(attempt), status, int(step), step_time_s)

    def set_demand(self, job_id: int, gpus: int | None = None, steps: int | None = None) -> dict:
        return self._call("set_demand", int(job_id), gpus, steps)

    def external_failed(self, job_id: int, reason: str) -> dict:
        """End an external job at once: its executor gives it up (``CoordinatorAPI.external_failed``)."""
        return self._call("external_failed", int(job_id), str(reason))

    def renew_lease(self, job_id: int) -> dict:
        """Keep an external job's GPUs: its executor lives (``CoordinatorAPI.renew_lease``)."""
        return self._call("renew_lease", int(job_id))

    # -- the operator ------------------------------------------------------------------
    def config(self) -> dict:
        """The policy configuration in force."""
        return self._call("config")

    def set_config(self, policy: str, wfq: dict | None = None, caller: dict | None = None) -> dict:
        """Swap the running coordinator's policy (``pcs`` with a WFQ configuration, or a policy's name)."""
        return self._call("set_config", policy, wfq, self._caller(caller))

    def tenants(self) -> dict:
        """The tenants file in force and each tenant's jobs and GPUs."""
        return self._call("tenants")

    def set_tenants(self, tenants: dict, caller: dict | None = None) -> dict:
        """Apply a tenants file (a mapping as ``pcs_ray.tenants.spec`` reads it) to the running coordinator."""
        return self._call("set_tenants", dict(tenants), self._caller(caller))

    def dashboard_ticket(self, user: str | None = None, tenant: str | None = None) -> dict:
        """A one-time dashboard sign-in link for ``user`` and ``tenant`` (default: this client's identity);
        ``url`` is the whole link (joined to the API's address when the coordinator did not know its own)."""
        user = self.identity.user if user is None else user
        tenant = self.identity.tenant if tenant is None else tenant
        reply = dict(self._call("dashboard_ticket", user, tenant))
        if not reply.get("url") and self.http is not None:
            reply["url"] = self.http.url.rstrip("/") + reply["path"]
        return reply

    def wait(self, job_id: int, timeout: float | None = None, poll_s: float = 0.5) -> dict:
        """Block until the job is finished, cancelled or failed; returns its final status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in TERMINAL:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job['state']} after {timeout} s")
            time.sleep(poll_s)
