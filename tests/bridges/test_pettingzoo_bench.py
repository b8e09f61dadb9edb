"""The PettingZoo benchmark script runs and prints a well-formed table (figures are not judged)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RATIO = re.compile(r"^(\d+\.\d+)x \[(\d+\.\d+), (\d+\.\d+)\]$")


@pytest.mark.slow
def test_bench_prints_medians_with_their_spread_and_the_bridges_own_work():
    command = [sys.executable, "bench/bench_pettingzoo.py", "--rounds", "3", "--scale", "0.01"]
    command += ["--only", "tictactoe", "spread_v3 parallel", "--control", "--overhead"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("3 rounds; load average")
    header = next(line for line in lines if line.startswith("| env |"))
    assert [cell.strip() for cell in header.strip("|").split("|")][4:7] == [
        "ours / raw",
        "RLlib / raw",
        "raw again / raw",
    ]
    rows = [line for line in lines if line.startswith(("| tictactoe_v3", "| simple_spread_v3"))]
    assert len(rows) == 3  # two in the ratio table, the parallel env again in the overhead table
    for row in rows[:2]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert all(float(c) > 0 for c in cells[1:4])
        for cell in cells[4:7]:
            median, low, high = map(float, RATIO.match(cell).groups())  # type: ignore[union-attr]
            assert 0 < low <= median <= high
    assert rows[0].startswith("| tictactoe_v3 (aec) |") and rows[1].startswith("| simple_spread_v3 (parallel) |")
    overhead = [cell.strip() for cell in rows[2].strip("|").split("|")]
    assert overhead[0] == "simple_spread_v3 (parallel)" and len(overhead) == 5
    assert float(overhead[1]) > 0 and float(overhead[2]) > 0 and overhead[3].endswith("%")
