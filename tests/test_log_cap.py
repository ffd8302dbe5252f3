"""A rank's log stays bounded: rotated past its cap (in a process of its own: it moves stdout and stderr)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from pcs_ray.coordinator.logs import read_logs

ROTATING_RANK = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pcs_ray.executors.log_cap import LogCap, open_log

    path = Path(sys.argv[1])
    open_log(path)
    cap = LogCap(path, max_bytes=1000)
    for i in range(50):  # 50 lines of 100 bytes, looked at every 5 lines as the thread would every second
        print(f"{i:04d} " + "x" * 94, flush=True)
        if i % 5 == 4:
            cap.check()
    print(f"rotations={cap.rotations}", file=sys.stderr)
""")


def test_a_log_that_passes_its_cap_is_rotated_and_keeps_at_most_twice_it(tmp_path):
    log = tmp_path / "attempt-1" / "rank-0.log"
    log.parent.mkdir()
    subprocess.run([sys.executable, "-c", ROTATING_RANK, str(log)], check=True, timeout=60)
    current, before = log.read_text(), (tmp_path / "attempt-1" / "rank-0.log.1").read_text()
    assert len(current.encode()) <= 1000 + 500 and len(before.encode()) <= 1000 + 500 + 200
    assert "0049 " in current and "rotations=" in current  # the newest lines and stderr stay in the current part
    assert "0000 " not in current + before  # the oldest are gone
    assert "was rotated" in current + before
    assert sorted(p.name for p in log.parent.iterdir()) == ["rank-0.log", "rank-0.log.1"]


def test_a_reader_past_a_rotation_starts_the_new_part_from_its_top(tmp_path):
    folder = tmp_path / "7" / "attempt-1"
    folder.mkdir(parents=True)
    (folder / "rank-0.log").write_text("after the rotation\n")
    reply = read_logs(tmp_path, 7, offsets={"0": 5000})
    assert reply["ranks"]["0"]["text"] == "after the rotation\n"
    assert read_logs(tmp_path, 7, offsets={"0": 6})["ranks"]["0"]["text"] == "the rotation\n"
