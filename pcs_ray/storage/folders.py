"""Small folders kept in step with the storage: a rank's logs going up, the coordinator's copy coming down.

A rank's log folder is written on its own node; :class:`FolderUpload` sends each file that changed to
the storage every ``interval_s`` (a whole file each time: a rank's logs are bounded by its rotation
cap, ``pcs_ray.executors.log_cap``), and once more when the run ends. :func:`download_changed` brings
the files whose size differs into a local folder, so the readers that read a local folder
(``pcs-ray logs``, the dashboard's loss curve) see every rank of every host.
"""

from __future__ import annotations

import threading
from pathlib import Path

from pcs_ray.storage.objects import Storage, StorageError

UPLOAD_EVERY_S = 1.0


class FolderUpload(threading.Thread):
    """Uploads the files of ``folder`` that changed, every ``interval_s``, as ``prefix/<name>``."""

    def __init__(self, storage: Storage, prefix: str, folder: str | Path, interval_s: float = UPLOAD_EVERY_S):
        super().__init__(name="pcs-ray-folder-upload", daemon=True)
        self.storage, self.prefix, self.folder, self.interval_s = storage, prefix.rstrip("/"), Path(folder), interval_s
        self.sent: dict[str, tuple[int, int]] = {}
        self.problem: str | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            self.flush()

    def flush(self) -> None:
        try:
            paths = sorted(p for p in self.folder.iterdir() if p.is_file() and not p.name.startswith("."))
        except OSError:
            return
        for path in paths:
            try:
                stat = path.stat()
                seen = (stat.st_size, stat.st_mtime_ns)
                if self.sent.get(path.name) == seen:
                    continue
                self.storage.write(f"{self.prefix}/{path.name}", path.read_bytes())
                self.sent[path.name] = seen
                self.problem = None
            except (OSError, StorageError) as exc:  # the next flush tries again
                self.problem = str(exc)

    def close(self) -> None:
        """Stop, and send what changed since the last flush."""
        self._halt.set()
        if self.is_alive():
            self.join(timeout=self.interval_s + 1)
        self.flush()


def download_changed(storage: Storage, prefix: str, folder: str | Path) -> list[str]:
    """Bring every object under ``prefix`` whose size differs from the local file into ``folder`` (keeping the
    key's path below ``prefix``); returns the keys fetched."""
    folder = Path(folder)
    prefix = prefix.rstrip("/") + "/"
    fetched = []
    for key, size in storage.list(prefix).items():
        target = folder / key[len(prefix):]
        try:
            if target.stat().st_size == size:
                continue
        except OSError:
            pass
        data = storage.read(key)
        if data is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(data)
        partial.replace(target)
        fetched.append(key)
    return fetched
