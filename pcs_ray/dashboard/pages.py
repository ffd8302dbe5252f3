"""The dashboard's pages and their live fragments, each a pure function of a snapshot (:mod:`.snapshot`).

Every page is the shell (navigation, sign-out) around a live region whose
fragment URL htmx polls every second; the fragment is the region itself, so
the first paint and each refresh are the same HTML. ``Session`` says who is
signed in (its CSRF token goes into every form and htmx header); a page built
without one (``pcs-ray report --html``) is static: no polling, no actions.
"""

from __future__ import annotations

from dataclasses import dataclass

from pcs_ray.contract import BOUND_MEANING, past_bound
from pcs_ray.dashboard.charts import line_chart
from pcs_ray.dashboard.jobs_table import (
    JobsQuery,
    filters,
    predicted_finish,
    reason_words,
    table,
)
from pcs_ray.dashboard.markup import (
    PREFIX,
    attrs,
    clock,
    epoch,
    esc,
    flash,
    live_region,
    shell,
)
from pcs_ray.dashboard.snapshot import holders
from pcs_ray.dashboard.timeline import timeline_svg

FRAGMENT = f"{PREFIX}/fragment"
LOG_LINES = 200


@dataclass(frozen=True)
class Session:
    """Who the page is for: the declared caller and the session's CSRF token."""

    user: str
    tenant: str | None
    csrf: str

    @property
    def label(self) -> str:
        return (self.user or "anonymous") + (f" ({self.tenant})" if self.tenant else "")


def _page(title: str, current: str, body: str, session: Session | None) -> str:
    return shell(title, body, current=current, csrf=session.csrf if session else None,
                 caller=session.label if session else "", live=session is not None)


def _live(region: str, url: str, inner: str, session: Session | None) -> str:
    return live_region(region, url, inner) if session is not None else f'<div{attrs(id=region)}>{inner}</div>'


# -- sign-in ---------------------------------------------------------------------------
def login_page(error: str | None = None, user: str = "", tenant: str = "") -> str:
    """The sign-in form: the cluster's token and who you are (as ``$PCS_RAY_USER``, ``$PCS_RAY_TENANT``)."""
    body = ("<h1>Sign in to pcs-ray</h1>"
            + (f'<p class="error">{esc(error)}</p>' if error else "")
            + f'<form id="login" method="post"{attrs(action=f"{PREFIX}/login")}>'
            '<label>Cluster token <input type="password" name="token" autocomplete="off" required></label>'
            f'<label>User <input type="text" name="user"{attrs(value=user)} maxlength="100"></label>'
            f'<label>Tenant <input type="text" name="tenant"{attrs(value=tenant)} maxlength="100"></label>'
            '<button type="submit">Sign in</button></form>'
            "<p class=\"hint\">The token is the Ray cluster's (<code>~/.ray/auth_token</code>); "
            "<code>pcs-ray dashboard</code> prints a one-time link instead.</p>")
    return shell("Sign in", body, live=False, styled=False)


# -- cluster ---------------------------------------------------------------------------
def cluster_fragment(snapshot: dict, session: Session | None = None) -> str:
    held = holders(snapshot["jobs"])
    nodes = []
    for node in snapshot["nodes"]:
        groups = []
        for group in node["nvlink_groups"]:
            cells = []
            for gpu in group:
                info = next(g for g in node["gpus"] if g["name"] == gpu)
                job = held.get(gpu)
                state = "idle" if job is None else "busy" if job["state"] == "running" else "stopping"
                title = f"{gpu}: idle" if job is None else f'{gpu}: {job["name"]} (#{job["id"]}, {job["state"]})'
                if info["scores"]:
                    title += "; slowdown " + ", ".join(f"{k} {v:g}" for k, v in sorted(info["scores"].items()))
                label = "" if job is None else f'<a{attrs(href=PREFIX + "/jobs/" + str(job["id"]))}>#{job["id"]}</a>'
                cells.append(f'<div{attrs(class_=f"gpu {state}", data__gpu=gpu, data__state=state, data__job__id="" if job is None else job["id"], data__speed__class=info["speed_class"], title=title)}>'
                             f'<span class="index">{info["index"]}</span>{label}</div>')
            cls = "nvlink-group" if len(group) > 1 else "nvlink-group single"
            groups.append(f'<div{attrs(class_=cls, data__gpus=" ".join(group))}>{"".join(cells)}</div>')
        busy = sum(1 for g in node["gpus"] if g["name"] in held)
        nodes.append(f'<section{attrs(class_="node", data__node=node["name"])}><h2>{esc(node["name"])} '
                     f'<small>{busy} / {len(node["gpus"])} busy</small></h2>{"".join(groups)}</section>')
    legend = ('<p class="legend"><span class="gpu idle">idle</span><span class="gpu busy">busy</span>'
              '<span class="gpu stopping">stopping</span> · a box of several GPUs is an NVLink group; '
              'speed class from the GPU\'s slowdown scores (fast, nominal, slow)</p>')
    return _live("cluster", f"{FRAGMENT}/cluster", legend + "".join(nodes), session)


def cluster_page(snapshot: dict, session: Session | None = None) -> str:
    return _page("Cluster", "cluster", "<h1>Cluster</h1>" + cluster_fragment(snapshot, session), session)


# -- jobs ------------------------------------------------------------------------------
def jobs_fragment(snapshot: dict, q: JobsQuery, session: Session | None = None) -> str:
    return _live("jobs-live", q.url(f"{FRAGMENT}/jobs"), table(snapshot, q), session)


def jobs_page(snapshot: dict, q: JobsQuery, session: Session | None = None, message: str | None = None,
              error: bool = False) -> str:
    body = "<h1>Jobs</h1>" + flash(message, error) + filters(q, snapshot["jobs"]) + jobs_fragment(snapshot, q, session)
    return _page("Jobs", "jobs", body, session)


# -- timeline --------------------------------------------------------------------------
def timeline_fragment(snapshot: dict, session: Session | None = None) -> str:
    return _live("timeline-live", f"{FRAGMENT}/timeline", timeline_svg(snapshot), session)


def timeline_page(snapshot: dict, session: Session | None = None) -> str:
    body = ("<h1>Timeline</h1><p class=\"legend\"><span class=\"bar past\">ran</span><span class=\"bar running\">running"
            "</span><span class=\"bar predicted\">predicted (the coordinator's forecast, as <code>pcs-ray predict</code>"
            " gives it)</span> · the line is now</p>" + timeline_fragment(snapshot, session))
    return _page("Timeline", "timeline", body, session)


# -- one job ---------------------------------------------------------------------------
#: Why the coordinator stopped a run (the journal's stop reasons), as the runs table says it.
STOPPED_FOR = {"preempt": "preempted", "migrate": "migrated", "resize": "resized", "cancel": "cancelled"}


def runs(job: dict) -> list[dict]:
    """Each run of the job: attempt, GPUs, start, end, why it stopped and the step it stopped at
    (where the next run resumed from its checkpoint, or the job's last step)."""
    segments = job.get("segments", [])
    out = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        if seg["end"] is None:
            why, step = job["state"], None
        elif seg.get("error") or seg.get("stopped_for"):
            why = "failed" if seg.get("error") else STOPPED_FOR.get(seg["stopped_for"], seg["stopped_for"])
            step = nxt.get("from_step") if nxt is not None else job["steps"]
        elif nxt is not None:
            why = {"resume": "preempted", "migrate": "migrated", "resize": "resized"}.get(nxt["kind"], "stopped")
            step = nxt.get("from_step")
        else:
            why = job["state"] if job["state"] in ("finished", "cancelled", "failed") else "stopped"
            step = job["steps"]
        out.append({"attempt": i + 1, "gpus": seg["gpus"], "start": seg["start"], "end": seg["end"], "why": why,
                    "step": step, "kind": seg["kind"]})
    return out


def _runs_table(job: dict, now: float) -> str:
    rows = "".join(
        f'<tr{attrs(data__attempt=r["attempt"])}><td data-col="attempt">{r["attempt"]}</td>'
        f'<td data-col="gpus">{esc(", ".join(r["gpus"]))}</td>'
        f'<td data-col="start"{attrs(data__epoch=epoch(r["start"]))}>{clock(r["start"], now)}</td>'
        f'<td data-col="end"{attrs(data__epoch=epoch(r["end"]))}>{clock(r["end"], now) if r["end"] else "running"}</td>'
        f'<td data-col="why">{esc(r["why"])}</td>'
        f'<td data-col="checkpoint-step">{"" if r["step"] is None else r["step"]}</td></tr>'
        for r in runs(job))
    return ('<table id="runs"><thead><tr><th>Attempt</th><th>GPUs</th><th>Start</th><th>End</th><th>Why it stopped</th>'
            f'<th>Checkpoint step</th></tr></thead><tbody>{rows}</tbody></table>')


def _time(cls: str, t: float | None, now: float) -> str:
    return f"<span{attrs(data__epoch=epoch(t), class_=cls)}>{clock(t, now)}</span>"


def _facts(job: dict, now: float) -> str:
    total = job.get("total_steps") or 0
    waiting = job.get("waiting") or {}
    rows = [("State", f'<span{attrs(class_="state " + job["state"])}>{esc(job["state"])}</span>'),
            ("Tenant / user", f'{esc(job.get("tenant") or "—")} / {esc(job.get("user") or "—")}'),
            ("Workload", esc(job.get("workload"))),
            ("GPUs", esc(", ".join(job["gpus"]) or "none") + f' (demand {esc("–".join(map(str, job.get("demand") or [])))})'),
            ("Progress", f'<progress{attrs(max=max(total, 1), value=job["steps"])}></progress> {job["steps"]} / {total} steps'),
            ("Submitted", clock(job.get("submit"), now)),
            ("Start" if job["state"] != "queued" else "Predicted start",
             _time("predicted-start", job.get("start") if job["state"] != "queued" else job.get("predicted_start"), now)),
            ("Predicted finish", _time("predicted-finish", predicted_finish(job), now)),
            ("Bound", f'<span{attrs(data__epoch=epoch(job.get("bound")), class_="bound", title=BOUND_MEANING)}>'
                      f'{clock(job.get("bound"), now)}</span>'
                      + (f' <span class="missed">missed: predicted past it</span> <small>{esc(BOUND_MEANING)}</small>'
                         if past_bound(job) else "")),
            ("Finished", clock(job.get("finish"), now)),
            ("Why waiting", f'<span{attrs(data__code=waiting.get("code", ""), class_="reason")}>{esc(reason_words(waiting)) or "—"}</span>'),
            ("Preemptions / lost steps", f'{job.get("preemptions", 0)} / {job.get("lost_steps", 0)}')]
    if job.get("error"):
        rows.append(("Error", esc(job["error"])))
    return "<dl class=\"facts\">" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


CURVE_POINTS = 400  # points of a reported metric drawn at most


def reported_curve(reports: list[dict] | None) -> tuple[str, list[tuple[float, float]]] | None:
    """The metric to draw from the reports a user loop made (``loss`` where there is one, else the first
    number it reports) and its points (step, value); None when it reported no number."""
    rows = [r for r in reports or () if isinstance(r.get("step"), (int, float))]
    names = [k for r in rows for k, v in r.items()
             if k not in ("step", "attempt") and isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not names:
        return None
    name = "loss" if "loss" in names else names[0]
    points = [(float(r["step"]), float(r[name])) for r in rows
              if isinstance(r.get(name), (int, float)) and not isinstance(r[name], bool)]
    every = -(-len(points) // CURVE_POINTS)  # a run may log 100,000 reports: the chart keeps every n-th and the last
    return name, points if every <= 1 else points[::every] + ([points[-1]] if (len(points) - 1) % every else [])


def _metrics(job: dict, history: list[dict], now: float, reports: list[dict] | None = None) -> str:
    """Progress over time (steps at each refresh seen), the metric the loop reports against its steps (its
    current run's reports), and the metrics the run reported at its end."""
    steps = [(h["t"], float(h["steps"])) for h in history if h.get("steps") is not None]
    chart = line_chart("metrics", [("steps", steps)], now=now, empty="no progress seen yet")
    curve = reported_curve(reports)
    if curve is not None:
        chart += (f'<h3>{esc(curve[0])} by step (this run\'s reports)</h3>'
                  + line_chart("reported", [("reported", curve[1])], now=now, x_steps=True))
    final = job.get("metrics") or {}
    numbers = "".join(f'<tr{attrs(data__metric=k)}><td>{esc(k)}</td><td>{esc(v)}</td></tr>' for k, v in sorted(final.items()))
    table_ = f'<table id="final-metrics"><tbody>{numbers}</tbody></table>' if numbers else ""
    return chart + table_


def job_fragment(job: dict, history: list[dict], now: float, session: Session | None = None,
                 reports: list[dict] | None = None) -> str:
    predicted = [(h["t"], h["predicted"]) for h in history if h.get("predicted") is not None]
    if job.get("first_predicted") is not None and job.get("submit") is not None:
        predicted = [(job["submit"], job["first_predicted"])] + [p for p in predicted if p[0] > job["submit"]]
    actual = ("actual", job["finish"]) if job.get("finish") is not None and job["state"] == "finished" else None
    inner = (f'<div{attrs(id="job", data__job__id=job["id"], data__state=job["state"])}>'
             + _facts(job, now)
             + "<h2>Predicted finish over time</h2>"
             + line_chart("prediction-history", [("predicted", predicted)], now=now, y_time=True, level=actual,
                          empty="no prediction yet")
             + "<h2>Progress and metrics</h2>" + _metrics(job, history, now, reports)
             + "<h2>Runs</h2>" + _runs_table(job, now) + "</div>")
    return _live("job-live", f"{FRAGMENT}/jobs/{job['id']}", inner, session)


def logs_fragment(job_id: int, logs: dict | None, session: Session | None = None) -> str:
    """The tail of the job's newest run's logs (each rank's lines prefixed when there are several)."""
    text = ""
    if logs and logs.get("attempt") is not None:
        ranks = logs.get("ranks", {})
        lines: list[str] = []
        for rank, part in ranks.items():
            for line in part.get("text", "").splitlines():
                lines.append(f"[rank {rank}] {line}" if len(ranks) > 1 else line)
        text = "\n".join(lines[-LOG_LINES:])
        label = f'attempt {logs["attempt"]}'
    else:
        label = "no logs yet (built-in workloads log to Ray's worker logs)"
    inner = f'<p class="hint">{esc(label)}</p><pre id="logs"><span>{esc(text)}</span></pre>'
    return _live("logs-live", f"{FRAGMENT}/jobs/{job_id}/logs", inner, session)


def job_page(job: dict, history: list[dict], now: float, logs: dict | None, session: Session | None = None,
             may_cancel: bool = False, message: str | None = None, error: bool = False) -> str:
    cancel = ""
    if session is not None and may_cancel and job["state"] in ("queued", "running", "stopping"):
        cancel = (f'<form id="cancel" method="post"{attrs(action=PREFIX + "/jobs/" + str(job["id"]) + "/cancel")}>'
                  f'<input type="hidden" name="csrf"{attrs(value=session.csrf)}><button type="submit">Cancel job</button></form>')
    body = (f'<h1>{esc(job["name"])} <small>#{job["id"]}</small></h1>' + flash(message, error) + cancel
            + job_fragment(job, history, now, session, (logs or {}).get("metrics"))
            + "<h2>Logs</h2>" + logs_fragment(job["id"], logs, session))
    return _page(f'Job {job["id"]}', "jobs", body, session)


def not_found_page(what: str, session: Session | None = None) -> str:
    return _page("Not found", "jobs", f'<h1>Not found</h1><p class="flash error">{esc(what)}</p>', session)


# -- tenants ---------------------------------------------------------------------------
def tenant_rows(snapshot: dict) -> list[dict]:
    """Per tenant: quota, GPUs used now, borrowed (used above quota), lent (its idle quota that borrowers
    hold), jobs waiting, and the runs a minimum runtime protects now. Jobs of no tenant are ``guests``."""
    view = snapshot["tenants"]
    declared = (view.get("tenants") or {}).get("tenants") or {}
    usage = view.get("usage") or {}
    now = snapshot["now"]
    protected: dict[str, int] = {}
    for job in snapshot["jobs"]:
        until = job.get("protected_until")
        if until is not None and until > now:
            key = job.get("tenant") or ""
            protected[key] = protected.get(key, 0) + 1
    on_quota: dict[str, int] = {}
    for job in snapshot["jobs"]:
        if job["state"] == "queued" and (job.get("waiting") or {}).get("code") == "tenant-quota":
            key = job.get("tenant") or ""
            on_quota[key] = on_quota.get(key, 0) + 1
    names = list(declared) + sorted(set(usage) - set(declared) - {""}) + ([""] if "" in usage else [])
    rows = []
    for name in names:
        quota = declared.get(name, {}).get("quota")
        used = usage.get(name, {}).get("gpus", 0)
        rows.append({"tenant": name, "quota": quota, "used": used,
                     "borrowed": max(0, used - quota) if quota is not None else 0,
                     "idle": max(0, quota - used) if quota is not None else 0,
                     "waiting": usage.get(name, {}).get("waiting", 0), "on_quota": on_quota.get(name, 0),
                     "protected": protected.get(name, 0)})
    borrowed = sum(r["borrowed"] for r in rows) + sum(r["used"] for r in rows if r["quota"] is None)
    for r in rows:  # borrowers hold idle quota, counted against the lenders in order
        r["lent"] = min(r["idle"], borrowed)
        borrowed -= r["lent"]
    return rows


def _tenant_cell(row: dict, col: str) -> str:
    value = "—" if row[col] is None else row[col]
    if col == "waiting":  # how many of them wait on their tenant's quota (code tenant-quota)
        quota = row["on_quota"]
        return f'<td{attrs(data__col=col, data__on__quota=quota, title=f"{quota} of them on quota")}>{value}</td>'
    return f"<td{attrs(data__col=col)}>{value}</td>"


def tenants_fragment(snapshot: dict, session: Session | None = None) -> str:
    view = snapshot["tenants"]
    if not view.get("tenants") and not view.get("usage"):
        inner = "<p>No tenants file is in force and no job is active (<code>pcs-ray tenants apply</code>).</p>"
    else:
        rows = "".join(
            f'<tr{attrs(data__tenant=r["tenant"])}><td data-col="tenant">{esc(r["tenant"] or "guests (no tenant)")}</td>'
            + "".join(_tenant_cell(r, c) for c in ("quota", "used", "borrowed", "lent", "waiting", "protected"))
            + "</tr>" for r in tenant_rows(snapshot))
        since = view.get("since")
        inner = ((f'<p>Tenants file in force since {clock(since, snapshot["now"])}.</p>' if since else
                  "<p>No tenants file is in force: usage by the tenants jobs name.</p>")
                 + '<table id="tenants"><thead><tr><th>Tenant</th><th>Quota</th><th>Used</th><th>Borrowed</th>'
                 '<th>Lent</th><th>Waiting jobs</th><th>Protected runs</th></tr></thead>'
                 f"<tbody>{rows}</tbody></table>" + _tenant_chart(snapshot))
    return _live("tenants-live", f"{FRAGMENT}/tenants", inner, session)


def _tenant_chart(snapshot: dict) -> str:
    """GPUs each tenant held over time (one series per tenant, as seen at each snapshot while a dashboard was open)."""
    history = snapshot.get("tenant_history") or []
    names = sorted({name for point in history for name in point["used"]})
    now = snapshot["now"]
    series = []
    for i, name in enumerate(names):
        points = [(p["t"], float(p["used"].get(name, 0))) for p in history]
        if points and points[-1][0] < now:
            points.append((now, points[-1][1]))  # the last count holds until now
        series.append((f"series-{i % 6}", points))
    legend = "".join(f'<span{attrs(class_=f"series-{i % 6}")}>{esc(name or "guests")}</span>' for i, name in enumerate(names))
    return ("<h2>GPUs held over time</h2>" + f'<p class="legend">{legend}</p>'
            + line_chart("tenants-history", series, now=now, empty="no history yet", floor=0.0))


def tenants_page(snapshot: dict, session: Session | None = None) -> str:
    return _page("Tenants", "tenants", "<h1>Tenants</h1>" + tenants_fragment(snapshot, session), session)


# -- policy ----------------------------------------------------------------------------
def _params(d: dict) -> str:
    return "<dl class=\"params\">" + "".join(
        f"<dt>{esc(k)}</dt><dd>{_params(v) if isinstance(v, dict) else esc(v)}</dd>" for k, v in d.items()) + "</dl>"


def policy_fragment(snapshot: dict, session: Session | None = None) -> str:
    config, now = snapshot["config"], snapshot["now"]
    policy = config.get("policy") or {}
    placement = config.get("placement")
    current = (f'<div{attrs(id="policy", data__policy=policy.get("policy", ""), data__since=epoch(config.get("since")))}>'
               f'<p>Policy <strong class="name">{esc(policy.get("policy", "?"))}</strong> in force since '
               f'{clock(config.get("since"), now)} (from {esc(config.get("source"))}).</p>'
               f'<h2>Parameters</h2>{_params(policy)}'
               f'<h2>Placement</h2>{_params(placement) if isinstance(placement, dict) else esc(placement)}</div>')
    rows = "".join(
        f'<tr{attrs(data__kind=h["kind"], data__epoch=epoch(h["t"]))}><td>{clock(h["t"], now)}</td><td>{esc(h["kind"])}</td>'
        f'<td>{esc(h.get("source", ""))}</td><td>{esc(h["what"])}</td></tr>'
        for h in reversed(snapshot.get("history", [])))
    history = ('<h2>Configuration history</h2><table id="config-history"><thead><tr><th>When</th><th>What</th>'
               f'<th>Source</th><th>Details</th></tr></thead><tbody>{rows}</tbody></table>')
    return _live("policy-live", f"{FRAGMENT}/policy", current + history, session)


def policy_page(snapshot: dict, session: Session | None = None) -> str:
    return _page("Policy", "policy", "<h1>Policy</h1>" + policy_fragment(snapshot, session), session)

