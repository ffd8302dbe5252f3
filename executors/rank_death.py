"""Why a rank's process died, in words, from what Ray says of it and what the rank last wrote to its log.

Ray tells a worker killed by ``ray.kill``, by its memory monitor or by SIGTERM apart, but not a
SIGKILL (the kernel's out-of-memory killer) from a crash in native code: both are "exits with a
connection error". A user rank's fatal signals (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) are written
to its log by ``faulthandler`` (``pcs_ray.executors.user_run``), so its log's tail tells a crash; what is
left is a signal that cannot be caught.
"""

from __future__ import annotations

import re
from pathlib import Path

LOG_TAIL_BYTES = 16_384

#: ``faulthandler``'s words for the fatal signals it catches, and the signals.
_FATAL = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
          "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}


def describe(rank: int, exc: BaseException, log_path: str | Path | None = None) -> str:
    """One line: ``rank R died: ...``, saying how (the run's outcome carries it to ``status``)."""
    return f"rank {rank} died: {_how(exc, _tail(log_path))}"


def _how(exc: BaseException, tail: str) -> str:
    text = str(exc)
    name = type(exc).__name__
    crash = re.findall(r"Fatal Python error: ([A-Za-z ]+)", tail)
    if crash:
        what = crash[-1].strip()
        signal = _FATAL.get(what)
        return f"crashed with {signal} ({what.lower()}); its stack is at the end of its log" if signal else \
            f"crashed ({what}); its stack is at the end of its log"
    if name == "OutOfMemoryError" or "low on memory" in text or "OUT_OF_MEMORY" in text:
        return "killed by Ray's memory monitor: its node ran out of memory"
    if "killed by `ray.kill`" in text:
        return "killed by pcs-ray (a stop past its grace period, a hang, or a rank beside it that failed)"
    if "SIGTERM" in text:
        return "terminated by signal 15 (SIGTERM)"
    if name == "NodeDiedError" or "its node has died" in text:
        return "its node died"
    code = re.search(r"exit code (\d+)", text)
    if code and "connection error" not in text:
        return f"its process exited with code {code.group(1)}"
    if "connection error" in text or "End of file" in text:
        return ("killed by signal 9 (SIGKILL: out of memory? the kernel's OOM killer is its usual sender; "
                "`dmesg` on its node says) or ended by os._exit")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{name}: {first}" if first else name


def _tail(log_path: str | Path | None) -> str:
    if log_path is None:
        return ""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
