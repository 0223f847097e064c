"""README's first command on a fresh state dir: the digits example end to end."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_digits_example_trains_twice_and_compares(tmp_path):
    state = tmp_path / "state"
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state), "FLOYD_DEMO_DIR": str(tmp_path / "demo")}
    env.pop("FLOYD_HOST", None)
    try:
        res = subprocess.run(["bash", str(ROOT / "examples/digits/run.sh")], env=env, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        out = res.stdout
        assert "digits/1" in out and "digits/2" in out              # compare shows both runs
        assert re.search(r"param lr\s+0\.05\s+0\.01", out), out     # side by side
        accuracies = [float(a) for a in re.findall(r"validation accuracy (\d\.\d+)", out)]
        assert len(accuracies) == 2 and min(accuracies) > 0.9, out
        assert (tmp_path / "demo" / "output-digits-2" / "model.pt").stat().st_size > 1000
    finally:
        subprocess.run(["floydd", "stop", "--state-dir", str(state)], env=env, capture_output=True, timeout=60)
