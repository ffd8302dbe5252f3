"""HTML building blocks every page shares: escaping, attributes, times, the page shell and its navigation.

Every value that reaches the page goes through :func:`esc` or :func:`attrs`
(``html.escape`` with quotes), so a job or user name is text, never markup.
"""

from __future__ import annotations

import html
import json
import time

PREFIX = "/dashboard"
STATIC = f"{PREFIX}/static"
PAGES = (("cluster", "Cluster"), ("jobs", "Jobs"), ("timeline", "Timeline"), ("tenants", "Tenants"),
         ("policy", "Policy"))
#: How often a page's live part asks for a fresh fragment.
POLL = "every 1s"
# htmx without inline styles or eval, so the page runs under ``default-src 'self'``.
HTMX_CONFIG = json.dumps({"includeIndicatorStyles": False, "allowEval": False, "allowScriptTags": False,
                          "selfRequestsOnly": True, "historyCacheSize": 0})


def esc(value) -> str:
    """Text for HTML (``None`` is empty)."""
    return "" if value is None else html.escape(str(value), quote=True)


def attrs(**values) -> str:
    """`` name="value"`` pairs (a trailing ``_`` is dropped, ``__`` becomes ``-``; ``None`` leaves the attribute out)."""
    out = []
    for name, value in values.items():
        if value is None:
            continue
        name = name.rstrip("_").replace("__", "-")
        out.append(f' {name}="{esc(value)}"')
    return "".join(out)


def epoch(t: float | None) -> str:
    """A ``data-epoch`` value: exact unix seconds, or empty."""
    return "" if t is None else repr(float(t))


def clock(t: float | None, now: float | None = None) -> str:
    """A time people read: HH:MM:SS today, else the date too (local time of the server)."""
    if t is None:
        return "—"
    now = time.time() if now is None else now
    fmt = "%H:%M:%S" if abs(t - now) < 20 * 3600 else "%Y-%m-%d %H:%M"
    return time.strftime(fmt, time.localtime(t))


def nav(current: str) -> str:
    links = "".join(f'<a{attrs(href=f"{PREFIX}/{key}", class_="current" if key == current else None)}>{label}</a>'
                    for key, label in PAGES)
    return f'<nav id="pages">{links}</nav>'


def shell(title: str, body: str, *, current: str = "", csrf: str | None = None, caller: str = "",
          live: bool = True, styled: bool = True) -> str:
    """A whole page: head (the package's own CSS and htmx only), navigation, who is signed in, ``body``.

    ``csrf``: the session's token; htmx sends it as ``X-CSRF-Token`` with every request it makes.
    ``live``: False for pages without polling (the sign-in form, a static report). ``styled``: False for the
    sign-in form, which asks for no asset (they need a session).
    """
    assets = (f'<link rel="icon" href="{STATIC}/favicon.svg"><link rel="stylesheet" href="{STATIC}/dashboard.css">'
              if styled else "") + (f'<script src="{STATIC}/htmx.min.js"></script>' if live else "")
    headers = f" hx-headers='{esc(json.dumps({'X-CSRF-Token': csrf}))}'" if csrf else ""
    who = ""
    if csrf:
        who = (f'<form method="post" action="{PREFIX}/logout" class="logout"><span class="who">{esc(caller)}</span>'
               f'<input type="hidden" name="csrf"{attrs(value=csrf)}><button type="submit">Sign out</button></form>')
    top = f'<header>{nav(current)}{who}</header>' if current else ""
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta name="htmx-config"{attrs(content=HTMX_CONFIG)}>'
            f"<title>{esc(title)} · pcs-ray</title>"
            f"{assets}</head>"
            f"<body{headers}>{top}<main>{body}</main></body></html>\n")


def live_region(region_id: str, url: str, inner: str) -> str:
    """A part of a page that replaces itself with ``url``'s fragment every second (htmx)."""
    return f'<div{attrs(id=region_id, hx__get=url, hx__trigger=POLL, hx__swap="outerHTML")}>{inner}</div>'


def flash(message: str | None, error: bool = False) -> str:
    if not message:
        return ""
    return f'<p class="flash{" error" if error else ""}">{esc(message)}</p>'
