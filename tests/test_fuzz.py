"""Fuzzing every input surface: each case ends in a result or one typed, one-line error — never a traceback.

Surfaces: job files (as dicts through the parser and an in-process
coordinator, and as YAML text), cluster specs, WFQ configurations, traces in
the three formats, replay job lists, CLI arguments, and the coordinator's HTTP
API (requests on loopback: any method, path, token, headers and body, every
one answered below 500, and the server still serving). The coordinator that
takes the fuzzed submissions must answer ``status`` after every case.

The default run is small (``PCS_RAY_FUZZ_EXAMPLES``, default 40 per
surface; the HTTP API, whose cases take a millisecond, ``PCS_RAY_HTTP_FUZZ_EXAMPLES``,
default 1,000); ``bench/fuzz.py`` runs 1,000 per surface and prints the counts.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import string
import tempfile
from urllib.parse import quote
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pcs_ray.cluster import ClusterSpecError, load_cluster_spec
from pcs_ray.contract import CoordinatorError
from pcs_ray.coordinator.local import LocalCoordinator
from pcs_ray.jobs.jobfile import load_job, parse_job
from pcs_ray.policies import build_policy, wfq_config
from pcs_ray.workloads.catalog import registered_workloads
from pcs_ray.workloads.errors import WorkloadError
import builders

EXAMPLES = int(os.environ.get("PCS_RAY_FUZZ_EXAMPLES", "40"))
CASES: Counter = Counter()  # cases run per surface (bench/fuzz.py reports them)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 100,
                suppress_health_check=list(HealthCheck), database=None)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["", "A", "tiny_cnn", "resnet18", "1e309", "-1", "../..",
                                                           "/etc/passwd", "~", "nan"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=8)
JOB_KEYS = ["workload", "steps", "gpus", "min_gpus", "class", "name", "step_time", "checkpoint_every", "params",
            "executor"]
PARAM_KEYS = ["batch_size", "lr", "momentum", "num_samples", "seed", "threads", "data_root", "optimizer", "seq_len",
              "vocab_size", "weight_decay"]
jobs = st.fixed_dictionaries(
    {"workload": st.one_of(st.sampled_from(sorted(registered_workloads())), values),
     "steps": st.one_of(st.integers(-5, 10**8), values)},
    optional={k: values for k in JOB_KEYS[2:] if k != "params"} | {
        "params": st.one_of(values, st.dictionaries(st.sampled_from(PARAM_KEYS + ["x"]), values, max_size=4))},
)


def _one_line(error: BaseException) -> None:
    text = str(error)
    assert text and "\n" not in text and "Traceback" not in text, repr(text)


def _hosted(folder: Path) -> LocalCoordinator:
    """A pcs-bal core on two nodes of four for every registered workload, journaling in ``folder``, hosted here."""
    return LocalCoordinator(builders.coordinator(gpus=8, per_node=4, policy="pcs-bal", journal=folder / "journal.sqlite",
                                                 workloads=registered_workloads()))


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory):
    return _hosted(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="module")
def tenants_coordinator(tmp_path_factory):
    """A coordinator of its own: applied tenants files change what the others' cases may submit."""
    return _hosted(tmp_path_factory.mktemp("fuzz-tenants"))


def _tmp_file(text: str, suffix: str) -> Path:
    fd, name = tempfile.mkstemp(suffix=suffix, prefix="pcsray-fuzz-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return Path(name)


def check_job_dict(raw, coordinator):
    CASES["job_dict"] += 1
    try:
        parse_job(raw, workloads=registered_workloads(), capacity=8)
    except CoordinatorError as e:
        _one_line(e)
    try:
        coordinator.submit(raw)
    except CoordinatorError as e:
        _one_line(e)
    assert isinstance(coordinator.status()["jobs"], list)  # still serving


def check_job_yaml(text):
    CASES["job_yaml"] += 1
    path = _tmp_file(text, ".yaml")
    try:
        load_job(path, workloads=registered_workloads())
    except (CoordinatorError, ValueError, OSError) as e:
        _one_line(e)
    finally:
        path.unlink()


def check_cluster_spec(text):
    CASES["cluster_spec"] += 1
    path = _tmp_file(text, ".yaml")
    try:
        spec = load_cluster_spec(path)
        assert spec.num_gpus >= 1
    except (ClusterSpecError, OSError) as e:
        _one_line(e)
    finally:
        path.unlink()


def check_wfq(raw):
    CASES["wfq_config"] += 1
    path = _tmp_file(json.dumps(raw, allow_nan=True) if not isinstance(raw, str) else raw, ".json")
    try:
        config = wfq_config(path)
        build_policy("pcs", config=config)
    except ValueError as e:
        _one_line(e)
    finally:
        path.unlink()


def check_trace(kind, text):
    from pcs_ray.workloads.traces import read_pcs_trace, read_sia_philly, read_testbed_trace

    CASES[f"trace_{kind}"] += 1
    reader = {"pcs": read_pcs_trace, "testbed": read_testbed_trace, "sia": read_sia_philly}[kind]
    path = _tmp_file(text, ".csv")
    try:
        for job in reader(path):
            assert job.min_gpus >= 1
    except (WorkloadError, ValueError, OSError) as e:
        _one_line(e)
    finally:
        path.unlink()


def check_joblist(text):
    from pcs_ray.workloads.joblist import JobListError, parse_joblist

    CASES["joblist"] += 1
    try:
        parse_joblist(text, capacity=8)
    except JobListError as e:
        _one_line(e)


def check_cli(argv):
    from pcs_ray.cli import run

    CASES["cli"] += 1
    out, err = io.StringIO(), io.StringIO()
    # In a scratch folder: an argument list may name an output file (``--per-job x``) relative to it.
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run(argv)
        except SystemExit as e:  # pragma: no cover - run() returns, never exits
            code = e.code
    assert isinstance(code, int), code
    assert "Traceback" not in err.getvalue(), err.getvalue()[-2000:]
    if code != 0:  # a refusal is one line that says what is wrong
        lines = [line for line in err.getvalue().splitlines() if line.startswith("error: ")]
        assert len(lines) == 1, (argv, code, err.getvalue()[-2000:])


# -- strategies for text surfaces ------------------------------------------------------------------
def _yaml_of(strategy):
    return strategy.map(lambda v: yaml.safe_dump(v, allow_unicode=True) if not isinstance(v, str) else v)


texts = st.text(alphabet=string.printable, max_size=200)
cluster_specs = st.one_of(
    texts,
    _yaml_of(st.fixed_dictionaries({"nodes": st.lists(st.fixed_dictionaries(
        {"name": st.one_of(st.sampled_from(["node0", "node1", "a b", "../x", ""]), st.text(max_size=6)),
         "gpus": st.one_of(st.integers(-2, 9), st.lists(st.fixed_dictionaries(
             {"index": st.integers(-1, 9), "uuid": st.text(max_size=5),
              "scores": st.dictionaries(st.sampled_from("ABCDX"), st.floats(allow_nan=True), max_size=3)}), max_size=3),
             values)},
        optional={"topology": st.sampled_from(["dgx1-v100", "/etc/passwd", "../../x.topo", "nope"])}), max_size=3),
        "locality_penalty": st.one_of(st.floats(allow_nan=True), values)})),
    _yaml_of(values),
)
wfq_configs = st.one_of(texts, values, st.fixed_dictionaries({}, optional={
    k: st.one_of(st.floats(allow_nan=True), st.integers(-3, 10), values)
    for k in ("T", "W", "zeta_min", "delta", "num_queues", "queue_thresholds", "weights", "threshold", "weight")}))


def _csv(header, cells):
    return st.lists(st.lists(cells, min_size=len(header) - 1, max_size=len(header) + 1), max_size=6).map(
        lambda rows: ",".join(header) + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")


cells = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True), st.sampled_from(["", "x", "resnet50", "1e400",
                                                                                       "A", "GPT2", "\"", "-0"]))
TRACE_HEADERS = {
    "pcs": ["app_id", "submit_time", "service", "num_jobs", "sleep_time", "model_name"],
    "testbed": ["app_id", "submit_time", "service", "num_jobs", "sleep_time"],
    "sia": ["job_id", "num_gpus", "submit_time", "duration", "model"],
}
joblists = st.one_of(texts, _csv(["submit_s", "name", "workload", "steps", "gpus", "min_gpus", "class"],
                                 st.one_of(cells, st.sampled_from(sorted(registered_workloads())),
                                           st.sampled_from(["B", "C", "D", "{}"]))),
                     _csv(["submit_s", "name", "workload", "steps", "gpus", "min_gpus", "class", "params"],
                          st.one_of(cells, st.sampled_from(['{"lr": 0.1}', '"{}"', "[]", "tiny_cnn"]))))
CLI_VALUES = ["0", "1", "3", "-1", "1e9", "nan", "abc", "", "fifo", "pcs-bal", "vahrm", "themis1", "longhorn",
              "dgx1-v100", "pal", "packed-sticky", "demo", "/nonexistent", "x" * 30, "127.0.0.1:1", "1,2", "jct,pred"]
#: Every command and subcommand, fuzzed with its own options and real values (no --help: the command runs).
CLI_COMMANDS = ["simulate", "up", "down", "start", "submit", "status", "predict", "cancel", "stop", "node-resources",
                "logs", "calibrate", "replay", "report", "demo", "solve", "data", "config show", "config set",
                "tenants show", "tenants apply", "power fit", "slow-runs fit", "doctor", "dashboard"]
SCRATCH_STATE = "/nonexistent-pcs-ray-fuzz"  # up and down never see a real state folder (they start and stop clusters)


def cli_options(command: str) -> tuple[list[str], list[str], int]:
    """(value options, flags, positional arguments) of ``command``, read from the CLI itself."""
    import click
    import typer

    from pcs_ray.cli import app

    cmd = typer.main.get_command(app)
    for word in command.split():
        cmd = cmd.get_command(click.Context(cmd), word)
    params = cmd.get_params(click.Context(cmd))
    options = [p.opts[0] for p in params if isinstance(p, click.Option) and not p.is_flag]
    flags = [p.opts[0] for p in params if isinstance(p, click.Option) and p.is_flag and p.opts[0] != "--help"]
    return options, flags, sum(1 for p in params if isinstance(p, click.Argument))


@st.composite
def cli_args(draw, command: str):
    options, flags, positional = cli_options(command)
    values = st.one_of(st.sampled_from(CLI_VALUES), st.text(max_size=8))
    words = command.split() + [draw(values) for _ in range(draw(st.integers(0, positional + 1)))]
    for opt in draw(st.lists(st.sampled_from(options), max_size=4, unique=True)) if options else []:
        words += [opt, draw(values)]
    words += draw(st.lists(st.sampled_from(flags), max_size=2, unique=True)) if flags else []
    if command in ("up", "down"):
        words += ["--state-dir", SCRATCH_STATE]
    if command == "simulate":  # keep any simulation tiny
        words = [w for w in words if w not in ("--trace", "--workload", "--num-jobs", "--num-apps", "--gpus", "--cluster")]
        words += ["--num-jobs", "3", "--gpus", "4", "--no-predict", "--workload", "themis1"]
    if command == "solve":  # every search would run on Ray (refused here); --serial would search in this process
        words = [w for w in words if w != "--serial"]
    if command.endswith(" fit"):  # a fit on the bundled records (the default) takes minutes: only other files
        words = [w if w != "longhorn" else "/nonexistent.csv" for w in words]
        if "--data" not in words:
            words += ["--data", draw(st.sampled_from(["/nonexistent.csv", "", "x" * 30]))]
    return words


@pytest.fixture(scope="module")
def no_cluster():
    with without_a_cluster():
        yield


@contextlib.contextmanager
def without_a_cluster():
    """No Ray cluster is reachable and no process can start: a command that would connect, start Ray or
    spawn a process gets the error it would get on a machine without a cluster."""
    import subprocess

    import ray

    def refuse(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance (fuzz: no cluster)")

    def no_process(*args, **kwargs):
        raise OSError("fuzz: no process may start")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ray, "init", refuse)
        mp.setattr(ray, "is_initialized", lambda: False)
        # A command's clean-up (the embedded demo's ``finally: ray.shutdown()``) must not end the Ray the
        # session's other tests share: later they would find a default instance without the logical GPUs.
        mp.setattr(ray, "shutdown", lambda *a, **k: None)
        mp.setattr(subprocess, "Popen", no_process)
        yield


# -- the tests ------------------------------------------------------------------------------------
@FUZZ
@given(raw=st.one_of(jobs, values))
def test_fuzz_job_dicts(raw, coordinator):
    check_job_dict(raw, coordinator)


@FUZZ
@given(text=st.one_of(texts, _yaml_of(jobs), _yaml_of(values)))
def test_fuzz_job_yaml(text):
    check_job_yaml(text)


@FUZZ
@given(text=cluster_specs)
def test_fuzz_cluster_specs(text):
    check_cluster_spec(text)


@FUZZ
@given(raw=wfq_configs)
def test_fuzz_wfq_configs(raw):
    check_wfq(raw)


@FUZZ
@given(data=st.data())
@pytest.mark.parametrize("kind", ["pcs", "testbed", "sia"])
def test_fuzz_traces(kind, data):
    check_trace(kind, data.draw(st.one_of(texts, _csv(TRACE_HEADERS[kind], cells))))


@FUZZ
@given(text=joblists)
def test_fuzz_joblists(text):
    check_joblist(text)


def test_the_cli_fuzz_knows_every_command():
    """A command added to the CLI is fuzzed too: every command and subcommand is in ``CLI_COMMANDS``."""
    import typer

    from pcs_ray.cli import app

    def leaves(cmd, words):
        subs = getattr(cmd, "commands", None)
        return [leaf for name, sub in subs.items() for leaf in leaves(sub, words + [name])] if subs else [" ".join(words)]

    assert sorted(leaves(typer.main.get_command(app), [])) == sorted(CLI_COMMANDS)


@FUZZ
@given(raw=st.one_of(values, st.fixed_dictionaries({}, optional={
    "tenants": st.one_of(values, st.dictionaries(st.text(max_size=4), st.one_of(values, st.fixed_dictionaries(
        {"quota": st.one_of(st.integers(-2, 20), values)}, optional={"weight": values, "borrow_limit": values})),
        max_size=3)),
    "min_runtime_s": values, "max_min_runtime_s": values, "reclaim_young_runs": values, "operators": values})))
def test_fuzz_tenants_files(raw, tenants_coordinator):
    """A tenants file applied to a coordinator: applied, or one typed line that changes nothing."""
    from pcs_ray.tenants.identity import Caller

    coordinator = tenants_coordinator
    CASES["tenants"] += 1
    before = len(coordinator.core.journal)
    try:
        coordinator.set_tenants(raw, Caller("fuzz").to_wire())
    except CoordinatorError as e:
        assert "\n" not in str(e) and len(coordinator.core.journal) == before
    coordinator.status()


@pytest.mark.slow  # twenty commands, each run in this process ten times or more
@pytest.mark.parametrize("command", CLI_COMMANDS)
def test_fuzz_cli_arguments(command, no_cluster):
    fuzz_command(command)


def fuzz_command(command: str) -> None:
    """Hypothesis cases of ``command`` (a quarter of the surfaces' count, at least 10), each counted."""
    @settings(FUZZ, max_examples=max(10, EXAMPLES // 4))
    @given(argv=cli_args(command))
    def fuzz(argv):
        CASES[f"cli {command}"] += 1
        check_cli(argv)

    fuzz()


# -- the coordinator's HTTP API -----------------------------------------------------------------------
HTTP_EXAMPLES = int(os.environ.get("PCS_RAY_HTTP_FUZZ_EXAMPLES", str(max(1000, EXAMPLES))))
HTTP_FUZZ = settings(max_examples=HTTP_EXAMPLES, deadline=None, derandomize=True,
                     suppress_health_check=list(HealthCheck), database=None)


@pytest.fixture(scope="module")
def http_api(tmp_path_factory):
    from api_helpers import TOKEN, local_host, served

    with served(local_host(tmp_path_factory.mktemp("http-fuzz"))) as server:
        yield server, TOKEN


def _job_ids():
    return st.one_of(st.integers(-3, 12), st.integers(-10**30, 10**30), values)


def _args_for(call: str):
    """Arguments shaped like the call's (so most cases get past the shape checks), or anything."""
    shaped = {
        "submit": st.tuples(st.one_of(jobs, values), st.one_of(st.none(), st.text(max_size=12), values)),
        "predict": st.tuples(_job_ids()), "cancel": st.tuples(_job_ids()), "assignment": st.tuples(_job_ids()),
        "logs": st.tuples(_job_ids(), st.one_of(st.none(), st.integers(-2, 5), values),
                          st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.one_of(st.integers(-5, 10**6), values)))),
        "report_progress": st.tuples(_job_ids(), st.one_of(st.integers(-5, 10**9), values),
                                     st.one_of(st.floats(allow_nan=True), values), values),
        "external_ended": st.tuples(_job_ids(), st.one_of(st.integers(-2, 5), values),
                                    st.sampled_from(["finished", "preempted", "failed", "x", ""]),
                                    st.one_of(st.integers(-5, 10**9), values)),
        "set_demand": st.tuples(_job_ids(), st.one_of(st.integers(-2, 10**6), values),
                                st.one_of(st.integers(-2, 10**12), values)),
        "set_config": st.tuples(st.sampled_from(["fifo", "pcs", "pcs-bal", "srtf", "nope", ""]),
                                st.one_of(wfq_configs, values)),
        "set_tenants": st.tuples(st.one_of(values, st.fixed_dictionaries({"tenants": values}, optional={
            "operators": values})), st.one_of(st.none(), st.fixed_dictionaries({"user": values}), values)),
    }.get(call, st.tuples())
    return st.one_of(shaped.map(list), st.lists(values, max_size=5))


HTTP_CALLS = ["submit", "status", "predict", "cancel", "logs", "report_progress", "assignment", "external_ended",
              "set_demand", "config", "set_config", "tenants", "set_tenants", "dashboard_ticket", "ping"]
header_text = st.text(alphabet=string.ascii_letters + string.digits + string.punctuation + " ", max_size=40)


@st.composite
def http_requests(draw):
    call = draw(st.sampled_from(HTTP_CALLS))
    path = draw(st.one_of(
        st.just(f"/v1/{call}"), st.just(f"/v1/{call}?job_id=1"),
        st.sampled_from(["/", "/v1/", "/v1", "/v1/drain", "/v1/__class__", "/v1/../v1/status", "/v1/status/x",
                         "/v1/%00", "/v1/st%61tus", "//v1/status", "/v1/status?job_id=%ff", "/v2/status",
                         "/dashboard", "/dashboard/jobs", "/dashboard/login", "/dashboard/login?ticket=x",
                         "/dashboard/jobs/1/cancel", "/dashboard/fragment/jobs", "/dashboard/static/htmx.min.js",
                         "/dashboard/snapshot.json", "/dashboard/%00"]),
        header_text.map(lambda t: "/" + "".join(c for c in t if c not in " ?#")),
        st.text(max_size=8).map(lambda t: f"/v1/{call}?job_id={quote(t)}")))
    method = draw(st.sampled_from(["POST", "POST", "POST", "GET", "GET", "PUT", "DELETE", "PATCH", "HEAD",
                                   "OPTIONS"]))
    auth = draw(st.sampled_from(["token", "token", "token", "token", "none", "wrong", "scheme", "text"]))
    body = draw(st.one_of(
        st.builds(lambda a, k: json.dumps({"args": a} if k is None else {"args": a, "kwargs": k}, allow_nan=True)
                  .encode(), _args_for(call), st.one_of(st.none(), st.dictionaries(
                      st.sampled_from(["spec", "job_id", "step", "policy", "wfq", "gpus", "x"]), values, max_size=3))),
        st.builds(lambda v: json.dumps(v, allow_nan=True).encode(), values),
        st.binary(max_size=200), st.none()))
    headers = draw(st.dictionaries(st.sampled_from(["Content-Type", "Accept", "X-Junk", "Content-Encoding",
                                                    "Transfer-Encoding-Junk", "Expect"]), header_text, max_size=2))
    return method, path, auth, body, headers


def check_http(server, token, req):
    import http.client

    CASES["http_api"] += 1
    method, path, auth, body, headers = req
    headers = dict(headers)
    headers["Authorization"] = {"token": f"Bearer {token}", "wrong": "Bearer nope", "scheme": f"Basic {token}",
                                "text": "Bearer \t" + token[::-1], "none": None}[auth]
    if headers["Authorization"] is None:
        del headers["Authorization"]
    if headers.get("Expect", "").lower().startswith("100"):
        headers["Expect"] = "nothing"
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers)
        reply = conn.getresponse()
        raw = reply.read()
    finally:
        conn.close()
    assert reply.status < 500, (reply.status, raw[:500])
    if path.startswith("/dashboard"):
        # no session cookie: only the sign-in form is served; a page redirects to it, anything else is refused
        assert reply.status in (400, 401, 417) or reply.status == 303 and reply.getheader("Location") == "/dashboard/login" \
            or reply.status == 200 and path == "/dashboard/login" and method in ("GET", "HEAD"), reply.status
        assert b"data-job-id" not in raw
    elif auth != "token":
        # never served: 400 when the request itself is bad, 417 for an Expect header aiohttp answers before routing
        assert reply.status in (400, 401, 417), reply.status
    if path.startswith("/dashboard") and (reply.getheader("Content-Type") or "").startswith("text/html"):
        assert b"Traceback" not in raw  # the sign-in form again, saying why
    elif raw and reply.status >= 400:
        try:
            message = json.loads(raw)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = raw.decode(errors="replace")  # aiohttp's own answer to a request it cannot parse
        assert "\n" not in message.strip() and "Traceback" not in message, message


@HTTP_FUZZ
@given(req=http_requests())
def test_fuzz_http_api(req, http_api):
    server, token = http_api
    check_http(server, token, req)
    if CASES["http_api"] % 100 == 0:  # still serving
        check_http_alive(server, token)


def check_http_alive(server, token):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request("GET", "/v1/ping", headers={"Authorization": f"Bearer {token}"})
        reply = conn.getresponse()
        assert reply.status == 200 and "jobs" in json.loads(reply.read())["result"]
    finally:
        conn.close()
