"""Small SVG line charts: a job's predicted finish over time against its actual finish, its progress, and
the metrics its loop reports against its steps."""

from __future__ import annotations

from markupsafe import Markup

from pcs_ray.dashboard.markup import attrs, clock, epoch, join

W, H, PAD_L, PAD_B, PAD_T = 640, 220, 80, 24, 10


def line_chart(svg_id: str, series: list[tuple[str, list[tuple[float, float]]]], *, now: float,
               y_time: bool = False, level: tuple[str, float] | None = None, empty: str = "nothing yet",
               floor: float | None = None, x_steps: bool = False) -> Markup:
    """``series``: (css class, points (x = unix seconds, y)); ``level``: a horizontal line (class, y),
    e.g. the actual finish. ``y_time``: y values are unix seconds, labelled as clock times. ``floor``: the
    y axis reaches down to it (0 for counts). ``x_steps``: x values are the job's steps, not times."""
    points = [p for _, pts in series for p in pts]
    if not points:
        return Markup("<svg{}><text{}>{}</text></svg>").format(
            attrs(id=svg_id, xmlns="http://www.w3.org/2000/svg", viewBox=f"0 0 {W} 40", width=W, height=40),
            attrs(x=8, y=24), empty)
    xs = [p[0] for p in points]
    ys = [p[1] for p in points] + ([level[1]] if level else []) + ([floor] if floor is not None else [])
    x0, x1 = min(xs), max(max(xs), min(xs) + 1.0)
    y0, y1 = min(ys), max(max(ys), min(ys) + 1.0)
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad

    def px(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - 10)

    def py(y: float) -> float:
        return PAD_T + (1 - (y - y0) / (y1 - y0)) * (H - PAD_T - PAD_B)

    def ylabel(y: float) -> str:
        return clock(y, now) if y_time else f"{y:.4g}"

    def xlabel(x: float) -> str:
        return f"step {x:.0f}" if x_steps else clock(x, now)

    out = [Markup("<svg{}>").format(attrs(id=svg_id, xmlns="http://www.w3.org/2000/svg", viewBox=f"0 0 {W} {H}",
                                          width=W, height=H))]
    for k in range(3):
        y = y0 + (y1 - y0) * k / 2
        out.append(Markup('<g class="tick"><line{}/><text{}>{}</text></g>').format(
            attrs(x1=PAD_L, x2=W - 10, y1=f"{py(y):.1f}", y2=f"{py(y):.1f}"), attrs(x=4, y=f"{py(y) + 4:.1f}"),
            ylabel(y)))
    for k in range(3):
        x = x0 + (x1 - x0) * k / 2
        anchor = ("start", "middle", "end")[k]
        out.append(Markup('<text class="xlabel"{}>{}</text>').format(
            attrs(x=f"{px(x):.1f}", y=H - 6, text__anchor=anchor), xlabel(x)))
    if level is not None:
        cls, y = level
        out.append(Markup("<line{}><title>{}: {}</title></line>").format(
            attrs(class_=cls, x1=PAD_L, x2=W - 10, y1=f"{py(y):.1f}", y2=f"{py(y):.1f}", data__t=epoch(y)), cls,
            ylabel(y)))
    for cls, pts in series:
        if not pts:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(Markup("<polyline{}/>").format(attrs(class_=cls, points=path)))
        for x, y in pts:
            where = {"data__step": f"{x:.0f}"} if x_steps else {"data__t": epoch(x)}
            out.append(Markup("<circle{}><title>{}: {}</title></circle>").format(
                attrs(class_=cls, cx=f"{px(x):.1f}", cy=f"{py(y):.1f}", r=2.5, **where, data__y=repr(float(y))),
                xlabel(x), ylabel(y)))
    out.append(Markup("</svg>"))
    return join(out)
