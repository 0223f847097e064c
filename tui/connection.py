"""Find the daemon the way the CLI does, and find it again after it went away.

``floyd top`` must open even when no daemon answers (it shows the banner and
keeps trying), and a daemon that comes back on another socket (the user's, or
the system one) must be found again. :class:`Reconnecting` looks like a
:class:`floydd.client.Client` to the poller and runs
:func:`floydd.reach.connect` (never auto-starting a daemon) whenever it
has no client, dropping the client again on :class:`~floydd.errors.Unavailable`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from floydd.client import Client
from floydd.errors import Unavailable

__all__ = ["Reconnecting", "TIMEOUT"]

TIMEOUT = 5.0
"""Seconds one API call may take before the TUI calls the daemon unreachable."""


def _connect() -> Client:
    from floydd.reach import connect

    return connect(autostart=False)


class Reconnecting:
    """A client that (re)connects on demand; only the poller thread uses it."""

    def __init__(self, connect: Callable[[], Any] = _connect, *, timeout: float = TIMEOUT) -> None:
        self._connect = connect
        self._timeout = timeout
        self._client: Any = None
        self.where = "the local floydd socket"

    def _get(self) -> Any:
        if self._client is None:
            client = self._connect()
            if getattr(client, "timeout", None) is not None:
                client.timeout = min(client.timeout, self._timeout)
            self._client = client
            self.where = str(getattr(client, "where", self.where))
        return self._client

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._get(), name)(*args, **kwargs)
        except Unavailable:
            self._client = None
            raise

    def info(self) -> dict:
        return self._call("info")

    def nodes(self) -> list[dict]:
        return self._call("nodes")

    def jobs(self, project: str | None = None, state: str | None = None, *, limit: int | None = None,
             offset: int = 0, sort: str | None = None, q: str | None = None) -> list[dict]:
        return self._call("jobs", project=project, state=state, limit=limit, offset=offset, sort=sort, q=q)

    def job(self, key: str) -> dict:
        return self._call("job", key)

    def metrics(self, key: str) -> dict:
        return self._call("metrics", key)

    def compare(self, keys: list[str]) -> dict:
        return self._call("compare", keys)

    def stop(self, key: str) -> dict:
        return self._call("stop", key)

    def restart(self, key: str, overrides: dict) -> dict:
        return self._call("restart", key, overrides)

    def logs(self, key: str, *, follow: bool = False, offset: int = 0) -> Iterator[bytes]:
        lines = self._call("logs", key, follow=follow, offset=offset)
        try:
            yield from lines
        except Unavailable:
            self._client = None
            raise
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
