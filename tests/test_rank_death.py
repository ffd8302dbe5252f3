"""A rank's death in words: Ray's own messages (as Ray 2.60 words them) and the rank's log tail."""

from __future__ import annotations

import pytest

from pcs_ray.executors.rank_death import describe

HEAD = "The actor died unexpectedly before finishing this task.\n\tclass_name: UserRank\n\tpid: 7803\n\tip: 192.0.2.2\n"
NO_WORD = (HEAD + "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
           "detail: Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: "
           "(1) the process was killed by the OOM killer due to high memory usage, (2) ray stop --force was called, or "
           "(3) the worker crashed unexpectedly due to SIGSEGV or another unexpected error.")
TERM = (HEAD + "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
        "detail: Worker exits unexpectedly. Worker exits with an exit code 1. The process receives a SIGTERM.")
RAY_KILL = HEAD + "The actor is dead because it was killed by `ray.kill`."
MONITOR = (HEAD + "The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY Worker "
           "exit detail: Task was killed due to the node running low on memory.")


def error(name: str, text: str) -> Exception:
    return type(name, (Exception,), {})(text)


@pytest.mark.parametrize("name, text, words", [
    ("ActorDiedError", NO_WORD, "rank 1 died: killed by signal 9 (SIGKILL: out of memory?"),
    ("ActorDiedError", TERM, "rank 1 died: terminated by signal 15 (SIGTERM)"),
    ("ActorDiedError", RAY_KILL, "rank 1 died: killed by pcs-ray"),
    ("ActorDiedError", MONITOR, "rank 1 died: killed by Ray's memory monitor: its node ran out of memory"),
    ("OutOfMemoryError", "Task was killed", "rank 1 died: killed by Ray's memory monitor"),
    ("NodeDiedError", "node 3 is gone", "rank 1 died: its node died"),
    ("ActorUnavailableError", "\nThe actor is temporarily unavailable: lost", "rank 1 died: ActorUnavailableError: The actor is"),
])
def test_rays_words_become_the_runs_reason(name, text, words):
    said = describe(1, error(name, text))
    assert said.startswith(words) and "\n" not in said and "died" in said  # "died": the host's node-loss check


def test_a_crash_faulthandler_wrote_to_the_log_is_told_from_a_kill(tmp_path):
    log = tmp_path / "rank-0.log"
    log.write_text("epoch 3\nFatal Python error: Segmentation fault\n\nCurrent thread 0x7f (most recent call first):\n"
                   '  File "loop.py", line 9 in step\n')
    assert describe(0, error("ActorDiedError", NO_WORD), log) == \
        "rank 0 died: crashed with SIGSEGV (segmentation fault); its stack is at the end of its log"
    assert describe(0, error("ActorDiedError", NO_WORD), tmp_path / "missing.log").startswith("rank 0 died: killed by signal 9")


def test_a_death_ray_reported_before_it_knew_why_is_asked_of_the_dead_actor_again(ray_local):
    """Ray may raise a rank's ActorDiedError before it has the death's cause (the bare first line alone):
    the watcher asks the dead actor again and words what Ray then says."""
    import os
    import signal

    from ray.exceptions import ActorDiedError

    from pcs_ray.executors.handle import death_of

    @ray_local.remote(num_cpus=0)
    class Rank:
        def pid(self) -> int:
            return os.getpid()

    rank = Rank.remote()
    os.kill(ray_local.get(rank.pid.remote()), signal.SIGKILL)
    bare = ActorDiedError()
    assert describe(0, bare).startswith("rank 0 died: ActorDiedError")  # all that the bare error tells
    told = death_of(rank, bare)
    assert describe(0, told).startswith("rank 0 died: killed by signal 9 (SIGKILL"), str(told)
    other = RuntimeError("not a death")
    assert death_of(rank, other) is other
