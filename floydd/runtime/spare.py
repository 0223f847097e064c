"""A job's agent started ahead of time, so a job starts without waiting for Python.

An agent is a Python process that imports floydd's agent code before it can read its spec:
about 100 ms on a desk machine, most of what a job's start costs above a direct spawn. So the
runtime keeps one *spare*: ``python -m floydd.agent --spare``, started the same way as an agent
(the allow-listed environment, a session of its own, no inherited descriptors), with its
imports done, blocked on its stdin, a pipe from this daemon. A job's start hands it the
workspace (one line); the spare then becomes that job's agent exactly as
``python -m floydd.agent WORKSPACE`` would (its folder, ``agent.log``, stdin from /dev/null),
and the next spare is started behind it. A spare that died meanwhile is noticed and a fresh
agent started instead: a job never waits on one.

The spare is kept while the box runs jobs: ``agent_spare_idle`` seconds after the last start
it is let go (its pipe closed; it exits), so a box nobody uses holds no extra process. Its pipe
also closes when the daemon stops or dies, even by ``kill -9``: a spare never outlives it.
0 turns spares off.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from floydd import log

__all__ = ["Spares"]


class Spares:
    """At most one spare agent, made and handed over from worker threads (both block)."""

    def __init__(self, env: dict[str, str], *, idle: float, python: str = sys.executable) -> None:
        self._env, self.idle, self._python = env, idle, python
        self._lock = threading.Lock()
        self._spare: subprocess.Popen | None = None
        self._timer: threading.Timer | None = None
        self._closed = False

    def take(self, ws: Path) -> subprocess.Popen | None:
        """The spare, now the agent of ``ws`` (whose spec is written); None when there is no
        live one (the caller starts an agent itself). Either way a new spare follows."""
        with self._lock:
            spare, self._spare = self._spare, None
        handed = spare is not None and self._hand(spare, ws)
        self.refill()
        return spare if handed else None

    def refill(self) -> None:
        """Start a spare if there is none (and spares are on), and keep it ``idle`` seconds."""
        if self.idle <= 0:
            return
        with self._lock:
            if self._closed:
                return
            if self._spare is None or self._spare.poll() is not None:
                if self._spare is not None:      # died while it waited: its end of the pipe too
                    _close(self._spare)
                try:
                    self._spare = subprocess.Popen(
                        [self._python, "-m", "floydd.agent", "--spare"], stdin=subprocess.PIPE,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/", start_new_session=True,
                        close_fds=True, env=self._env)
                except OSError as exc:       # out of processes or memory: jobs start the slow way
                    log.runtime.warning("cannot start a spare agent: %s", exc)
                    self._spare = None
                    return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.idle, self._let_go)
            self._timer.daemon = True
            self._timer.start()

    def close(self) -> None:
        """Let the spare go (it exits on the closed pipe); no new one after this."""
        with self._lock:
            self._closed = True
        self._let_go()

    def _let_go(self) -> None:
        with self._lock:
            spare, self._spare = self._spare, None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if spare is not None:
            _close(spare)
            try:
                spare.wait(timeout=5)
            except subprocess.TimeoutExpired:
                spare.kill()
                spare.wait()

    @staticmethod
    def _hand(spare: subprocess.Popen, ws: Path) -> bool:
        if spare.poll() is not None:
            _close(spare)
            log.runtime.warning("the spare agent %d had ended (exit %s); starting an agent the usual way",
                                spare.pid, spare.returncode)
            return False
        line = os.fsencode(ws) + b"\n"
        if line.count(b"\n") != 1:           # a path one line cannot say (no job's workspace is one)
            return False
        try:
            spare.stdin.write(line)
            spare.stdin.flush()
        except OSError:                      # it died just now: closed pipe
            _close(spare)
            spare.wait()
            return False
        _close(spare)
        return True


def _close(spare: subprocess.Popen) -> None:
    try:
        spare.stdin.close()
    except OSError:
        pass
