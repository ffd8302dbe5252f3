"""A user loop run bare: the same function, config and steps as a pcs-ray job of it, without Ray or a coordinator.

    PYTHONPATH=. python bench/bare_loop.py '{"entrypoint": "train_mlp.py:train_loop", "working_dir": "...", "config": {...}, "steps": 1000}'

The anchor of ``bench/unseen_loop_prediction.py``: how well a loop's own pace over its first tenth foretells its
end when nothing of pcs-ray runs beside it. The loop runs in this process (started with the job's
``runtime_env`` ``env_vars``: one torch thread), its working dir current and first on ``sys.path``, as a
run's rank would, and loaded by the rank's own loader (``load_function``); Ray is not started. A
:class:`pcs_ray.train.session.Session` with a checkpoint folder answers its calls, so its checkpoints are
committed and its reports logged as in a run; the report hook only notes the time. Prints one
JSON object: ``reports`` as [seconds since the call, step, CPU seconds this process spent since the call],
``jct_s``, the call's duration, and ``niceness``, this process's (the caller sets it: a run's rank has Ray's 15).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def run(spec: dict) -> dict:
    """Run ``spec``'s function once to ``spec["steps"]``: when it reported each step, and how long the call took."""
    from pcs_ray.executors.user_run import load_function

    import pcs_ray.train.session as train_session

    work = Path(tempfile.mkdtemp(prefix="pcs-ray-bare-"))
    reports: list[list[float]] = []

    def noted(step: int, _metrics) -> None:
        reports.append([round(time.monotonic() - began, 4), step, round(time.process_time() - cpu_began, 4)])

    context = train_session.TrainContext(total_steps=spec["steps"])
    session = train_session.Session(context, str(work / "checkpoints"), on_report=noted,
                                    metrics_log=str(work / "metrics.jsonl"))
    train_session.install(session)
    os.chdir(spec["working_dir"])
    sys.path.insert(0, spec["working_dir"])
    try:
        function = load_function({"entrypoint": spec["entrypoint"], "working_dir": spec["working_dir"]})
        began, cpu_began = time.monotonic(), time.process_time()
        function(dict(spec.get("config") or {})) if inspect.signature(function).parameters else function()
        jct = time.monotonic() - began
    finally:
        train_session.install(None)
        session.close()
        shutil.rmtree(work, ignore_errors=True)
    return {"jct_s": round(jct, 3), "reports": reports, "niceness": os.nice(0)}


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: bare_loop.py SPEC_JSON", file=sys.stderr)
        return 2
    print(json.dumps(run(json.loads(args[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
