"""The placement benchmarks stay runnable, and their plans stay the old function's (each
exits 1 when the new and the old placement differ); their smoke modes take a second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.mark.parametrize("script, says", [
    ("place_throughput.py", "plans identical to the old place(): yes"),
    ("placement_cycle.py", "same placements: yes"),
])
def test_placement_bench_smoke(script: str, says: str):
    out = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert says in out.stdout
