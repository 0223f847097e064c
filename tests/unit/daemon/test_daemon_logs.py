"""Where the daemon logs (floydd/daemon/logs.py): a rotated file in user mode, the journal's
stderr in system mode, and the CLI's background daemon whose stderr is the log file itself."""

from __future__ import annotations

import io
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from floydd.config import preset_for_tests
from floydd.daemon import logs
from floydd.errors import FloyddError

ROOT = Path(__file__).resolve().parents[3]
LOG = logging.getLogger("floydd.daemon")


@pytest.fixture(autouse=True)
def _root_logger():
    """Each test sets up logging from scratch and leaves the root logger as it found it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = [h for h in handlers if not getattr(h, "_floydd", False)]
    yield
    for handler in root.handlers[:]:
        if getattr(handler, "_floydd", False):
            root.removeHandler(handler)
            handler.close()
    root.handlers, root.level = handlers, level


def _config(tmp_path: Path, **overrides):
    state = tmp_path / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    return preset_for_tests(state, **overrides)


def _journal(path: Path) -> tuple[io.TextIOWrapper, dict[str, str]]:
    """A file standing in for the journal's stream, and the environment systemd would give."""
    stream = open(path, "w")
    st = os.fstat(stream.fileno())
    return stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}


def test_a_user_daemons_log_rotates_at_the_size_limit_and_keeps_so_many(tmp_path):
    config = _config(tmp_path)
    echo = io.StringIO()
    where = logs.setup(config, env={}, stderr=echo, max_bytes=2000, backups=2)
    assert where == logs.Destination(file=config.log_path, stderr="plain")
    for i in range(100):
        LOG.info("line %03d %s", i, "x" * 80)   # ~130 bytes a line: ~6 rotations
    files = sorted(p.name for p in config.state_dir.iterdir())
    assert files == ["floydd.log", "floydd.log.1", "floydd.log.2"], files
    sizes = {name: (config.state_dir / name).stat().st_size for name in files}
    assert all(0 < size <= 2000 for size in sizes.values()), sizes
    kept = [line for name in ("floydd.log.2", "floydd.log.1", "floydd.log")
            for line in (config.state_dir / name).read_text().splitlines()]
    numbers = [int(line.split("line ")[1][:3]) for line in kept]
    assert numbers == list(range(numbers[0], 100)) and numbers[0] > 0   # in order, the oldest dropped
    assert " INFO floydd.daemon: line 099 " in kept[-1]                 # timestamped, level, logger
    assert stat.S_IMODE(config.log_path.stat().st_mode) == 0o600
    assert echo.getvalue().count("\n") == 100                           # stderr saw every line


def test_system_mode_logs_to_stderr_and_writes_no_file(tmp_path):
    config = _config(tmp_path, system=True)
    echo = io.StringIO()
    assert logs.setup(config, env={}, stderr=echo) == logs.Destination(file=None, stderr="plain")
    LOG.info("serving")
    LOG.debug("not at info level")
    assert list(config.state_dir.iterdir()) == []
    (line,) = echo.getvalue().splitlines()
    assert line.endswith(" INFO floydd.daemon: serving") and line[:4].isdigit()   # a timestamp first


def test_under_the_journal_lines_carry_priorities_and_no_timestamp(tmp_path):
    config = _config(tmp_path, system=True)
    stream, env = _journal(tmp_path / "journal")
    with stream:
        assert logs.setup(config, env=env, stderr=stream).stderr == "journal"
        LOG.info("serving")
        LOG.warning("no GPU")
        try:
            raise ValueError("boom")
        except ValueError:
            LOG.exception("failed")
    lines = (tmp_path / "journal").read_text().splitlines()
    assert lines[:3] == ["<6>floydd.daemon: serving", "<4>floydd.daemon: no GPU", "<3>floydd.daemon: failed"]
    trace = lines[3:]
    assert trace[0] == "<3>Traceback (most recent call last):" and trace[-1] == "<3>ValueError: boom"
    assert all(line.startswith("<3>") for line in trace)    # the journal reads each line's own priority
    assert list(config.state_dir.iterdir()) == []


def test_a_journal_stream_inherited_from_elsewhere_is_not_the_journal(tmp_path):
    config = _config(tmp_path, system=True)
    stream, env = _journal(tmp_path / "journal")
    with stream, open(tmp_path / "other", "w") as other:
        assert logs.setup(config, env=env, stderr=other).stderr == "plain"
        LOG.info("serving")
    assert " INFO floydd.daemon: serving" in (tmp_path / "other").read_text()


def test_a_user_unit_keeps_its_file_and_tells_the_journal_only_warnings(tmp_path):
    config = _config(tmp_path)
    stream, env = _journal(tmp_path / "journal")
    with stream:
        where = logs.setup(config, env=env, stderr=stream)
        LOG.info("serving")
        LOG.error("disk full")
    assert where == logs.Destination(file=config.log_path, stderr="journal", stderr_level=logging.WARNING)
    assert (tmp_path / "journal").read_text() == "<3>floydd.daemon: disk full\n"
    text = config.log_path.read_text()
    assert "INFO floydd.daemon: serving" in text and "ERROR floydd.daemon: disk full" in text


def test_setting_up_again_replaces_what_was_set_up(tmp_path):
    config = _config(tmp_path)
    echo = io.StringIO()
    logs.setup(config, env={}, stderr=echo)
    logs.setup(config, env={}, stderr=echo)
    LOG.info("once")
    assert echo.getvalue().count("once") == 1 and config.log_path.read_text().count("once") == 1


def test_a_log_file_planted_as_a_link_is_refused(tmp_path):
    config = _config(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    config.log_path.symlink_to(victim)
    with pytest.raises(FloyddError, match="symbolic link"):
        logs.setup(config, env={}, stderr=io.StringIO())
    assert victim.read_text() == "keep\n"


_BACKGROUND = textwrap.dedent("""
    import logging, os, sys
    from floydd.config import preset_for_tests
    from floydd.daemon import logs
    where = logs.setup(preset_for_tests(sys.argv[1]), env={}, max_bytes=600, backups=3)
    assert where.stderr == "" and where.stderr_is_file, where
    for i in range(20):
        logging.getLogger("floydd.daemon").info("record %02d %s", i, "y" * 40)
    os.write(2, b"RAW AFTER THE ROTATIONS\\n")     # what a crash's traceback would do
    print("STDOUT AFTER THE ROTATIONS", flush=True)
""")


def test_the_background_daemons_stderr_is_its_log_file_and_moves_with_each_rotation(tmp_path):
    """As the CLI starts it (floydd/cli/common.py): stdout and stderr on floydd.log, appending."""
    config = _config(tmp_path)
    config.log_path.write_text("from an earlier daemon\n")
    config.log_path.chmod(0o600)
    with open(config.log_path, "ab") as out:
        res = subprocess.run([sys.executable, "-c", _BACKGROUND, str(config.state_dir)], cwd=ROOT,
                             stdout=out, stderr=subprocess.STDOUT, timeout=60)
    files = {p.name: p.read_text() for p in config.state_dir.iterdir()}
    assert res.returncode == 0, files
    assert sorted(files) == ["floydd.log", "floydd.log.1", "floydd.log.2", "floydd.log.3"], sorted(files)
    current = files["floydd.log"]
    assert "RAW AFTER THE ROTATIONS" in current and "STDOUT AFTER THE ROTATIONS" in current
    everything = "".join(files.values())
    assert everything.count("RAW AFTER") == 1
    records = [line for line in everything.splitlines() if "record " in line]
    assert len(records) == len(set(records))            # not written twice (file and stderr)
    assert all(len(text) <= 600 for text in files.values()), {k: len(v) for k, v in files.items()}
