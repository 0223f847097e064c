"""The export/import benchmark stays runnable and checks what it measures (CI runs slow tests too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "exchange.py"


@pytest.mark.slow
def test_exchange_bench_smoke(tmp_path: Path):
    out = subprocess.run([sys.executable, str(BENCH), "--smoke", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "the speed of tar | zstd" in text and "the speed of zstd -d | tar x" in text
    assert "round 1: export" in text
