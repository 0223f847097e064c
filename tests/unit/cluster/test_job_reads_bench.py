"""bench/job_reads.py stays runnable (its smoke mode takes a second), and the typed reads and
the listing built from them still give what the copies and the old listing gave (it exits 1
otherwise)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"


def test_job_reads_bench_smoke():
    out = subprocess.run([sys.executable, str(BENCH / "job_reads.py"), "--smoke"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "typed reads and their views match the copies and the old views: yes" in out.stdout
    assert "listing: views of Jobs (now)" in out.stdout
