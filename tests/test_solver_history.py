"""Job-history format: round trip, and one-line errors for unreadable files."""

from __future__ import annotations

import json

import pytest

from pcs_ray.workloads.history import HistoryError, HistoryRecord, append_history, read_history, read_history_records


def test_round_trip_rebases_arrivals(tmp_path):
    path = tmp_path / "h.jsonl"
    append_history(path, HistoryRecord(7, 1000.5, 4, 3600.0, model="resnet18", iteration_time=0.2, job_class="B"))
    append_history(path, HistoryRecord(3, 1000.0, 2, 10.0, min_gpus=2, speedup=(0.0, 1.0, 1.5)))
    records = read_history_records(path)
    assert [r.job_id for r in records] == [7, 3]
    assert records[0].model == "resnet18" and records[0].iteration_time == 0.2
    jobs = read_history(path)
    assert [(j.job_id, j.submit_time) for j in jobs] == [(3, 0.0), (7, 0.5)]
    assert jobs[0].rigid and jobs[0].speedup == (0.0, 1.0, 1.5)
    assert jobs[1].speedup == (0.0, 1.0, 2.0, 3.0, 4.0) and jobs[1].job_class == "B"


def test_unknown_keys_are_ignored(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"v": 1, "job_id": 1, "submit_time": 0, "gpus": 1, "service": 5, "user": "x"}) + "\n\n")
    assert read_history(path)[0].service == 5


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty"),
        ("not json\n", "not a JSON line"),
        ('{"v": 2, "job_id": 1, "submit_time": 0, "gpus": 1, "service": 1}\n', "unsupported history version"),
        ('{"v": 1, "job_id": 1, "submit_time": 0, "gpus": 1}\n', "missing service"),
        ('{"v": 1, "job_id": 1, "submit_time": 0, "gpus": 0, "service": 1}\n', "gpus must be"),
        ('{"v": 1, "job_id": 1, "submit_time": 0, "gpus": 1, "service": -1}\n', "service must be"),
        ('{"v": 1, "job_id": 1, "submit_time": 0, "gpus": 1, "service": 1}\n'
         '{"v": 1, "job_id": 1, "submit_time": 0, "gpus": 1, "service": 1}\n', "duplicate job_id"),
        ("[1, 2]\n", "expected a JSON object"),
    ],
)
def test_unreadable_history_is_one_line_value_error(tmp_path, content, message):
    path = tmp_path / "h.jsonl"
    path.write_text(content)
    with pytest.raises(HistoryError, match=message) as info:
        read_history(path)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(HistoryError, match="no such job-history file"):
        read_history(tmp_path / "nope.jsonl")
    path = tmp_path / "bin"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HistoryError, match="not UTF-8"):
        read_history(path)
