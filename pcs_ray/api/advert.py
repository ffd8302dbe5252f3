"""Where a coordinator says its API listens, and how a client finds it.

The coordinator writes ``STATE_DIR/api.json`` (the URL, the Ray cluster it
serves, its PID) whenever it starts, so a restarted one is found again; ``pcs-ray
stop`` and ``pcs-ray down`` remove it. A client takes ``$PCS_RAY_API`` first, else
the advert in the default state folder when it is for the Ray cluster the
client was pointed at (``--address`` / ``$RAY_ADDRESS``, or any when none is).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

API_ENV = "PCS_RAY_API"
ADVERT = "api.json"
DEFAULT_STATE_DIR = "~/.pcs-ray"


def advert_path(state_dir: str | Path | None = None) -> Path:
    return Path(state_dir or DEFAULT_STATE_DIR).expanduser() / ADVERT


def write_advert(state_dir: str | Path, url: str, ray_address: str | None, pid: int) -> Path:
    """Atomically, readable by its owner only (it names no secret, but says where the API is)."""
    path = advert_path(state_dir)
    tmp = path.with_name(f".{ADVERT}.{pid}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "ray_address": ray_address, "pid": pid}, f)
    os.replace(tmp, path)
    return path


def read_advert(state_dir: str | Path | None = None) -> dict | None:
    try:
        raw = json.loads(advert_path(state_dir).read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and isinstance(raw.get("url"), str) else None


def remove_advert(state_dir: str | Path, pid: int | None = None) -> None:
    """Remove the advert (only the one process ``pid`` wrote, when given)."""
    found = read_advert(state_dir)
    if found is not None and (pid is None or found.get("pid") == pid):
        advert_path(state_dir).unlink(missing_ok=True)


def _host_port(address: str) -> tuple[str, str]:
    host, _, port = address.removeprefix("ray://").strip().rstrip("/").rpartition(":")
    return host.strip("[]"), port


def same_cluster(target: str, advertised: str) -> bool:
    """Whether the cluster a client was pointed at is the one an advert names: the same address, or the same
    port where the client names this machine by loopback (``up`` records 127.0.0.1, Ray gives the coordinator
    this node's IP)."""
    (ht, pt), (ha, pa) = _host_port(target), _host_port(advertised)
    return pt == pa and (ht == ha or ht in ("localhost", "::1") or ht.startswith("127."))


def find_api(address: str | None = None, state_dir: str | Path | None = None) -> str | None:
    """The API's URL: ``$PCS_RAY_API``, else the state folder's advert for the cluster at ``address``
    (``None``: whichever it serves); ``None`` when neither says."""
    explicit = os.environ.get(API_ENV, "").strip()
    if explicit:
        return explicit
    found = read_advert(state_dir)
    if found is None:
        return None
    target = address or os.environ.get("RAY_ADDRESS")
    if target and target != "auto" and not same_cluster(target, str(found.get("ray_address") or "")):
        return None
    return found["url"]
