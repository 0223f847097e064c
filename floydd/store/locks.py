"""The store lock: many uploads/restores/verifies share it, gc takes it alone.

``flock`` on ``locks/store.lock``. Each holder opens its own descriptor, so the lock works
between threads of one process and between processes (the CLI and the daemon), and the
kernel drops it when a holder dies, even by SIGKILL.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from floydd.errors import Conflict

__all__ = ["StoreLock"]


class StoreLock:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(mode=0o700, exist_ok=True)

    @contextmanager
    def shared(self, timeout: float = 600.0) -> Iterator[None]:
        with self._hold(fcntl.LOCK_SH, timeout, "an upload or restore waits for a running gc"):
            yield

    @contextmanager
    def exclusive(self, timeout: float = 600.0) -> Iterator[None]:
        with self._hold(fcntl.LOCK_EX, timeout, "gc waits for running uploads, restores and verifies"):
            yield

    @contextmanager
    def _hold(self, kind: int, timeout: float, what: str) -> Iterator[None]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            deadline = time.monotonic() + timeout
            delay = 0.005
            while True:
                try:
                    fcntl.flock(fd, kind | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise Conflict(f"the store is busy: {what} (gave up after {timeout:.0f}s)",
                                       hint="try again when the other operation has finished") from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.2)
            yield
        finally:
            os.close(fd)
