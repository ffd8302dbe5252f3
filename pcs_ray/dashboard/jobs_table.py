"""The jobs page's table: filters, sorting and a page of at most ``PAGE_ROWS`` rows, whatever the number of jobs.

A row holds one job's name, tenant, user, state, GPUs held / demand, progress,
predicted start and finish, the policy's bound, the typed reason a queued job
waits (in words, the code in ``data-code``), preemptions and lost steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from markupsafe import Markup

from pcs_ray.contract import BOUND_MEANING, past_bound
from pcs_ray.dashboard.markup import EMPTY, PREFIX, attrs, clock, epoch, join

PAGE_ROWS = 100
STATES = ("queued", "running", "stopping", "finished", "cancelled", "failed")
# Sort keys: the column, and how a job reads for it (missing values sort last).
SORTS = {
    "id": lambda j: j["id"],
    "name": lambda j: j["name"].lower(),
    "tenant": lambda j: (j.get("tenant") or "").lower(),
    "user": lambda j: (j.get("user") or "").lower(),
    "state": lambda j: j["state"],
    "gpus": lambda j: len(j["gpus"]),
    "progress": lambda j: j["steps"] / j["total_steps"] if j.get("total_steps") else 0.0,
    "predicted-start": lambda j: predicted_start(j),
    "predicted-finish": lambda j: predicted_finish(j),
    "bound": lambda j: j.get("bound"),
    "preemptions": lambda j: j.get("preemptions", 0),
    "lost-steps": lambda j: j.get("lost_steps", 0),
    "submit": lambda j: j.get("submit"),
}
COLUMNS = (("name", "Name"), ("tenant", "Tenant"), ("user", "User"), ("state", "State"), ("gpus", "GPUs"),
           ("progress", "Progress"), ("predicted-start", "Start"), ("predicted-finish", "Finish"),
           ("bound", "Bound"), ("reason", "Why waiting"), ("preemptions", "Preempted"), ("lost-steps", "Lost steps"))


@dataclass(frozen=True)
class JobsQuery:
    """What the page was asked for (``?state=&tenant=&user=&sort=&order=&page=``), cleaned."""

    state: str = ""
    tenant: str = ""
    user: str = ""
    sort: str = "id"
    order: str = "asc"
    page: int = 1

    @classmethod
    def parse(cls, query) -> JobsQuery:
        """From a request's query mapping; what cannot be read falls back to the default."""
        state = query.get("state", "")
        sort = query.get("sort", "id")
        try:
            page = max(1, int(query.get("page", "1")))
        except ValueError:
            page = 1
        return cls(state if state in STATES else "", query.get("tenant", "")[:100], query.get("user", "")[:100],
                   sort if sort in SORTS else "id", "desc" if query.get("order") == "desc" else "asc", page)

    def url(self, path: str = f"{PREFIX}/jobs", **change) -> str:
        values = {**self.__dict__, **change}
        kept = {k: v for k, v in values.items() if v not in ("", None) and not (k == "page" and v == 1)}
        return path + ("?" + urlencode(kept) if kept else "")


def predicted_start(job: dict) -> float | None:
    """When the job starts: for a queued job the stored forecast's (when its latest whole play first gives it
    GPUs; None until a play has), else its first start."""
    return job.get("predicted_start") if job["state"] == "queued" else job.get("start")


def predicted_finish(job: dict) -> float | None:
    """The stored forecast's finish; once the job ended, when it did (as ``pcs-ray predict`` gives it)."""
    return job.get("finish") if job["state"] in ("finished", "cancelled", "failed") else job.get("predicted_completion")


def select(jobs: list[dict], q: JobsQuery) -> tuple[list[dict], int, int]:
    """The page's rows, how many jobs pass the filters, and the page actually shown (clamped)."""
    chosen = [j for j in jobs if (not q.state or j["state"] == q.state)
              and (not q.tenant or (j.get("tenant") or "") == q.tenant)
              and (not q.user or (j.get("user") or "") == q.user)]
    key = SORTS[q.sort]
    present = [j for j in chosen if key(j) is not None]
    missing = [j for j in chosen if key(j) is None]
    present.sort(key=lambda j: (key(j), j["id"]), reverse=q.order == "desc")
    ordered = present + missing
    total = len(ordered)
    pages = max(1, -(-total // PAGE_ROWS))
    page = min(q.page, pages)
    return ordered[(page - 1) * PAGE_ROWS: page * PAGE_ROWS], total, page


def reason_words(waiting: dict | None) -> str:
    return "" if not waiting else waiting.get("text") or waiting.get("code", "")


def row(job: dict, now: float) -> Markup:
    held, demand = len(job["gpus"]), job.get("demand") or [None, None]
    want = demand[1] if demand[0] in (None, demand[1]) else f"{demand[0]}–{demand[1]}"
    total = job.get("total_steps") or 0
    share = job["steps"] / total if total else 0.0
    start, finish, bound = predicted_start(job), predicted_finish(job), job.get("bound")
    waiting = job.get("waiting") or {}
    cells = [
        Markup('<td data-col="name"><a{}>{}</a> <span class="id">#{}</span></td>').format(
            attrs(href=PREFIX + "/jobs/" + str(job["id"])), job["name"], job["id"]),
        Markup('<td data-col="tenant">{}</td>').format(job.get("tenant") or ""),
        Markup('<td data-col="user">{}</td>').format(job.get("user") or ""),
        Markup('<td data-col="state"><span{}>{}</span></td>').format(attrs(class_="state " + job["state"]),
                                                                     job["state"]),
        Markup('<td data-col="gpus"{}>{} / {}</td>').format(attrs(title=", ".join(job["gpus"]) or None), held, want),
        Markup('<td data-col="progress"{}><progress{}></progress> {:.0%}</td>').format(
            attrs(data__steps=job["steps"], data__total__steps=total), attrs(max=1, value=f"{share:.4f}"), share),
        Markup('<td data-col="predicted-start"{}>{}</td>').format(attrs(data__epoch=epoch(start)), clock(start, now)),
        Markup('<td data-col="predicted-finish"{}>{}</td>').format(attrs(data__epoch=epoch(finish)),
                                                                    clock(finish, now)),
        bound_cell(bound, past_bound(job), now),
        Markup('<td data-col="reason"{}>{}</td>').format(attrs(data__code=waiting.get("code", "")),
                                                          reason_words(waiting)),
        Markup('<td data-col="preemptions">{}</td>').format(job.get("preemptions", 0)),
        Markup('<td data-col="lost-steps">{}</td>').format(job.get("lost_steps", 0)),
    ]
    return Markup("<tr{}>{}</tr>").format(
        attrs(data__job__id=job["id"], data__state=job["state"], data__tenant=job.get("tenant") or "",
              data__user=job.get("user") or ""), join(cells))


def bound_cell(bound: float | None, missed: bool, now: float) -> Markup:
    """The bound's cell: its time, marked where the predicted finish is past it (the meaning on hover)."""
    mark = Markup(' <span class="missed">missed</span>') if missed else EMPTY
    return Markup('<td data-col="bound"{}>{}{}</td>').format(
        attrs(data__epoch=epoch(bound), data__missed="1" if missed else None), clock(bound, now), mark)


def header(q: JobsQuery) -> Markup:
    out = []
    for key, label in COLUMNS:
        explain = BOUND_MEANING if key == "bound" else None
        if key in SORTS:
            order = "desc" if q.sort == key and q.order == "asc" else "asc"
            mark = (" ▲" if q.order == "asc" else " ▼") if q.sort == key else ""
            out.append(Markup("<th{}><a{}>{}{}</a></th>").format(
                attrs(data__col=key, title=explain), attrs(href=q.url(sort=key, order=order, page=1)), label, mark))
        else:
            out.append(Markup("<th{}>{}</th>").format(attrs(data__col=key, title=explain), label))
    return Markup("<tr>{}</tr>").format(join(out))


def pager(q: JobsQuery, total: int, page: int) -> Markup:
    pages = max(1, -(-total // PAGE_ROWS))
    first = (page - 1) * PAGE_ROWS + 1 if total else 0
    last = min(total, page * PAGE_ROWS)
    prev = Markup('<a rel="prev"{}>‹ previous</a>').format(attrs(href=q.url(page=page - 1))) if page > 1 else EMPTY
    nxt = Markup('<a rel="next"{}>next ›</a>').format(attrs(href=q.url(page=page + 1))) if page < pages else EMPTY
    return Markup('<nav class="pager"{}>{}<span>rows {}–{} of <span data-total="{}">{}</span>, page {} of {}</span>'
                  "{}</nav>").format(attrs(data__page=page, data__pages=pages), prev, first, last, total, total, page,
                                     pages, nxt)


def filters(q: JobsQuery, jobs: list[dict]) -> Markup:
    """The filter form (a GET: it changes nothing)."""
    tenants = sorted({j.get("tenant") or "" for j in jobs} - {""})
    users = sorted({j.get("user") or "" for j in jobs} - {""})

    def select_of(name: str, options, chosen: str) -> Markup:
        opts = [Markup('<option value=""{}>any {}</option>').format(EMPTY if chosen else Markup(" selected"), name)]
        opts += [Markup("<option{}>{}</option>").format(attrs(value=o, selected="selected" if o == chosen else None), o)
                 for o in options]
        return Markup("<label>{} <select{}>{}</select></label>").format(name, attrs(name=name), join(opts))

    return Markup('<form id="filters" method="get"{}>{}{}{}<input type="hidden" name="sort"{}>'
                  '<input type="hidden" name="order"{}><button type="submit">Filter</button></form>').format(
        attrs(action=f"{PREFIX}/jobs"), select_of("state", STATES, q.state), select_of("tenant", tenants, q.tenant),
        select_of("user", users, q.user), attrs(value=q.sort), attrs(value=q.order))


def table(snapshot: dict, q: JobsQuery) -> Markup:
    """The live part: the table of the page asked for, its total and its pager."""
    rows, total, page = select(snapshot["jobs"], q)
    now = snapshot["now"]
    body = join(row(j, now) for j in rows)
    return Markup('<table id="jobs"><thead>{}</thead><tbody>{}</tbody></table>{}').format(header(q), body,
                                                                                          pager(q, total, page))
