"""HTML building blocks every page shares: markup by type, attributes, times, the page shell and its navigation.

Every fragment of HTML is a :class:`markupsafe.Markup`, written as a literal in
this package; any other value is escaped where it meets one (``Markup.format``,
``+``, :func:`join`, :func:`attrs`). A job or user name can therefore only
ever be text, whichever slot it lands in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from markupsafe import Markup

PREFIX = "/dashboard"
STATIC = f"{PREFIX}/static"
PAGES = (("cluster", "Cluster"), ("jobs", "Jobs"), ("timeline", "Timeline"), ("tenants", "Tenants"),
         ("policy", "Policy"))
#: How often a page's live part asks for a fresh fragment.
POLL = "every 1s"
# htmx without inline styles or eval, so the page runs under ``default-src 'self'``.
HTMX_CONFIG = json.dumps({"includeIndicatorStyles": False, "allowEval": False, "allowScriptTags": False,
                          "selfRequestsOnly": True, "historyCacheSize": 0})
EMPTY = Markup()


def join(parts: Iterable) -> Markup:
    """Fragments one after another (a part that is not markup is escaped)."""
    return EMPTY.join(parts)


def blank(value):
    """``None`` shown as nothing (``Markup.format`` would write "None")."""
    return "" if value is None else value


def attrs(**values) -> Markup:
    """`` name="value"`` pairs (a trailing ``_`` is dropped, ``__`` becomes ``-``; ``None`` leaves the attribute out)."""
    return join(Markup(' {}="{}"').format(name.rstrip("_").replace("__", "-"), value)
                for name, value in values.items() if value is not None)


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


def nav(current: str) -> Markup:
    links = join(Markup("<a{}>{}</a>").format(
        attrs(href=f"{PREFIX}/{key}", class_="current" if key == current else None), label) for key, label in PAGES)
    return Markup('<nav id="pages">{}</nav>').format(links)


def shell(title: str, body: Markup, *, current: str = "", csrf: str | None = None, caller: str = "",
          live: bool = True, styled: bool = True) -> Markup:
    """A whole page: head (the package's own CSS and htmx only), navigation, who is signed in, ``body``.

    ``csrf``: the session's token; htmx sends it as ``X-CSRF-Token`` with every request it makes.
    ``live``: False for pages without polling (the sign-in form, a static report). ``styled``: False for the
    sign-in form, which asks for no asset (they need a session).
    """
    assets = EMPTY
    if styled:
        assets += Markup('<link rel="icon" href="{0}/favicon.svg"><link rel="stylesheet" href="{0}/dashboard.css">'
                         ).format(STATIC)
    if live:
        assets += Markup('<script src="{}/htmx.min.js"></script>').format(STATIC)
    headers = who = top = EMPTY
    if csrf:
        headers = Markup(" hx-headers='{}'").format(json.dumps({"X-CSRF-Token": csrf}))
        who = Markup('<form method="post" action="{}/logout" class="logout"><span class="who">{}</span>'
                     '<input type="hidden" name="csrf"{}><button type="submit">Sign out</button></form>'
                     ).format(PREFIX, caller, attrs(value=csrf))
    if current:
        top = Markup("<header>{}{}</header>").format(nav(current), who)
    return Markup('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
                  '<meta name="htmx-config"{}><title>{} · pcs-ray</title>{}</head>'
                  "<body{}>{}<main>{}</main></body></html>\n").format(attrs(content=HTMX_CONFIG), title, assets,
                                                                       headers, top, body)


def live_region(region_id: str, url: str, inner: Markup) -> Markup:
    """A part of a page that replaces itself with ``url``'s fragment every second (htmx)."""
    return Markup("<div{}>{}</div>").format(attrs(id=region_id, hx__get=url, hx__trigger=POLL, hx__swap="outerHTML"),
                                            inner)


def flash(message: str | None, error: bool = False) -> Markup:
    if not message:
        return EMPTY
    return Markup('<p class="{}">{}</p>').format("flash error" if error else "flash", message)
