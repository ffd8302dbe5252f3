"""The dashboard's pages and their live fragments, each a pure function of a snapshot (:mod:`.snapshot`).

Every page is the shell (navigation, sign-out) around a live region whose
fragment URL htmx polls every second; the fragment is the region itself, so
the first paint and each refresh are the same HTML. ``Session`` says who is
signed in (its CSRF token goes into every form and htmx header); a page built
without one (``pcs-ray report --html``) is static: no polling, no actions.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

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
    EMPTY,
    PREFIX,
    attrs,
    blank,
    clock,
    epoch,
    flash,
    join,
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


def _page(title: str, current: str, body: Markup, session: Session | None) -> Markup:
    return shell(title, body, current=current, csrf=session.csrf if session else None,
                 caller=session.label if session else "", live=session is not None)


def _live(region: str, url: str, inner: Markup, session: Session | None) -> Markup:
    return live_region(region, url, inner) if session is not None else Markup("<div{}>{}</div>").format(
        attrs(id=region), inner)


# -- sign-in ---------------------------------------------------------------------------
def login_page(error: str | None = None, user: str = "", tenant: str = "") -> Markup:
    """The sign-in form: the cluster's token and who you are (as ``$PCS_RAY_USER``, ``$PCS_RAY_TENANT``)."""
    refused = Markup('<p class="error">{}</p>').format(error) if error else EMPTY
    body = Markup('<h1>Sign in to pcs-ray</h1>{}<form id="login" method="post"{}>'
                  '<label>Cluster token <input type="password" name="token" autocomplete="off" required></label>'
                  '<label>User <input type="text" name="user"{} maxlength="100"></label>'
                  '<label>Tenant <input type="text" name="tenant"{} maxlength="100"></label>'
                  '<button type="submit">Sign in</button></form>'
                  "<p class=\"hint\">The token is the Ray cluster's (<code>~/.ray/auth_token</code>); "
                  "<code>pcs-ray dashboard</code> prints a one-time link instead.</p>"
                  ).format(refused, attrs(action=f"{PREFIX}/login"), attrs(value=user), attrs(value=tenant))
    return shell("Sign in", body, live=False, styled=False)


# -- cluster ---------------------------------------------------------------------------
def cluster_fragment(snapshot: dict, session: Session | None = None) -> Markup:
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
                label = EMPTY if job is None else Markup("<a{}>#{}</a>").format(
                    attrs(href=PREFIX + "/jobs/" + str(job["id"])), job["id"])
                cells.append(Markup('<div{}><span class="index">{}</span>{}</div>').format(
                    attrs(class_=f"gpu {state}", data__gpu=gpu, data__state=state,
                          data__job__id="" if job is None else job["id"], data__speed__class=info["speed_class"],
                          title=title), info["index"], label))
            cls = "nvlink-group" if len(group) > 1 else "nvlink-group single"
            groups.append(Markup("<div{}>{}</div>").format(attrs(class_=cls, data__gpus=" ".join(group)), join(cells)))
        busy = sum(1 for g in node["gpus"] if g["name"] in held)
        nodes.append(Markup("<section{}><h2>{} <small>{} / {} busy</small></h2>{}</section>").format(
            attrs(class_="node", data__node=node["name"]), node["name"], busy, len(node["gpus"]), join(groups)))
    legend = Markup('<p class="legend"><span class="gpu idle">idle</span><span class="gpu busy">busy</span>'
                    '<span class="gpu stopping">stopping</span> · a box of several GPUs is an NVLink group; '
                    'speed class from the GPU\'s slowdown scores (fast, nominal, slow)</p>')
    return _live("cluster", f"{FRAGMENT}/cluster", legend + join(nodes), session)


def cluster_page(snapshot: dict, session: Session | None = None) -> Markup:
    return _page("Cluster", "cluster", Markup("<h1>Cluster</h1>") + cluster_fragment(snapshot, session), session)


# -- jobs ------------------------------------------------------------------------------
def jobs_fragment(snapshot: dict, q: JobsQuery, session: Session | None = None) -> Markup:
    return _live("jobs-live", q.url(f"{FRAGMENT}/jobs"), table(snapshot, q), session)


def jobs_page(snapshot: dict, q: JobsQuery, session: Session | None = None, message: str | None = None,
              error: bool = False) -> Markup:
    body = Markup("<h1>Jobs</h1>") + flash(message, error) + filters(q, snapshot["jobs"]) + jobs_fragment(
        snapshot, q, session)
    return _page("Jobs", "jobs", body, session)


# -- timeline --------------------------------------------------------------------------
def timeline_fragment(snapshot: dict, session: Session | None = None) -> Markup:
    return _live("timeline-live", f"{FRAGMENT}/timeline", timeline_svg(snapshot), session)


def timeline_page(snapshot: dict, session: Session | None = None) -> Markup:
    body = Markup("<h1>Timeline</h1><p class=\"legend\"><span class=\"bar past\">ran</span><span class=\"bar running\">"
                  "running</span><span class=\"bar predicted\">predicted (the coordinator's forecast, as <code>pcs-ray "
                  "predict</code> gives it)</span> · the line is now</p>") + timeline_fragment(snapshot, session)
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


def _runs_table(job: dict, now: float) -> Markup:
    rows = join(
        Markup('<tr{}><td data-col="attempt">{}</td><td data-col="gpus">{}</td><td data-col="start"{}>{}</td>'
               '<td data-col="end"{}>{}</td><td data-col="why">{}</td><td data-col="checkpoint-step">{}</td></tr>'
               ).format(attrs(data__attempt=r["attempt"]), r["attempt"], ", ".join(r["gpus"]),
                        attrs(data__epoch=epoch(r["start"])), clock(r["start"], now),
                        attrs(data__epoch=epoch(r["end"])), clock(r["end"], now) if r["end"] else "running",
                        r["why"], blank(r["step"]))
        for r in runs(job))
    return Markup('<table id="runs"><thead><tr><th>Attempt</th><th>GPUs</th><th>Start</th><th>End</th>'
                  '<th>Why it stopped</th><th>Checkpoint step</th></tr></thead><tbody>{}</tbody></table>').format(rows)


def _time(cls: str, t: float | None, now: float) -> Markup:
    return Markup("<span{}>{}</span>").format(attrs(data__epoch=epoch(t), class_=cls), clock(t, now))


def _facts(job: dict, now: float) -> Markup:
    """The job's facts; each value is text or a fragment, and the fragments are :class:`Markup`."""
    total = job.get("total_steps") or 0
    waiting = job.get("waiting") or {}
    missed = Markup(' <span class="missed">missed: predicted past it</span> <small>{}</small>').format(
        BOUND_MEANING) if past_bound(job) else EMPTY
    rows = [("State", Markup("<span{}>{}</span>").format(attrs(class_="state " + job["state"]), job["state"])),
            ("Tenant / user", f'{job.get("tenant") or "—"} / {job.get("user") or "—"}'),
            ("Workload", blank(job.get("workload"))),
            ("GPUs", f'{", ".join(job["gpus"]) or "none"} (demand {"–".join(map(str, job.get("demand") or []))})'),
            ("Progress", Markup("<progress{}></progress> {} / {} steps").format(
                attrs(max=max(total, 1), value=job["steps"]), job["steps"], total)),
            ("Submitted", clock(job.get("submit"), now)),
            ("Start" if job["state"] != "queued" else "Predicted start",
             _time("predicted-start", job.get("start") if job["state"] != "queued" else job.get("predicted_start"), now)),
            ("Predicted finish", _time("predicted-finish", predicted_finish(job), now)),
            ("Bound", Markup("<span{}>{}</span>{}").format(
                attrs(data__epoch=epoch(job.get("bound")), class_="bound", title=BOUND_MEANING),
                clock(job.get("bound"), now), missed)),
            ("Finished", clock(job.get("finish"), now)),
            ("Why waiting", Markup("<span{}>{}</span>").format(
                attrs(data__code=waiting.get("code", ""), class_="reason"), reason_words(waiting) or "—")),
            ("Preemptions / lost steps", f'{job.get("preemptions", 0)} / {job.get("lost_steps", 0)}')]
    if job.get("error"):
        rows.append(("Error", job["error"]))
    return Markup('<dl class="facts">{}</dl>').format(join(Markup("<dt>{}</dt><dd>{}</dd>").format(k, v)
                                                           for k, v in rows))


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


def _metrics(job: dict, history: list[dict], now: float, reports: list[dict] | None = None) -> Markup:
    """Progress over time (steps at each refresh seen), the metric the loop reports against its steps (its
    current run's reports), and the metrics the run reported at its end."""
    steps = [(h["t"], float(h["steps"])) for h in history if h.get("steps") is not None]
    chart = line_chart("metrics", [("steps", steps)], now=now, empty="no progress seen yet")
    curve = reported_curve(reports)
    if curve is not None:
        chart += Markup("<h3>{} by step (this run's reports)</h3>").format(curve[0]) + line_chart(
            "reported", [("reported", curve[1])], now=now, x_steps=True)
    final = job.get("metrics") or {}
    numbers = join(Markup("<tr{}><td>{}</td><td>{}</td></tr>").format(attrs(data__metric=k), k, blank(v))
                   for k, v in sorted(final.items()))
    table_ = Markup('<table id="final-metrics"><tbody>{}</tbody></table>').format(numbers) if numbers else EMPTY
    return chart + table_


def job_fragment(job: dict, history: list[dict], now: float, session: Session | None = None,
                 reports: list[dict] | None = None) -> Markup:
    predicted = [(h["t"], h["predicted"]) for h in history if h.get("predicted") is not None]
    if job.get("first_predicted") is not None and job.get("submit") is not None:
        predicted = [(job["submit"], job["first_predicted"])] + [p for p in predicted if p[0] > job["submit"]]
    actual = ("actual", job["finish"]) if job.get("finish") is not None and job["state"] == "finished" else None
    inner = Markup("<div{}>{}<h2>Predicted finish over time</h2>{}<h2>Progress and metrics</h2>{}<h2>Runs</h2>{}</div>"
                   ).format(attrs(id="job", data__job__id=job["id"], data__state=job["state"]), _facts(job, now),
                            line_chart("prediction-history", [("predicted", predicted)], now=now, y_time=True,
                                       level=actual, empty="no prediction yet"),
                            _metrics(job, history, now, reports), _runs_table(job, now))
    return _live("job-live", f"{FRAGMENT}/jobs/{job['id']}", inner, session)


def logs_fragment(job_id: int, logs: dict | None, session: Session | None = None) -> Markup:
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
    inner = Markup('<p class="hint">{}</p><pre id="logs"><span>{}</span></pre>').format(label, text)
    return _live("logs-live", f"{FRAGMENT}/jobs/{job_id}/logs", inner, session)


def job_page(job: dict, history: list[dict], now: float, logs: dict | None, session: Session | None = None,
             may_cancel: bool = False, message: str | None = None, error: bool = False) -> Markup:
    cancel = EMPTY
    if session is not None and may_cancel and job["state"] in ("queued", "running", "stopping"):
        cancel = Markup('<form id="cancel" method="post"{}><input type="hidden" name="csrf"{}>'
                        '<button type="submit">Cancel job</button></form>').format(
            attrs(action=PREFIX + "/jobs/" + str(job["id"]) + "/cancel"), attrs(value=session.csrf))
    body = Markup("<h1>{} <small>#{}</small></h1>{}{}{}<h2>Logs</h2>{}").format(
        job["name"], job["id"], flash(message, error), cancel,
        job_fragment(job, history, now, session, (logs or {}).get("metrics")), logs_fragment(job["id"], logs, session))
    return _page(f'Job {job["id"]}', "jobs", body, session)


def not_found_page(what: str, session: Session | None = None) -> Markup:
    return _page("Not found", "jobs", Markup('<h1>Not found</h1><p class="flash error">{}</p>').format(what), session)


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


def _tenant_cell(row: dict, col: str) -> Markup:
    value = "—" if row[col] is None else row[col]
    if col == "waiting":  # how many of them wait on their tenant's quota (code tenant-quota)
        quota = row["on_quota"]
        return Markup("<td{}>{}</td>").format(
            attrs(data__col=col, data__on__quota=quota, title=f"{quota} of them on quota"), value)
    return Markup("<td{}>{}</td>").format(attrs(data__col=col), value)


def tenants_fragment(snapshot: dict, session: Session | None = None) -> Markup:
    view = snapshot["tenants"]
    if not view.get("tenants") and not view.get("usage"):
        inner = Markup("<p>No tenants file is in force and no job is active (<code>pcs-ray tenants apply</code>).</p>")
    else:
        rows = join(
            Markup('<tr{}><td data-col="tenant">{}</td>{}</tr>').format(
                attrs(data__tenant=r["tenant"]), r["tenant"] or "guests (no tenant)",
                join(_tenant_cell(r, c) for c in ("quota", "used", "borrowed", "lent", "waiting", "protected")))
            for r in tenant_rows(snapshot))
        since = view.get("since")
        in_force = (Markup("<p>Tenants file in force since {}.</p>").format(clock(since, snapshot["now"])) if since else
                    Markup("<p>No tenants file is in force: usage by the tenants jobs name.</p>"))
        inner = Markup('{}<table id="tenants"><thead><tr><th>Tenant</th><th>Quota</th><th>Used</th><th>Borrowed</th>'
                       "<th>Lent</th><th>Waiting jobs</th><th>Protected runs</th></tr></thead>"
                       "<tbody>{}</tbody></table>{}").format(in_force, rows, _tenant_chart(snapshot))
    return _live("tenants-live", f"{FRAGMENT}/tenants", inner, session)


def _tenant_chart(snapshot: dict) -> Markup:
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
    legend = join(Markup("<span{}>{}</span>").format(attrs(class_=f"series-{i % 6}"), name or "guests")
                  for i, name in enumerate(names))
    return Markup('<h2>GPUs held over time</h2><p class="legend">{}</p>{}').format(
        legend, line_chart("tenants-history", series, now=now, empty="no history yet", floor=0.0))


def tenants_page(snapshot: dict, session: Session | None = None) -> Markup:
    return _page("Tenants", "tenants", Markup("<h1>Tenants</h1>") + tenants_fragment(snapshot, session), session)


# -- policy ----------------------------------------------------------------------------
def _params(d: dict) -> Markup:
    return Markup('<dl class="params">{}</dl>').format(join(
        Markup("<dt>{}</dt><dd>{}</dd>").format(k, _params(v) if isinstance(v, dict) else blank(v))
        for k, v in d.items()))


def policy_fragment(snapshot: dict, session: Session | None = None) -> Markup:
    config, now = snapshot["config"], snapshot["now"]
    policy = config.get("policy") or {}
    placement = config.get("placement")
    current = Markup('<div{}><p>Policy <strong class="name">{}</strong> in force since {} (from {}).</p>'
                     "<h2>Parameters</h2>{}<h2>Placement</h2>{}</div>").format(
        attrs(id="policy", data__policy=policy.get("policy", ""), data__since=epoch(config.get("since"))),
        policy.get("policy", "?"), clock(config.get("since"), now), blank(config.get("source")), _params(policy),
        _params(placement) if isinstance(placement, dict) else blank(placement))
    rows = join(
        Markup("<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>").format(
            attrs(data__kind=h["kind"], data__epoch=epoch(h["t"])), clock(h["t"], now), h["kind"],
            h.get("source", ""), h["what"])
        for h in reversed(snapshot.get("history", [])))
    history = Markup('<h2>Configuration history</h2><table id="config-history"><thead><tr><th>When</th><th>What</th>'
                     "<th>Source</th><th>Details</th></tr></thead><tbody>{}</tbody></table>").format(rows)
    return _live("policy-live", f"{FRAGMENT}/policy", current + history, session)


def policy_page(snapshot: dict, session: Session | None = None) -> Markup:
    return _page("Policy", "policy", Markup("<h1>Policy</h1>") + policy_fragment(snapshot, session), session)

