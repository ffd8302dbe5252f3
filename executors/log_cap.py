"""A rank's log kept bounded: rotated once it passes its cap, the part before kept as ``rank-<r>.log.1``.

A user rank's stdout and stderr are its log file itself (``pcs_ray.executors.user_run`` points file
descriptors 1 and 2 at it), so whatever writes there (Python, C extensions, ``faulthandler``) is
kept. A thread of the rank looks at the file's size every second; past ``max_bytes`` it renames
it to ``rank-<r>.log.1`` (replacing the one before) and points 1 and 2 at a new file. A rank's logs
then hold at most twice its cap, plus what it writes within a second; a loop that prints without
end cannot fill the coordinator's disk.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

CHECK_EVERY_S = 1.0
OUTPUTS = (1, 2)  # stdout, stderr


def open_log(path: Path, truncate: bool = False) -> None:
    """Point this process's stdout and stderr at ``path`` (appended to)."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0), 0o640)
    for out in OUTPUTS:
        os.dup2(fd, out)
    os.close(fd)


class LogCap:
    """Rotates ``path`` (this process's stdout and stderr) past ``max_bytes``; :meth:`check` does it once."""

    def __init__(self, path: Path, max_bytes: int, every_s: float = CHECK_EVERY_S) -> None:
        self.path, self.max_bytes, self.every_s = Path(path), int(max_bytes), every_s
        self.rotations = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pcs-ray-log-cap", daemon=True)

    def start(self) -> "LogCap":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def check(self) -> bool:
        """Rotate if the log passed its cap; whether it did."""
        with self._lock:
            if os.fstat(OUTPUTS[0]).st_size <= self.max_bytes:
                return False
            sys.stdout.flush()
            sys.stderr.flush()
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            open_log(self.path, truncate=True)
            self.rotations += 1
            os.write(OUTPUTS[1], (f"pcs-ray: this log passed {self.max_bytes} bytes and was rotated ({self.rotations} "
                                  f"time(s)); the part before is {self.path.name}.1, older ones are gone\n").encode())
            return True

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.check()
            except OSError:  # the folder is gone (the job's logs were removed): nothing left to bound
                return
