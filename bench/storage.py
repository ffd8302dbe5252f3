"""Checkpoint save and restore through the cluster's storage: local disk (``file://``) against S3 (moto on loopback).

    PYTHONPATH=. python bench/storage.py [--repeats 5] [--workloads resnet18,user_loop] [--phase-budget-s 10] [--json-only]

The payloads are real checkpoints: each built-in workload's (its ``TrainingSession`` built on CPU with the
default params, one training step taken so that the optimizer's state exists as in every checkpoint a run
makes, then ``snapshot`` written by ``save_checkpoint``), and ``user_loop``, a user's ``torch.save`` of a small
MLP's model and optimizer state dicts (``examples/user-code/train_mlp.py`` with ``mlp.yaml``'s config).

Per workload, timed wall-clock with ``time.perf_counter`` (the checkpoint file is written into the rank's
staging folder beforehand, untimed, as the loop itself writes it):

- ``local_only``: ``store.commit`` of the staging folder alone, what a report with a checkpoint costs without
  ``--storage`` (the anchor);
- per storage (``file``: a folder on this disk, ``s3``: moto's S3 server in this process on 127.0.0.1):
  ``save``, ``remote_store.push`` then ``store.commit`` (``Session.report``'s path), each repeat a new step;
  ``restore_cold``, ``remote_store.pull`` into an empty cache folder (another node's first restore, every
  digest checked); ``restore_warm``, ``pull`` again into the same folder (a cache hit: only the manifest is read).

Each phase runs ``--repeats`` times, or fewer where its samples already add up to ``--phase-budget-s`` (at least
once): ``n`` says how many ran, ``median_s`` and ``max_s`` are over them, ``mb_s`` is the payload's bytes
(10^6 a MB) over the median. S3 figures also give ``requests``, the HTTP requests the server answered per
operation (median): on a real S3 each is a round trip, so it carries over where moto's timings do not.
Prints one JSON object (``machine``, ``repeats``, ``workloads``, ``wall_s``, ``notes``) on stdout; progress on stderr.
Temporary folders, the bucket and the server are removed at the end, also after an error.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from common import log
from pcs_ray.api import strict_json

USER_LOOP = "user_loop"
BUILTIN = ("resnet18", "vgg11", "mobilenet_v2", "transformer", "tiny_cnn")
WORKLOADS = (*BUILTIN, USER_LOOP)
MB = 1e6
JOB = "bench"


def _sig(value: float) -> float:
    """Three significant digits (a positive figure stays positive)."""
    return float(f"{value:.3g}")


# -- payloads ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _torch_globals_kept():
    """Put back what building a ``TrainingSession`` changes process-wide (threads, determinism, RNGs), and keep
    it on the CPU: the bench may run inside another program (its test)."""
    import random

    import numpy as np
    import torch

    import pcs_ray.executors.training as training

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    rng = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    on_gpu = training.uses_real_gpu
    training.uses_real_gpu = lambda: False
    try:
        yield
    finally:
        training.uses_real_gpu = on_gpu
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_rng_state(rng[0])
        np.random.set_state(rng[1])
        random.setstate(rng[2])


def write_payload(workload: str, folder: Path) -> None:
    """Write ``workload``'s checkpoint into ``folder`` as its training loop does."""
    import torch

    with _torch_globals_kept():
        if workload == USER_LOOP:  # examples/user-code/train_mlp.py, mlp.yaml's config
            torch.manual_seed(0)
            dim, hidden, batch = 32, 128, 64
            model = torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
            x = torch.randn(batch, dim)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            folder.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1},
                       os.path.join(folder, "state.pt"))
            return
        from pcs_ray.executors.checkpoint import save_checkpoint
        from pcs_ray.executors.training import TrainingSession

        session = TrainingSession(workload, None)
        session.train_step()  # the optimizer's state (momentum, Adam's moments) exists from the first step on
        save_checkpoint(folder, session.snapshot(session.rng_states(), job_id=JOB))


def read_payload(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def stage(job_dir: Path, files: dict[str, bytes]) -> Path:
    """A rank's staging folder holding ``files``, written and flushed as ``save_checkpoint`` leaves them."""
    import pcs_ray.train.store as store

    folder = store.staging(job_dir)
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    return folder


def digests(folder: Path) -> dict[str, str]:
    import pcs_ray.train.store as store

    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != store.MARKER}


# -- the S3 server ----------------------------------------------------------------------------


class S3Server:
    """moto's S3 server on 127.0.0.1 in a thread of this process (as ``ThreadedMotoServer`` runs it), counting
    the requests it answers."""

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        self.requests: Counter = Counter()
        self._lock = threading.Lock()
        app = DomainDispatcherApplication(create_backend_app)

        def counted(environ, start_response):
            with self._lock:
                self.requests[environ.get("REQUEST_METHOD", "?")] += 1
            return app(environ, start_response)

        self._server = make_server("127.0.0.1", 0, counted, True, request_handler=MotoRequestHandler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="bench-moto-s3", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}

    def count(self) -> int:
        with self._lock:
            return sum(self.requests.values())

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def _env(values: dict[str, str], drop: tuple[str, ...] = ()):
    """``os.environ`` with ``values`` set and ``drop`` unset, as it was afterwards."""
    before = {k: os.environ.get(k) for k in (*values, *drop)}
    os.environ.update(values)
    for key in drop:
        os.environ.pop(key, None)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def s3_storage():
    """``(storage, server)``: a fresh bucket on a moto server, the AWS variables pointing at it; the bucket is
    emptied and deleted, the server stopped and the variables put back on the way out."""
    from pcs_ray.storage import open_storage

    werkzeug = logging.getLogger("werkzeug")  # moto logs every request at INFO
    level = werkzeug.level
    werkzeug.setLevel(logging.WARNING)
    server = S3Server()
    bucket = f"pcs-ray-bench-{uuid.uuid4().hex[:12]}"
    try:
        with _env(server.env(), drop=("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_PROFILE")):
            client = server.client()
            client.create_bucket(Bucket=bucket)
            try:
                yield open_storage(f"s3://{bucket}/cluster", retry_s=30.0), server
            finally:
                with contextlib.suppress(Exception):
                    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                        for item in page.get("Contents", []):
                            client.delete_object(Bucket=bucket, Key=item["Key"])
                    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
                        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                    client.delete_bucket(Bucket=bucket)
    finally:
        server.stop()
        werkzeug.setLevel(level)


# -- phases -----------------------------------------------------------------------------------


def phase(op: Callable[[int], float], repeats: int, budget_s: float, server: S3Server | None = None) -> dict:
    """Run ``op(i)`` (it returns the seconds it timed) ``repeats`` times, or until the samples add up to
    ``budget_s``; median and max seconds, with the requests the S3 server answered per run."""
    seconds, requests = [], []
    for i in range(repeats):
        before = server.count() if server else 0
        seconds.append(op(i))
        if server:
            requests.append(server.count() - before)
        if sum(seconds) >= budget_s:
            break
    out = {"n": len(seconds), "median_s": _sig(statistics.median(seconds)), "max_s": _sig(max(seconds))}
    if server:
        out["requests"] = _sig(statistics.median(requests))
    return out


def with_rate(figures: dict, nbytes: int) -> dict:
    return {**figures, "mb_s": _sig(nbytes / MB / figures["median_s"])}


def measure_local(files: dict[str, bytes], work: Path, args) -> dict:
    """``store.commit`` of a staged checkpoint alone: a run without a storage."""
    import pcs_ray.train.store as store

    job_dir = work / "local-only" / "checkpoints" / JOB

    def commit(i: int) -> float:
        folder = stage(job_dir, files)
        began = time.perf_counter()
        store.commit(job_dir, folder, i + 1, move=True, run=1)
        return time.perf_counter() - began

    try:
        return with_rate(phase(commit, args.repeats, args.phase_budget_s), sum(map(len, files.values())))
    finally:
        shutil.rmtree(work / "local-only", ignore_errors=True)


def measure_storage(storage, files: dict[str, bytes], work: Path, args, server: S3Server | None = None) -> dict:
    """Save (push, then commit) on node A; restore (pull) cold and warm on node B."""
    import pcs_ray.train.remote_store as remote_store
    import pcs_ray.train.store as store

    nbytes = sum(map(len, files.values()))
    job_dir = work / "node-a" / "checkpoints" / JOB
    node_b = work / "node-b"
    steps = []

    def save(i: int) -> float:
        step = i + 1
        folder = stage(job_dir, files)
        began = time.perf_counter()
        origin = remote_store.push(storage, JOB, folder, step, run=1, rank=0)
        store.commit(job_dir, folder, step, move=True, run=1, origin=origin)
        took = time.perf_counter() - began
        steps.append(step)
        return took

    def restore_cold(i: int) -> float:
        cache = node_b / f"cold-{i}"
        began = time.perf_counter()
        step, _ = remote_store.pull(storage, JOB, cache)
        took = time.perf_counter() - began
        if step != steps[-1] or (i == 0 and digests(store.newest(cache)[0]) != wanted):
            raise RuntimeError(f"{storage.uri}: restored step {step}, not the {steps[-1]} saved, or other bytes")
        shutil.rmtree(warm, ignore_errors=True)
        os.replace(cache, warm)  # the last cold restore's cache is the one the warm restores hit
        return took

    warm = node_b / "warm"

    def restore_warm(i: int) -> float:
        target = store.newest(warm)[0]
        inodes = {p: p.stat().st_ino for p in target.rglob("*")}
        began = time.perf_counter()
        step, _ = remote_store.pull(storage, JOB, warm)
        took = time.perf_counter() - began
        if step != steps[-1] or {p: p.stat().st_ino for p in target.rglob("*")} != inodes:
            raise RuntimeError(f"{storage.uri}: a warm restore downloaded the checkpoint again")
        return took

    wanted = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    try:
        out = {"save": with_rate(phase(save, args.repeats, args.phase_budget_s, server), nbytes)}
        out["restore_cold"] = with_rate(phase(restore_cold, args.repeats, args.phase_budget_s, server), nbytes)
        out["restore_warm"] = phase(restore_warm, args.repeats, args.phase_budget_s, server)
        return out
    finally:
        shutil.rmtree(work / "node-a", ignore_errors=True)
        shutil.rmtree(node_b, ignore_errors=True)
        with contextlib.suppress(Exception):
            storage.delete_prefix(remote_store.job_prefix(JOB))


# -- the run ----------------------------------------------------------------------------------


def machine() -> dict:
    import moto
    import pyarrow
    import torch

    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "pyarrow": pyarrow.__version__, "moto": moto.__version__,
            "tmp": tempfile.gettempdir(), "load_average_before": [round(x, 2) for x in os.getloadavg()]}


def run(args, say: Callable[[str], None] = log) -> dict:
    from pcs_ray.storage import open_storage

    report = {"machine": machine(), "repeats": args.repeats, "workloads": {}, "notes": []}
    work = Path(tempfile.mkdtemp(prefix="pcs-ray-bench-storage-"))
    began = time.monotonic()
    try:
        with s3_storage() as (s3, server):
            file_store = open_storage((work / "file-storage").as_uri(), retry_s=30.0)
            for name in args.workloads:
                template = work / "payload" / name
                write_payload(name, template)
                files = read_payload(template)
                shutil.rmtree(template, ignore_errors=True)
                nbytes = sum(map(len, files.values()))
                say(f"[storage] {name}: {nbytes / MB:.2f} MB in {len(files)} file(s)")
                entry = {"bytes": nbytes, "files": len(files), "local_only": measure_local(files, work, args)}
                say(f"[storage]   local commit   {entry['local_only']['median_s']:.4f} s")
                for key, storage, counter in (("file", file_store, None), ("s3", s3, server)):
                    entry[key] = measure_storage(storage, files, work / key, args, counter)
                    f = entry[key]
                    say(f"[storage]   {key:4} save {f['save']['median_s']:.4f} s ({f['save']['mb_s']} MB/s), "
                        f"restore cold {f['restore_cold']['median_s']:.4f} s ({f['restore_cold']['mb_s']} MB/s), "
                        f"warm {f['restore_warm']['median_s']:.4f} s" +
                        (f"; requests {f['save']['requests']:g}/{f['restore_cold']['requests']:g}/"
                         f"{f['restore_warm']['requests']:g}" if counter else ""))
                entry["s3_over_file"] = {k: _sig(entry["s3"][k]["median_s"] / entry["file"][k]["median_s"])
                                         for k in ("save", "restore_cold", "restore_warm")}
                report["workloads"][name] = entry
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report["wall_s"] = round(time.monotonic() - began, 1)
    report["notes"] = notes(report, args)
    return report


def notes(report: dict, args) -> list[str]:
    out = [
        "seconds are wall-clock medians (and maxima) over n runs, MB is 10^6 bytes, mb_s is bytes over the median; "
        f"a phase stops before --repeats once its runs add up to {args.phase_budget_s:g} s",
        "local_only: store.commit of the staged checkpoint (a rename and fsyncs), a run without --storage; save: "
        "remote_store.push then store.commit, each run a new step (a push from the third on also deletes the "
        "checkpoint two back); the checkpoint file is written into the staging folder beforehand, untimed",
        "restore_cold: remote_store.pull into an empty cache folder (every file downloaded and its SHA-256 "
        "checked); restore_warm: pull into a cache already holding that checkpoint (reads the manifest only)",
        "file: a folder on this machine's disk standing in for a shared file system, no network between, and "
        "restores read what was just written from the page cache; s3: moto's S3 server in this process on "
        "127.0.0.1, no network between, its Python handling each request in a time that grows with the object's "
        "size (a ranged GET of 256 KiB of a 90 MB object costs about as much as a GET of all of it), so "
        "requests (per operation, median) is the figure that carries over to a real S3",
        "built-in payloads: TrainingSession on CPU with the default params after one training step (the "
        "optimizer's momentum or Adam moments exist from then on), snapshot written by save_checkpoint; "
        "user_loop: torch.save of examples/user-code/train_mlp.py's MLP (model and SGD state dicts)",
    ]
    for name, entry in report["workloads"].items():
        cold = entry["s3"]["restore_cold"]
        if cold["requests"] > 20:
            out.append(f"{name}: a cold restore from S3 made {cold['requests']:g} requests for "
                       f"{entry['bytes'] / MB:.1f} MB ({entry['bytes'] / cold['requests'] / 1024:.0f} KiB a request)")
        for storage in ("file", "s3"):
            for what, figures in entry[storage].items():
                if figures["n"] < args.repeats:
                    out.append(f"{name} {storage} {what}: {figures['n']} run(s) of {args.repeats} "
                               f"(the phase budget of {args.phase_budget_s:g} s)")
    return out


def parse(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs of each phase, each save a new step (default 5)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help=f"comma-separated, of {', '.join(WORKLOADS)} (default: all)")
    ap.add_argument("--phase-budget-s", type=float, default=10.0,
                    help="stop repeating a phase once its runs add up to this many seconds (default 10)")
    ap.add_argument("--json-only", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown or not args.workloads:
        ap.error(f"--workloads: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(WORKLOADS)}")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    report = run(args, say=(lambda _message: None) if args.json_only else log)
    print(strict_json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
