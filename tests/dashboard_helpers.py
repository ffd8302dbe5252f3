"""A small DOM for the dashboard's HTML (stdlib ``html.parser``): elements, their attributes, text and children,
and hand-built snapshots to render pages from without a coordinator."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"meta", "link", "input", "br", "img", "hr", "source", "col", "area", "base", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts) + "".join(c.text for c in self.children)

    def all(self, tag: str | None = None, **want) -> list[Element]:
        """Descendants with this tag (any if None) whose attributes hold ``want`` (``class_`` matches one class,
        ``data_x`` is ``data-x``; a value of True: the attribute is there)."""
        out = []
        for child in self.children:
            if (tag is None or child.tag == tag) and all(_has(child, k, v) for k, v in want.items()):
                out.append(child)
            out += child.all(tag, **want)
        return out

    def one(self, tag: str | None = None, **want) -> Element:
        found = self.all(tag, **want)
        assert len(found) == 1, f"{len(found)} <{tag} {want}>"
        return found[0]


def _has(el: Element, key: str, value) -> bool:
    name = "class" if key == "class_" else key.replace("_", "-")
    if name not in el.attrs:
        return False
    if value is True:
        return True
    if name == "class":
        return value in el.attrs["class"].split()
    return el.attrs[name] == str(value)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        el = Element(tag, {k: (v if v is not None else "") for k, v in attrs})
        self.stack[-1].children.append(el)
        if tag not in VOID:
            self.stack.append(el)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Element(tag, {k: (v if v is not None else "") for k, v in attrs}))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].parts.append(data)


def dom(html: str) -> Element:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root


NOW = 1_800_000_000.0


def job(jid: int, state: str = "queued", *, name: str | None = None, tenant: str | None = "t1", user: str | None = "al",
        gpus: list[str] | None = None, predicted: float | None = None, bound: float | None = None,
        waiting: dict | None = None, segments: list[dict] | None = None, steps: int = 0, total: int = 100,
        start: float | None = None) -> dict:
    """A job view as ``Coordinator.status`` gives it."""
    return {"id": jid, "name": name or f"job-{jid}", "workload": "tiny_cnn", "class": "B", "state": state,
            "tenant": tenant, "user": user, "gpus": gpus or [], "demand": [1, max(1, len(gpus or [])) or 1],
            "steps": steps, "total_steps": total, "submit": NOW - 100, "start": segments[0]["start"] if segments else None,
            "finish": None, "predicted_completion": predicted, "predicted_start": start, "first_predicted": predicted, "bound": bound,
            "preemptions": 0, "lost_steps": 0, "attempts": len(segments or []), "error": None, "metrics": None,
            "segments": segments or [], "waiting": waiting, "protected_until": None}


def snapshot(jobs: list[dict], nodes: int = 2, per_node: int = 4, tenants: dict | None = None,
             history: list[dict] | None = None) -> dict:
    layout = [{"name": f"node{n}", "nvlink_groups": [[f"node{n}:{i}" for i in range(per_node)]],
               "gpus": [{"name": f"node{n}:{i}", "index": i, "scores": {"B": 1.2} if i == 0 else {},
                         "speed_class": "slow" if i == 0 else "nominal"} for i in range(per_node)]}
              for n in range(nodes)]
    return {"now": NOW, "jobs": jobs, "nodes": layout,
            "config": {"policy": {"policy": "pcs-bal", "queues": 3}, "placement": {"placement": "packed-sticky"},
                       "source": "start", "since": NOW - 500},
            "tenants": tenants or {"tenants": None, "since": None, "usage": {}},
            "history": history or []}
