"""The forecast timeline: an SVG Gantt with one row per GPU, the past as it ran, the present and the forecast.

* past bars: each ended run of a job (its journal segments) on each GPU it held;
* running bars: each run going on now, from its start to now;
* predicted bars: a running job from now to its predicted finish on the GPUs it holds, carrying the
  policy's bound; the finish is the coordinator's stored forecast (what ``pcs-ray predict`` prints),
  read from the job view, never computed here.

Queued jobs have no GPUs until placement gives them some, so their predicted bars (from the start the
forecast gives them to their predicted finish, with the bound) are drawn below the GPU rows, one lane a
job (``g.queued-job``). The view is bounded: runs that ended before the window and queued jobs past
``MAX_QUEUED`` (earliest predicted finish first) are left out.
"""

from __future__ import annotations

from markupsafe import Markup

from pcs_ray.dashboard.markup import EMPTY, PREFIX, attrs, clock, epoch, join

PAST_S = 1800.0  # how far back the window reaches
MIN_PAST_S = 120.0
MIN_FUTURE_S = 60.0  # the axis reaches at least this far past now, so that "now" is not its edge
END_MARGIN = 0.02  # and this share of its span past the last thing it draws
MAX_FUTURE_S = 7 * 24 * 3600.0
MAX_QUEUED = 50
LABEL_W, WIDTH, ROW_H, AXIS_H = 110, 1100, 22, 24


def _bars(snapshot: dict, since: float) -> tuple[dict[str, list[dict]], list[dict]]:
    """Per GPU its bars, and the queued jobs with a forecast (earliest finish first, at most MAX_QUEUED)."""
    now = snapshot["now"]
    rows: dict[str, list[dict]] = {}
    queued = []
    for job in snapshot["jobs"]:
        for seg in job.get("segments", ()):
            end = seg["end"]
            if end is not None and end < since:
                continue
            kind = "past" if end is not None else "running"
            for gpu in seg["gpus"]:
                rows.setdefault(gpu, []).append({"kind": kind, "job": job, "start": seg["start"],
                                                 "finish": end if end is not None else now})
        finish = job.get("predicted_completion")
        if job["state"] in ("running", "stopping") and finish is not None:
            for gpu in job["gpus"]:
                rows.setdefault(gpu, []).append({"kind": "predicted", "job": job, "start": now, "finish": finish,
                                                 "bound": job.get("bound")})
        elif job["state"] == "queued" and finish is not None:
            queued.append(job)
    queued.sort(key=lambda j: (j["predicted_completion"], j["id"]))
    return rows, queued[:MAX_QUEUED]


def timeline_svg(snapshot: dict, past_s: float = PAST_S, job_link: str = PREFIX + "/jobs/") -> Markup:
    now = snapshot["now"]
    rows, queued = _bars(snapshot, now - past_s)
    starts = [b["start"] for bars in rows.values() for b in bars]
    since = max(now - past_s, min(starts + [now - MIN_PAST_S]))  # a young cluster's runs are not squeezed
    ends = ([b["finish"] for bars in rows.values() for b in bars] + [j["predicted_completion"] for j in queued]
            + [j["bound"] for j in queued if j.get("bound") is not None])  # queued jobs' bounds are drawn as lines
    last = max([now + MIN_FUTURE_S] + ends)
    until = min(last + END_MARGIN * (last - since), now + MAX_FUTURE_S)  # the axis ends where the drawing does
    span = until - since
    inner = WIDTH - LABEL_W - 10

    def x(t: float) -> float:
        return LABEL_W + max(0.0, min(1.0, (t - since) / span)) * inner

    gpus = [g["name"] for node in snapshot["nodes"] for g in node["gpus"]]
    gpus += sorted(set(rows) - set(gpus))  # GPUs of runs on nodes lost since
    height = AXIS_H + ROW_H * (len(gpus) + (len(queued) + 1 if queued else 0)) + 10
    parts = [Markup('<svg id="timeline" xmlns="http://www.w3.org/2000/svg"{}>').format(
        attrs(viewBox=f"0 0 {WIDTH} {height}", width=WIDTH, height=height, data__since=epoch(since),
              data__until=epoch(until)))]
    for k in range(7):  # the time axis
        t = since + span * k / 6
        parts.append(Markup('<g class="tick"><line{}/><text{}>{}</text></g>').format(
            attrs(x1=f"{x(t):.1f}", x2=f"{x(t):.1f}", y1=AXIS_H - 6, y2=height),
            attrs(x=f"{x(t):.1f}", y=12, text__anchor="end" if k == 6 else "middle" if k else "start"), clock(t, now)))
    for i, gpu in enumerate(gpus):
        y = AXIS_H + i * ROW_H
        bars = join(_bar(bar, x, y, now, job_link) for bar in sorted(rows.get(gpu, ()), key=lambda b: b["start"]))
        parts.append(Markup('<g class="row"{}><text class="label"{}>{}</text>{}</g>').format(
            attrs(data__gpu=gpu), attrs(x=4, y=y + ROW_H - 7), gpu, bars))
    if queued:
        y0 = AXIS_H + len(gpus) * ROW_H
        parts.append(Markup('<g class="queued"><text class="label"{}>queued: predicted runs</text>').format(
            attrs(x=4, y=y0 + ROW_H - 7)))
        for i, job in enumerate(queued):
            y = y0 + (i + 1) * ROW_H
            finish, bound, start = job["predicted_completion"], job.get("bound"), job.get("predicted_start")
            title = f'{job["name"]} (#{job["id"]}, queued): predicted finish {clock(finish, now)}, bound {clock(bound, now)}'
            mark = (_bar({"kind": "predicted", "job": job, "start": start, "finish": finish, "bound": bound}, x, y, now,
                         job_link) if start is not None else
                    Markup('<circle class="finish"{}/>').format(attrs(cx=f"{x(finish):.1f}", cy=y + ROW_H / 2, r=5)))
            line = EMPTY if bound is None else Markup('<line class="bound"{}/>').format(
                attrs(x1=f"{x(bound):.1f}", x2=f"{x(bound):.1f}", y1=y + 3, y2=y + ROW_H - 3))
            lane = Markup('<g class="queued-job"{}><title>{}</title><text class="label"{}>#{} {}</text>{}{}</g>')
            parts.append(lane.format(attrs(data__job__id=job["id"], data__finish=epoch(finish), data__bound=epoch(bound)),
                                     title, attrs(x=4, y=y + ROW_H - 7), job["id"], job["name"][:12], mark, line))
        parts.append(Markup("</g>"))
    parts.append(Markup('<line id="now"{}/></svg>').format(
        attrs(x1=f"{x(now):.1f}", x2=f"{x(now):.1f}", y1=AXIS_H - 6, y2=height, data__t=epoch(now))))
    return join(parts)


def _bar(bar: dict, x, y: float, now: float, job_link: str) -> Markup:
    job = bar["job"]
    start, finish = bar["start"], bar["finish"]
    x0, x1 = x(start), x(finish)
    kind = bar["kind"]
    title = {"past": f"ran {clock(start, now)} to {clock(finish, now)}", "running": f"running since {clock(start, now)}",
             "predicted": f"predicted {clock(start, now)} to {clock(finish, now)}"}[kind]
    title = f'{job["name"]} (#{job["id"]}) {title}'
    extra = {}
    if kind == "predicted":
        extra["data__bound"] = epoch(bar.get("bound"))
        title += f', bound {clock(bar.get("bound"), now)}'
    return Markup("<a{}><rect{}><title>{}</title></rect></a>").format(
        attrs(href=job_link + str(job["id"])),
        attrs(class_=f"bar {kind}", x=f"{x0:.1f}", y=y + 3, width=f"{max(1.0, x1 - x0):.1f}", height=ROW_H - 6,
              data__job__id=job["id"], data__start=epoch(start), data__finish=epoch(finish), **extra), title)
