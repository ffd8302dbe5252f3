"""bench/storage.py run in-process on one small workload: the JSON it prints has every figure, each a positive
number, and it leaves no temporary folder and no AWS variable of its own behind.

The full bench (all six payloads, five repeats) is run by hand; its figures are in the closing notes.
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from builders import bench_module

PHASES = {"save": True, "restore_cold": True, "restore_warm": False}  # phase -> has a rate (MB/s)


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


@pytest.mark.slow  # imports torch, builds a workload and starts an S3 server: several seconds
def test_one_small_workload_gives_every_figure_positive(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the bench's folders go, to see them removed
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with bench_module("storage") as bench:
        assert bench.main(["--workloads", "tiny_cnn", "--repeats", "1", "--json-only"]) == 0
    captured = capsys.readouterr()
    assert "[storage]" not in captured.err  # --json-only: no progress lines
    report = json.loads(captured.out)

    assert set(report) == {"machine", "repeats", "workloads", "wall_s", "notes"}
    assert report["repeats"] == 1 and report["machine"]["cpus"] >= 1 and _positive(report["wall_s"])
    assert report["notes"] and all(isinstance(n, str) and n for n in report["notes"])
    assert list(report["workloads"]) == ["tiny_cnn"]
    entry = report["workloads"]["tiny_cnn"]
    assert _positive(entry["bytes"]) and entry["bytes"] > 10_000  # a real checkpoint: model, optimizer, RNG
    assert set(entry["local_only"]) == {"n", "median_s", "max_s", "mb_s"}
    assert all(_positive(v) for v in entry["local_only"].values())
    for storage in ("file", "s3"):
        assert set(entry[storage]) == set(PHASES)
        for phase, rated in PHASES.items():
            figures = entry[storage][phase]
            expected = {"n", "median_s", "max_s"} | ({"mb_s"} if rated else set()) | \
                ({"requests"} if storage == "s3" else set())
            assert set(figures) == expected, (storage, phase)
            assert all(_positive(v) for v in figures.values()), (storage, phase, figures)
            assert figures["n"] == 1 and figures["max_s"] >= figures["median_s"]
    assert set(entry["s3_over_file"]) == set(PHASES) and all(_positive(v) for v in entry["s3_over_file"].values())
    assert entry["s3"]["restore_warm"]["requests"] < entry["s3"]["restore_cold"]["requests"]  # the manifest alone

    assert not list(tmp_path.glob("pcs-ray-bench-*"))  # its folders removed (torch may leave its own cache there)
    assert "AWS_ENDPOINT_URL" not in os.environ  # the variables it set for the S3 server put back


def test_unknown_workloads_are_refused(capsys):
    with bench_module("storage") as bench, pytest.raises(SystemExit):
        bench.parse(["--workloads", "tiny_cnn,gpt5"])
    assert "gpt5" in capsys.readouterr().err
