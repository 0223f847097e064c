"""The re-seal benchmark stays runnable and checks what it measures (CI runs slow tests too)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "store_reseal.py"


@pytest.mark.slow
def test_store_reseal_bench_smoke(tmp_path: Path):
    out = subprocess.run([sys.executable, str(BENCH), "--smoke", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    resealed = re.search(r"round 1: re-sealed ([\d,]+) MB in ([\d.]+) s", text)
    assert resealed and int(resealed.group(1).replace(",", "")) >= 16, text      # every byte moved to the new epoch
    assert "status p99 during re-seal" in text and "baseline p99" in text and "ratio:" in text
    assert "target p99 < 1 s: met" in text, text
