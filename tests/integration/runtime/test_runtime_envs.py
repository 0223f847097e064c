"""The job's Python: the daemon's own, or a venv cached per floyd_requirements.txt."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from floydd.errors import InvalidSpec
from floydd.agent.sandbox import probe_bwrap
from floydd.runtime.envs import REQUIREMENTS, BuildPolicy, python_bin_for
from tests.integration.runtime._agents import needs_bwrap


def test_default_is_the_daemons_interpreter(tmp_path):
    assert python_bin_for(tmp_path, tmp_path / "code") == str(Path(sys.executable).parent)


def test_a_requirements_file_of_comments_only_needs_no_env(tmp_path):
    (tmp_path / REQUIREMENTS).write_text("# nothing yet\n\n   # really\n")
    assert python_bin_for(tmp_path / "state", tmp_path) == str(Path(sys.executable).parent)
    assert not (tmp_path / "state").exists()


def test_a_ready_marker_the_build_left_as_a_link_or_a_fifo_is_not_read(tmp_path):
    from floydd.runtime import envs
    (tmp_path / envs._READY).symlink_to("/dev/zero")       # read by path, it would never end
    assert envs._ready(tmp_path) is False
    (tmp_path / envs._READY).unlink()
    os.mkfifo(tmp_path / envs._READY)                       # read by path, it would block for good
    assert envs._ready(tmp_path) is False
    (tmp_path / envs._READY).unlink()
    (tmp_path / envs._READY).write_text('{"python": "%s", "version": "%s"}' % (sys.executable, "x"))
    assert envs._ready(tmp_path) is False                  # a marker of another Python


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
    assert [p.name for p in (tmp_path / "state" / "envs").iterdir() if p.is_dir()] == [".pip-cache"]  # pip's, kept


def _wheel(folder: Path, name: str = "floydd_tiny", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel, made by hand (no network, no build tools)."""
    import base64
    import hashlib
    import zipfile
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for path, text in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name_, text in files.items():
            whl.writestr(name_, text)
    return path


@pytest.mark.slow
@needs_bwrap
def test_a_sandboxed_build_without_network_installs_from_the_wheelhouse(state_dir):
    wheels, code = state_dir.parent / f"{state_dir.name}-wheels", state_dir / "jobs" / "p" / "1" / "code"
    wheels.mkdir()
    code.mkdir(parents=True)
    try:
        _wheel(wheels)
        (code / REQUIREMENTS).write_text("floydd_tiny==1.0\n")
        bindir = Path(python_bin_for(state_dir, code, log_path=state_dir / "job.log", bwrap=probe_bwrap()[0],
                                     policy=BuildPolicy(network=False, wheelhouse=str(wheels))))
        log = (state_dir / "job.log").read_text()
        assert "Successfully installed floydd_tiny-1.0" in log.replace("floydd-tiny", "floydd_tiny"), log
        res = subprocess.run([str(bindir / "python"), "-c", "import floydd_tiny, floydd.agent.sdk; print(floydd_tiny.VALUE)"],
                             capture_output=True, text=True, check=True)
        assert res.stdout.strip() == "42"
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
