"""Where a running daemon's log goes: the journal for a service, a rotated file for a user's.

- **System mode under systemd** (``packaging/units/floydd.service``): stderr, which is the
  journal (``JOURNAL_STREAM`` names it). No timestamp (the journal adds one); every line led
  by its record's priority, ``<3>`` for an error (sd-daemon(3)), so ``journalctl -p err``
  works.
- **System mode elsewhere** (a container, the site's own supervisor): stderr with
  timestamps, for whoever keeps it. Never a file.
- **User mode**: ``STATE/floydd.log``, rotated when it would pass :data:`MAX_BYTES`, with
  :data:`BACKUPS` old ones kept (``floydd.log.1`` the newest). Also stderr, for a person or a
  test watching ``floydd start``, except in the two cases below.
- **User mode, stderr is the log file** (the CLI's background daemon): the file only. The
  CLI starts that daemon with stdout and stderr on ``floydd.log``, so a crash before logging
  is set up lands there for its error message; at each rotation those descriptors move to
  the new file, and what reaches them later (a traceback logging never saw) stays in the
  current log.
- **User mode under systemd --user** (``packaging/units/user/floydd.service``): the file;
  the journal gets warnings and errors only (``systemctl --user status floydd`` shows them).

The file is opened as the state dir's other private files are (never through a link, this
user's, 0600: :func:`floydd.security.owned_dirs.open_private_file`). Only the daemon holding
the state dir's lock calls :func:`setup`, so one process rotates the file.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, TextIO

from floydd.config import Config
from floydd.security.owned_dirs import open_private_file

__all__ = ["setup", "Destination", "destination", "MAX_BYTES", "BACKUPS"]

MAX_BYTES = 10 * 1024 * 1024
"""A user daemon's ``floydd.log`` is rotated when the next line would take it past this size."""
BACKUPS = 5
"""Rotated files kept (``floydd.log.1`` .. ``floydd.log.5``): at most 60 MiB of log in all."""

_TIMED = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


@dataclass(frozen=True, slots=True)
class Destination:
    """Where :func:`setup` sends records (:func:`destination` decides, without side effects)."""

    file: Path | None
    """The rotated log file (user mode), or None."""
    stderr: str
    """How stderr gets records: ``journal`` (priority prefixes, no timestamp), ``plain``
    (timestamps), or ``""`` (not at all)."""
    stderr_level: int = logging.NOTSET
    """Records below this level are not written to stderr."""
    stderr_is_file: bool = False
    """stdout/stderr are the log file itself: moved to the new file at each rotation."""


def destination(config: Config, *, env: Mapping[str, str] | None = None,
                stderr: TextIO | None = None) -> Destination:
    """Where this daemon's log goes (the table in the module docstring)."""
    env = os.environ if env is None else env
    err = _identity(sys.stderr if stderr is None else stderr)
    journal = err is not None and _journal_stream(env) == err
    if config.system:
        return Destination(file=None, stderr="journal" if journal else "plain")
    if journal:
        return Destination(file=config.log_path, stderr="journal", stderr_level=logging.WARNING)
    try:
        st = os.stat(config.log_path)
        is_file = err is not None and (st.st_dev, st.st_ino) == err
    except OSError:
        is_file = False
    return Destination(file=config.log_path, stderr="" if is_file else "plain", stderr_is_file=is_file)


def setup(config: Config, *, env: Mapping[str, str] | None = None, stderr: TextIO | None = None,
          max_bytes: int = MAX_BYTES, backups: int = BACKUPS) -> Destination:
    """Send the daemon's records (every logger's, at ``config.log_level``) where
    :func:`destination` says; replaces what an earlier call set up. Returns the destination."""
    stream = sys.stderr if stderr is None else stderr
    where = destination(config, env=env, stderr=stream)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_floydd", False)]:
        root.removeHandler(old)
        old.close()
    handlers: list[logging.Handler] = []
    if where.file is not None:
        follow = tuple(fd for fd in (1, 2) if _fd_identity(fd) == _identity(stream)) if where.stderr_is_file else ()
        rotating = _RotatingFile(where.file, max_bytes, backups, follow)
        rotating.setFormatter(logging.Formatter(_TIMED))
        handlers.append(rotating)
    if where.stderr:
        echo = logging.StreamHandler(stream)
        echo.setFormatter(_JournalFormatter() if where.stderr == "journal" else logging.Formatter(_TIMED))
        echo.setLevel(where.stderr_level)
        handlers.append(echo)
    for handler in handlers:
        handler._floydd = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(config.log_level.upper())
    return where


class _JournalFormatter(logging.Formatter):
    """``<N>logger: message``, every line of it (a traceback's too) led by the priority: the
    journal splits stderr at newlines and reads each line's own prefix."""

    def __init__(self) -> None:
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{_PRIORITY.get(record.levelno, 3 if record.levelno > logging.WARNING else 6)}>"
        return "\n".join(prefix + line for line in super().format(record).splitlines())


class _RotatingFile(logging.handlers.RotatingFileHandler):
    """A size-rotated file opened safely; ``follow``: descriptors (1, 2) that are this file,
    pointed at the new one after each rotation so what is written there (a traceback that
    never reached logging) goes on landing in the current log."""

    def __init__(self, path: Path, max_bytes: int, backups: int, follow: tuple[int, ...]) -> None:
        self._follow = follow
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")

    def _open(self):
        fd = open_private_file(Path(self.baseFilename), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)

    def doRollover(self) -> None:
        super().doRollover()
        if self.stream is not None:
            for fd in self._follow:
                os.dup2(self.stream.fileno(), fd)


def _journal_stream(env: Mapping[str, str]) -> tuple[int, int] | None:
    """``JOURNAL_STREAM=DEV:INODE`` (systemd.exec(5)): the journal's stream, if one is named."""
    dev, sep, ino = env.get("JOURNAL_STREAM", "").partition(":")
    try:
        return (int(dev), int(ino)) if sep else None
    except ValueError:
        return None


def _identity(stream: TextIO) -> tuple[int, int] | None:
    try:
        return _fd_identity(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a real file (pytest's capture, a StringIO)
        return None


def _fd_identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino
