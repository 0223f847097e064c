"""The store benchmark stays runnable (CI runs slow tests too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "store_ingest.py"


@pytest.mark.slow
def test_store_bench_smoke(tmp_path: Path):
    out = subprocess.run([sys.executable, str(BENCH), "--smoke", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "restore byte-identical (diff -r)             yes" in text
    assert "ok=True" in text
    assert "floyd data upload (a fresh daemon)" in text and "re-upload speed / restic second" in text
    line = next(l for l in text.splitlines() if "new chunks stored after the change" in l)
    assert int(line.split()[-1]) <= 3
    assert "pyfastcdc 0.3 (Cython) [chosen]" in text
