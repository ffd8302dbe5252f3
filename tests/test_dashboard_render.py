"""The dashboard's pages rendered from hand-built snapshots: the DOM hooks the browser tests read, escaping of
what users name, paging at 10,000 jobs, and the timeline's bars from the stored forecast. No coordinator, no server."""

from __future__ import annotations

import time

import pytest
from dashboard_helpers import NOW, dom, job, snapshot

from pcs_ray.dashboard import pages
from pcs_ray.dashboard.history import config_history
from pcs_ray.dashboard.jobs_table import PAGE_ROWS, JobsQuery
from pcs_ray.dashboard.snapshot import nvlink_groups, speed_class

SESSION = pages.Session("al", "t1", "csrf-token-123")
EVIL = '<script>alert("x")</script>&"\''


def running(jid: int, gpus: list[str], start: float = NOW - 60, predicted: float = NOW + 300, bound: float = NOW + 900):
    return job(jid, "running", gpus=gpus, predicted=predicted, bound=bound, steps=40,
               segments=[{"start": start, "end": None, "gpus": gpus, "kind": "start", "from_step": 0}])


def test_every_page_has_the_navigation_and_polls_its_own_fragment():
    snap = snapshot([running(1, ["node0:0"]), job(2, predicted=NOW + 600, bound=NOW + 1200)])
    built = {"cluster": pages.cluster_page(snap, SESSION), "jobs": pages.jobs_page(snap, JobsQuery(), SESSION),
             "timeline": pages.timeline_page(snap, SESSION), "tenants": pages.tenants_page(snap, SESSION),
             "policy": pages.policy_page(snap, SESSION)}
    for name, html in built.items():
        root = dom(html)
        links = [a.attrs["href"] for a in root.one("nav", id="pages").all("a")]
        assert links == [f"/dashboard/{p}" for p in ("cluster", "jobs", "timeline", "tenants", "policy")], name
        polled = root.all(hx_trigger="every 1s")
        assert polled and all(p.attrs["hx-get"].startswith(f"/dashboard/fragment/{name}") for p in polled), name
        assert all(not s.attrs.get("src", "/dashboard/").startswith("http") for s in root.all("script")), name
        assert "csrf-token-123" in root.one("body").attrs["hx-headers"]


def test_jobs_rows_carry_the_contract_cells_and_exact_epochs():
    waiting = {"code": "gpus", "text": "needs at least 2 GPUs; 0 free, 1 earlier job running"}
    snap = snapshot([running(1, ["node0:0", "node0:1"]), job(2, predicted=NOW + 600.25, bound=NOW + 1200.5,
                                                             waiting=waiting, tenant="t2", user="bo", start=NOW + 300.5),
                     job(3)])
    root = dom(pages.jobs_page(snap, JobsQuery(), SESSION))
    rows = root.one("table", id="jobs").one("tbody").all("tr")
    assert [r.attrs["data-job-id"] for r in rows] == ["1", "2", "3"]
    queued = rows[1]
    assert (queued.attrs["data-state"], queued.attrs["data-tenant"], queued.attrs["data-user"]) == ("queued", "t2", "bo")
    cols = {td.attrs["data-col"]: td for td in queued.all("td")}
    assert set(cols) == {"name", "tenant", "user", "state", "gpus", "progress", "predicted-start", "predicted-finish",
                         "bound", "reason", "preemptions", "lost-steps"}
    assert float(cols["predicted-finish"].attrs["data-epoch"]) == NOW + 600.25
    assert float(cols["bound"].attrs["data-epoch"]) == NOW + 1200.5
    assert float(cols["predicted-start"].attrs["data-epoch"]) == NOW + 300.5  # the forecast's start
    unforecast = {td.attrs["data-col"]: td for td in rows[2].all("td")}
    assert unforecast["predicted-start"].attrs["data-epoch"] == unforecast["predicted-finish"].attrs["data-epoch"] == ""
    assert cols["reason"].attrs["data-code"] == "gpus" and "needs at least 2 GPUs" in cols["reason"].text
    started = {td.attrs["data-col"]: td for td in rows[0].all("td")}
    assert float(started["predicted-start"].attrs["data-epoch"]) == NOW - 60
    assert started["gpus"].text.strip() == "2 / 1–2" and started["reason"].attrs["data-code"] == ""
    assert root.one(data_total=True).attrs["data-total"] == "3"


def test_what_users_name_is_text_never_markup():
    snap = snapshot([job(1, name=EVIL, tenant=EVIL, user=EVIL, predicted=NOW + 10,
                         waiting={"code": "queue", "text": EVIL})],
                    tenants={"tenants": None, "since": None, "usage": {EVIL: {"jobs": 1, "waiting": 1, "gpus": 0}}})
    for html in (pages.jobs_page(snap, JobsQuery(), SESSION), pages.tenants_page(snap, SESSION),
                 pages.timeline_page(snap, SESSION), pages.job_page(snap["jobs"][0], [], NOW, None, SESSION)):
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html  # MarkupSafe writes " as &#34;
        assert len(dom(html).all("script")) == 1  # htmx, nothing else


@pytest.mark.parametrize("page", [1, 2, 100, 101])
def test_paging_holds_at_ten_thousand_jobs(page):
    jobs = [job(i, predicted=NOW + i) for i in range(1, 10_001)]
    snap = snapshot(jobs)
    began = time.perf_counter()
    html = pages.jobs_page(snap, JobsQuery(page=page), SESSION)
    took = time.perf_counter() - began
    root = dom(html)
    rows = root.one("table", id="jobs").one("tbody").all("tr")
    shown = min(page, 100)
    assert [int(r.attrs["data-job-id"]) for r in rows] == list(range((shown - 1) * PAGE_ROWS + 1, shown * PAGE_ROWS + 1))
    assert root.one(data_total=True).attrs["data-total"] == "10000"
    pager = root.one("nav", class_="pager")
    assert pager.attrs["data-page"] == str(shown) and pager.attrs["data-pages"] == "100"
    assert len(html) < 200_000, len(html)  # a bounded page, whatever the number of jobs
    print(f"page {page} of 10,000 jobs rendered in {took * 1000:.0f} ms")


def test_filters_and_sorting():
    jobs = [job(1, tenant="a", user="x", predicted=NOW + 30), job(2, tenant="b", user="y", predicted=NOW + 10),
            running(3, ["node0:0"], predicted=NOW + 20), job(4, tenant="a", user="y", predicted=None)]
    snap = snapshot(jobs)

    def ids(**q) -> list[int]:
        root = dom(pages.jobs_fragment(snap, JobsQuery.parse(q), SESSION))
        return [int(r.attrs["data-job-id"]) for r in root.one("tbody").all("tr")]

    assert ids(tenant="a") == [1, 4]
    assert ids(user="y") == [2, 4]
    assert ids(state="running") == [3]
    assert ids(sort="predicted-finish") == [2, 3, 1, 4]  # a job without a forecast last
    assert ids(sort="predicted-finish", order="desc") == [1, 3, 2, 4]
    ended = job(5, "cancelled", predicted=NOW + 99)
    ended["finish"] = NOW - 5.5
    cell = dom(pages.jobs_fragment(snapshot([ended]), JobsQuery(), SESSION)).one("td", data_col="predicted-finish")
    assert float(cell.attrs["data-epoch"]) == NOW - 5.5  # an ended job: when it ended, not its last forecast
    assert ids(state="nonsense", sort="nonsense", page="x") == [1, 2, 3, 4]  # what cannot be read falls back


def test_cluster_grid_shows_holders_states_speed_classes_and_nvlink_groups():
    stopping = running(2, ["node1:2"])
    stopping["state"] = "stopping"
    snap = snapshot([running(1, ["node0:0", "node0:1"], ), stopping])
    root = dom(pages.cluster_page(snap, SESSION))
    assert [n.attrs["data-node"] for n in root.all(class_="node")] == ["node0", "node1"]
    gpu = {g.attrs["data-gpu"]: g for g in root.all(class_="gpu", data_gpu=True)}
    assert len(gpu) == 8
    assert (gpu["node0:0"].attrs["data-state"], gpu["node0:0"].attrs["data-job-id"]) == ("busy", "1")
    assert gpu["node0:0"].attrs["data-speed-class"] == "slow" and "job-1" in gpu["node0:0"].attrs["title"]
    assert (gpu["node1:2"].attrs["data-state"], gpu["node1:2"].attrs["data-job-id"]) == ("stopping", "2")
    assert (gpu["node0:3"].attrs["data-state"], gpu["node0:3"].attrs["data-job-id"]) == ("idle", "")
    assert len(root.all(class_="nvlink-group")) == 2


def test_nvlink_groups_and_speed_classes_from_the_topology_and_scores():
    links = [["X", "NV1", "SYS", "SYS"], ["NV1", "X", "SYS", "SYS"], ["SYS", "SYS", "X", "NV2"], ["SYS", "SYS", "NV2", "X"]]
    assert nvlink_groups(["a", "b", "c", "d"], links) == [["a", "b"], ["c", "d"]]
    assert nvlink_groups(["a", "b"], None) == [["a"], ["b"]]
    assert (speed_class({}), speed_class({"B": 1.3}), speed_class({"B": 0.8, "C": 0.9})) == ("nominal", "slow", "fast")


def test_timeline_draws_past_running_and_predicted_bars_from_the_stored_forecast():
    past = job(5, "finished", gpus=[], segments=[{"start": NOW - 900, "end": NOW - 300, "gpus": ["node1:0"],
                                                   "kind": "start", "from_step": 0}])
    snap = snapshot([running(1, ["node0:0", "node0:1"], predicted=NOW + 321.5, bound=NOW + 999.25), past,
                     job(2, predicted=NOW + 700, bound=NOW + 1500, start=NOW + 321.5)])
    svg = dom(pages.timeline_page(snap, SESSION)).one("svg", id="timeline")
    rows = {r.attrs["data-gpu"]: r for r in svg.all("g", class_="row")}
    assert len(rows) == 8
    predicted = rows["node0:0"].one("rect", class_="predicted")
    assert float(predicted.attrs["data-finish"]) == NOW + 321.5 and float(predicted.attrs["data-bound"]) == NOW + 999.25
    assert float(predicted.attrs["data-start"]) == NOW and predicted.attrs["data-job-id"] == "1"
    assert float(rows["node0:1"].one("rect", class_="running").attrs["data-start"]) == NOW - 60
    ran = rows["node1:0"].one("rect", class_="past")
    assert (float(ran.attrs["data-start"]), float(ran.attrs["data-finish"])) == (NOW - 900, NOW - 300)
    assert float(svg.one("line", id="now").attrs["data-t"]) == NOW
    queued = svg.one("g", class_="queued-job")
    assert queued.attrs["data-job-id"] == "2" and float(queued.attrs["data-finish"]) == NOW + 700
    bar = queued.one("rect", class_="predicted")  # from the start the forecast gives it to its predicted finish
    assert (float(bar.attrs["data-start"]), float(bar.attrs["data-finish"]), float(bar.attrs["data-bound"])) == (
        NOW + 321.5, NOW + 700, NOW + 1500)


def test_job_page_runs_history_logs_and_cancel():
    j = running(7, ["node0:0"])
    j["segments"] = [{"start": NOW - 500, "end": NOW - 400, "gpus": ["node1:1"], "kind": "start", "from_step": 0},
                     {"start": NOW - 60, "end": None, "gpus": ["node0:0"], "kind": "resume", "from_step": 30}]
    history = [{"t": NOW - 50, "predicted": NOW + 400, "bound": NOW + 900, "steps": 35},
               {"t": NOW - 10, "predicted": NOW + 300, "bound": NOW + 900, "steps": 40}]
    logs = {"attempt": 2, "ranks": {"0": {"text": "epoch 1 loss 0.5\n<b>loss</b>\n"}}}
    root = dom(pages.job_page(j, history, NOW, logs, SESSION, may_cancel=True, message="no", error=True))
    assert root.one(id="job").attrs["data-job-id"] == "7"
    runs = root.one("table", id="runs").one("tbody").all("tr")
    first = {td.attrs["data-col"]: td.text for td in runs[0].all("td")}
    assert (first["attempt"], first["gpus"], first["why"], first["checkpoint-step"]) == ("1", "node1:1", "preempted", "30")
    assert {td.attrs["data-col"]: td.text for td in runs[1].all("td")}["end"] == "running"
    assert len(root.one("svg", id="prediction-history").all("circle", class_="predicted")) == 3  # submission + 2
    assert len(root.one("svg", id="metrics").all("circle", class_="steps")) == 2
    assert root.one("pre", id="logs").text == "epoch 1 loss 0.5\n<b>loss</b>"
    cancel = root.one("form", id="cancel")
    assert cancel.attrs["action"] == "/dashboard/jobs/7/cancel" and cancel.one("input", name="csrf").attrs["value"] == SESSION.csrf
    assert root.one(class_="flash").attrs["class"] == "flash error"
    assert not dom(pages.job_page(j, history, NOW, None, SESSION, may_cancel=False)).all("form", id="cancel")


def test_a_run_says_why_the_coordinator_stopped_it_while_its_job_waits():
    j = job(7, "queued")
    j["segments"] = [{"start": NOW - 500, "end": NOW - 400, "gpus": ["node1:1"], "kind": "start", "from_step": 0,
                      "stopped_for": "preempt"}]
    assert [(r["why"], r["step"]) for r in pages.runs({**j, "steps": 30})] == [("preempted", 30)]
    j["segments"].append({"start": NOW - 300, "end": NOW - 200, "gpus": ["node0:0"], "kind": "migrate", "from_step": 30,
                          "error": "RuntimeError: boom"})
    assert [r["why"] for r in pages.runs({**j, "steps": 40})] == ["preempted", "failed"]  # not "migrated"


def test_job_page_draws_the_loss_its_loop_reports_against_its_steps():
    j = running(7, ["node0:0"])
    reports = [{"step": 1, "attempt": 2, "acc": 0.1, "loss": 0.9}, {"step": 2, "attempt": 2, "loss": 0.5, "note": "x"},
               {"step": 4, "attempt": 2, "loss": 0.25, "acc": 0.7}]
    root = dom(pages.job_page(j, [], NOW, {"attempt": 2, "ranks": {}, "metrics": reports}, SESSION))
    points = root.one("svg", id="reported").all("circle", class_="reported")
    assert [(c.attrs["data-step"], float(c.attrs["data-y"])) for c in points] == [("1", 0.9), ("2", 0.5), ("4", 0.25)]
    assert "loss by step" in root.text
    accuracy = pages.reported_curve([{"step": 3, "attempt": 1, "acc": 0.5, "ok": True}])
    assert accuracy == ("acc", [(3.0, 0.5)])  # no loss: the first number it reports, never a flag
    assert pages.reported_curve([{"step": 3, "attempt": 1, "note": "warming up"}]) is None
    many = pages.reported_curve([{"step": s, "attempt": 1, "loss": 1 / s} for s in range(1, 100_002)])[1]
    assert len(many) <= pages.CURVE_POINTS + 1 and many[0] == (1.0, 1.0) and many[-1] == (100_001.0, 1 / 100_001)
    assert not dom(pages.job_page(j, [], NOW, None, SESSION)).all("svg", id="reported")  # no reports, no chart


def test_tenants_quota_used_borrowed_lent_waiting_protected():
    tenants = {"tenants": {"tenants": {"a": {"quota": 4}, "b": {"quota": 4}}}, "since": NOW - 100,
               "usage": {"a": {"jobs": 3, "waiting": 1, "gpus": 6}, "b": {"jobs": 1, "waiting": 0, "gpus": 1}}}
    young = running(1, ["node0:0"])
    young["tenant"], young["protected_until"] = "a", NOW + 50
    root = dom(pages.tenants_page(snapshot([young], tenants=tenants), SESSION))
    rows = {r.attrs["data-tenant"]: {td.attrs["data-col"]: td.text for td in r.all("td")}
            for r in root.one("table", id="tenants").all("tr", data_tenant=True)}
    assert rows["a"] == {"tenant": "a", "quota": "4", "used": "6", "borrowed": "2", "lent": "0", "waiting": "1",
                         "protected": "1"}
    assert (rows["b"]["borrowed"], rows["b"]["lent"], rows["b"]["protected"]) == ("0", "2", "0")


def test_tenants_waiting_on_quota_and_gpus_over_time():
    tenants = {"tenants": {"tenants": {"a": {"quota": 2}}}, "since": NOW - 100,
               "usage": {"a": {"jobs": 3, "waiting": 2, "gpus": 2}}}
    quota = {"code": "tenant-quota", "text": "its tenant holds its quota"}
    snap = snapshot([job(1, tenant="a", waiting=quota), job(2, tenant="a", waiting={"code": "queue", "text": "q"})],
                    tenants=tenants)
    snap["tenant_history"] = [{"t": NOW - 60, "used": {"a": 1}}, {"t": NOW - 10, "used": {"a": 2}}]
    root = dom(pages.tenants_page(snap, SESSION))
    waiting = root.one("tr", data_tenant="a").one("td", data_col="waiting")
    assert (waiting.text, waiting.attrs["data-on-quota"]) == ("2", "1")
    points = root.one("svg", id="tenants-history").all("circle")
    assert [float(c.attrs["data-y"]) for c in points] == [1.0, 2.0, 2.0]  # the last count holds until now


def test_policy_page_and_config_history_from_journal_events():
    events = [(0.0, "init", {"epoch": NOW - 1000, "policy": {"policy": "pcs-bal", "queues": 3}}),
              (10.0, "submit", {}),
              (500.0, "config", {"source": "set", "name": "fifo", "wfq": None}),
              (700.0, "tenants", {"tenants": {"tenants": {"a": {"quota": 2}}}})]
    history = config_history(events, None)
    assert [(h["kind"], h["t"]) for h in history] == [("start", NOW - 1000), ("config set", NOW - 500),
                                                       ("tenants apply", NOW - 300)]
    root = dom(pages.policy_page(snapshot([], history=history), SESSION))
    assert root.one(id="policy").attrs["data-policy"] == "pcs-bal"
    rows = root.one("table", id="config-history").one("tbody").all("tr")
    assert [r.attrs["data-kind"] for r in rows] == ["tenants apply", "config set", "start"]  # newest first
    assert "a 2" in rows[0].text


def test_the_sign_in_form_holds_no_cluster_data_and_says_why_it_refused():
    root = dom(pages.login_page("the token was refused", user=EVIL))
    form = root.one("form", id="login")
    assert {i.attrs["name"] for i in form.all("input")} == {"token", "user", "tenant"}
    assert root.one("p", class_="error").text == "the token was refused"
    assert not root.all("nav") and not root.all("script")


def test_a_running_job_predicted_past_its_bound_says_so_and_the_bound_is_explained_where_it_appears():
    from pcs_ray.commands.format import StatusTable
    from pcs_ray.contract import BOUND_MEANING

    late, on_time = running(1, ["node0:0"], predicted=NOW + 13, bound=NOW), running(2, ["node0:1"])
    root = dom(pages.jobs_page(snapshot([late, on_time]), JobsQuery(), SESSION))
    rows = root.one("table", id="jobs").one("tbody").all("tr")
    bounds = [{td.attrs["data-col"]: td for td in r.all("td")}["bound"] for r in rows]
    assert bounds[0].attrs.get("data-missed") == "1" and "missed" in bounds[0].text
    assert "data-missed" not in bounds[1].attrs and "missed" not in bounds[1].text
    assert root.one("th", data_col="bound").attrs["title"] == BOUND_MEANING
    page = dom(pages.job_page(late, [], NOW, None, SESSION))
    assert "missed" in page.one(class_="missed").text and BOUND_MEANING in page.one("dl", class_="facts").text
    assert not dom(pages.job_page(on_time, [], NOW, None, SESSION)).all(class_="missed")
    status = {"now": NOW, "jobs": [dict(late, predicted_completion=NOW + 13, emulated=False, step_time=None,
                                        total_steps=100, preemptions=0, error=None, **{"class": "A"})]}
    table = StatusTable(status)
    assert table.cells(status["jobs"][0])["bound"].endswith(" missed")
    assert BOUND_MEANING in table.notes([]) and any("past its bound" in line for line in table.notes([]))


def test_the_timelines_axis_ends_where_its_last_bar_or_bound_does():
    snap = snapshot([running(1, ["node0:0"], predicted=NOW + 120, bound=NOW + 130)])
    svg = dom(pages.timeline_page(snap, SESSION)).one("svg", id="timeline")
    since, until = float(svg.attrs["data-since"]), float(svg.attrs["data-until"])
    assert NOW + 120 <= until <= NOW + 120 + 0.05 * (until - since)  # not minutes past the last bar
    queued = snapshot([running(1, ["node0:0"], predicted=NOW + 120), job(2, predicted=NOW + 200, bound=NOW + 400)])
    until = float(dom(pages.timeline_page(queued, SESSION)).one("svg", id="timeline").attrs["data-until"])
    assert NOW + 400 <= until <= NOW + 440  # a queued job's bound is drawn, so the axis reaches it
    idle = float(dom(pages.timeline_page(snapshot([]), SESSION)).one("svg", id="timeline").attrs["data-until"])
    assert NOW + 60 <= idle <= NOW + 70  # "now" is never the axis's edge
