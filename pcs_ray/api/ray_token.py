"""Where a client finds a Ray cluster's authentication token, and what to tell a user the cluster refused.

Ray 2.60's ``ray start`` turns token authentication on, while a process that
only connects defaults to ``RAY_AUTH_MODE=disabled`` and is refused with a bare
"Failed to connect". pcs-ray connects the way ``ray start`` decides: when
``RAY_AUTH_MODE`` is unset and a token exists where Ray documents it
(``$RAY_AUTH_TOKEN``, the file ``$RAY_AUTH_TOKEN_PATH`` names,
``~/.ray/auth_token``), token mode is used. It never turns authentication
off: an explicit ``RAY_AUTH_MODE`` is the user's and is kept. No Ray import
here; :func:`pcs_ray.client.connect` applies it.
"""

from __future__ import annotations

import os
from pathlib import Path

AUTH_MODE = "RAY_AUTH_MODE"
TOKEN = "RAY_AUTH_TOKEN"
TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
GET_TOKEN = "`ray get-auth-token` on the head node prints it"


def default_token_path() -> Path:
    return Path.home() / ".ray" / "auth_token"


def token_source(env: dict | None = None) -> str | None:
    """Where Ray would read the token from, in its own order of precedence; ``None`` without one."""
    env = os.environ if env is None else env
    if env.get(TOKEN, "").strip():
        return f"${TOKEN}"
    if env.get(TOKEN_PATH):
        path = Path(env[TOKEN_PATH]).expanduser()
        return f"{path} (${TOKEN_PATH})" if path.is_file() else None
    path = default_token_path()
    return str(path) if path.is_file() else None


def prefer_token(env: dict | None = None) -> str | None:
    """Set ``RAY_AUTH_MODE=token`` in ``env`` when it is unset and a token exists; returns the token's source.

    Call before ``import ray`` (Ray reads the mode once); :func:`pcs_ray.client.connect` also refreshes an
    already-imported Ray.
    """
    env = os.environ if env is None else env
    source = token_source(env)
    if source is not None and AUTH_MODE not in env:
        env[AUTH_MODE] = "token"
    return source


def refusal_message(address: str, error: str, stderr: str = "", env: dict | None = None) -> str:
    """One line that says why connecting to ``address`` failed and exactly what to set."""
    env = os.environ if env is None else env
    mode = env.get(AUTH_MODE, "").lower()
    refused = "InvalidAuthToken" in stderr or "Unauthenticated" in stderr or "uthentication" in error
    if not refused:
        return f"{' '.join(error.split())} (start one with `pcs-ray up --local`, or pass --address / set RAY_ADDRESS)"
    where = f"the Ray cluster at {address} refused this client's authentication"
    source = token_source(env)
    if mode == "disabled":
        return (f"{where}: {AUTH_MODE}=disabled is set; set {AUTH_MODE}=token and put the cluster's token in "
                f"~/.ray/auth_token, ${TOKEN} or the file ${TOKEN_PATH} names ({GET_TOKEN})")
    if source is None:
        return (f"{where}: it needs its token and none was found; put it in ~/.ray/auth_token, or set ${TOKEN} "
                f"(or ${TOKEN_PATH} to a file holding it) ({GET_TOKEN})")
    return (f"{where}: the token from {source} is not the cluster's; set ${TOKEN} (or ${TOKEN_PATH}, or "
            f"~/.ray/auth_token) to the head node's token ({GET_TOKEN})")


def read_token(env: dict | None = None) -> str | None:
    """The token itself, from where :func:`token_source` finds it (the coordinator's API demands the same one)."""
    env = os.environ if env is None else env
    if env.get(TOKEN, "").strip():
        return env[TOKEN].strip()
    path = Path(env[TOKEN_PATH]).expanduser() if env.get(TOKEN_PATH) else default_token_path()
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def api_refusal(url: str, env: dict | None = None) -> str:
    """One line for a coordinator API that refused this client's token, saying exactly what to set."""
    env = os.environ if env is None else env
    where = f"the pcs-ray coordinator's API at {url} refused this client"
    source = token_source(env)
    if source is None:
        return (f"{where}: it needs the Ray cluster's token and none was found; put it in ~/.ray/auth_token, or set "
                f"${TOKEN} (or ${TOKEN_PATH} to a file holding it) ({GET_TOKEN})")
    return (f"{where}: the token from {source} is not the cluster's; set ${TOKEN} (or ${TOKEN_PATH}, or "
            f"~/.ray/auth_token) to the head node's token ({GET_TOKEN})")
