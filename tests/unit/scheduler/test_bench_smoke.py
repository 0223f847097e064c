"""The placement benchmarks stay runnable, and their decisions stay the old function's (each
exits 1 when the new and the old placement differ); their smoke modes take a second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.mark.parametrize("script, says", [
    ("place_throughput.py", "decisions as the old place()'s: yes"),
    ("placement_cycle.py", "same placements: yes"),
])
def test_placement_bench_smoke(script: str, says: str):
    out = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert says in out.stdout


@pytest.mark.slow
def test_queue_entries_bench_smoke():
    """Three in-process boxes with real raft: entries per job stay flat with a queue, and a
    2-core box runs no more than 2 one-core jobs at once (~8 s)."""
    out = subprocess.run([sys.executable, str(BENCH / "queue_entries.py"), "--smoke"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "(target: constant, <= 8): yes" in out.stdout
    assert "report 2 cores                     2 " in out.stdout
