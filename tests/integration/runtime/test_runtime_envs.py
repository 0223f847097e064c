"""The job's Python: the daemon's own, or a venv cached per floyd_requirements.txt."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from floydd.errors import InvalidSpec
from floydd.runtime.envs import REQUIREMENTS, python_bin_for


def test_default_is_the_daemons_interpreter(tmp_path):
    assert python_bin_for(tmp_path, tmp_path / "code") == str(Path(sys.executable).parent)


def test_a_requirements_file_of_comments_only_needs_no_env(tmp_path):
    (tmp_path / REQUIREMENTS).write_text("# nothing yet\n\n   # really\n")
    assert python_bin_for(tmp_path / "state", tmp_path) == str(Path(sys.executable).parent)
    assert not (tmp_path / "state").exists()


def test_an_unknown_environment_is_refused(tmp_path):
    with pytest.raises(InvalidSpec, match="unknown environment"):
        python_bin_for(tmp_path, tmp_path, "tensorflow-1.5")


@pytest.mark.slow
def test_requirements_build_one_cached_env_even_for_jobs_starting_together(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / REQUIREMENTS).write_text("--no-index\npsutil\n")  # already in the base: nothing to download
    logs = [tmp_path / f"job{i}.log" for i in range(2)]
    results: list[str] = []
    threads = [threading.Thread(target=lambda p=p: results.append(python_bin_for(tmp_path / "state", code,
                                                                                  log_path=p)))
               for p in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    bindir = Path(results[0])
    assert bindir.parent.parent == tmp_path / "state" / "envs"
    text = "".join(p.read_text() for p in logs)
    assert text.count("floydd: building") == 1 and text.count("floydd: using the environment") == 1
    assert "Requirement already satisfied: psutil" in text
    res = subprocess.run([str(bindir / "python"), "-c", "import sys, psutil, floydd.agent.sdk; print(sys.prefix)"],
                         capture_output=True, text=True, check=True)
    assert res.stdout.strip() == str(bindir.parent)
    assert python_bin_for(tmp_path / "state", code) == str(bindir)  # cached: no rebuild, no pip


@pytest.mark.slow
def test_a_failed_install_says_pips_last_line_and_leaves_nothing(tmp_path):
    (tmp_path / REQUIREMENTS).write_text("--no-index\nfloydd-surely-missing==9.9\n")
    with pytest.raises(InvalidSpec) as err:
        python_bin_for(tmp_path / "state", tmp_path, log_path=tmp_path / "job.log")
    assert err.value.message.startswith("installing floyd_requirements.txt failed: ")
    assert "floydd-surely-missing" in err.value.message
    assert err.value.message.split(": ", 1)[1] in (tmp_path / "job.log").read_text()
    assert [p.name for p in (tmp_path / "state" / "envs").iterdir() if p.is_dir()] == []
