"""README's first command: the digits example end to end, and run again by the same daemon
(each run trains twice: the two runs take most of CI's slowest worker, hence one daemon only)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[2]


def _run_example(state: Path, demo: Path) -> tuple[str, Path]:
    """One run of examples/digits/run.sh; its output and the folder it worked in."""
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state), "FLOYD_DEMO_DIR": str(demo)}
    env.pop("FLOYD_HOST", None)
    res = subprocess.run(["bash", str(ROOT / "examples/digits/run.sh")], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    work = Path(re.search(r"digits: working in (\S+)", res.stdout)[1])
    assert work.parent == demo and stat.S_IMODE(work.stat().st_mode) == 0o700   # fresh, and private
    return res.stdout, work


def _stop(state: Path) -> None:
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state)}
    subprocess.run(["floydd", "stop", "--state-dir", str(state)], env=env, capture_output=True, timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(600)      # four trainings on a loaded 2-core machine
def test_digits_example_trains_twice_compares_and_runs_again(tmp_path):
    demo, first = tmp_path / "demo", tmp_path / "state"
    try:
        out, work = _run_example(first, demo)
        assert "digits/1" in out and "digits/2" in out              # compare shows both runs
        assert re.search(r"param lr\s+0\.05\s+0\.01", out), out     # side by side
        accuracies = [float(a) for a in re.findall(r"validation accuracy (\d\.\d+)", out)]
        assert len(accuracies) == 2 and min(accuracies) > 0.9, out
        assert (work / "output-digits-2" / "model.pt").stat().st_size > 1000

        again, work2 = _run_example(first, demo)                    # the same daemon, a second time
        assert work2 != work and "digits/3" in again and "digits/4" in again
        assert (work2 / "output-digits-4" / "model.pt").stat().st_size > 1000

        assert (work / "output-digits-2" / "model.pt").exists()     # the first run's folder is untouched
    finally:
        _stop(first)
