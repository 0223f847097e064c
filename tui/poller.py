"""The one poller: the only code in the TUI that talks to the daemon.

:class:`Poller` is plain synchronous code (no Textual): the app calls
:meth:`Poller.poll` from a single thread worker about once a second and posts
the :class:`~floydd.tui.poll.Snapshot` it returns. It fetches only what the
visible screen needs (:class:`~floydd.tui.poll.Want`), keeps what must
outlive one poll (GPU utilisation history, the log offset and tail of the job
in detail, metric series of finished jobs) and carries the last good data over
while the daemon is unreachable, so the screens can keep showing it under the
banner.

User commands (stop, restart) are queued with :meth:`Poller.submit` and run by
the same thread at the start of its next cycle: one thread, one client.
"""

from __future__ import annotations

import collections
import dataclasses
import http.client
import logging
import queue
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from floydd.answers import decode_job, decode_jobs
from floydd.client import GONE
from floydd.errors import FloyddError, Forbidden, Unavailable
from floydd.model import OPEN_STATES
from floydd.tui.poll import Comparison, Detail, LogLine, Points, Snapshot, View, Want

__all__ = ["Poller", "Stop", "Restart", "Outcome"]

log = logging.getLogger("floydd.tui")

_CPU = -1  # history key for a node's CPU
_METRICS_CACHE = 64


@dataclass(frozen=True, slots=True)
class Stop:
    key: str


@dataclass(frozen=True, slots=True)
class Restart:
    key: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a command, for a notification."""

    ok: bool
    message: str
    hint: str = ""


class Poller:
    """Fetches snapshots through ``client`` (a :class:`floydd.client.Client` or look-alike)."""

    def __init__(self, client: Any, *, clock: Callable[[], float] = time.time, history: int = 40,
                 log_tail: int = 500, log_chunk: int = 1 << 20) -> None:
        self.client = client
        self.clock = clock
        self._history_len = history
        self._log_chunk = log_chunk
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._seq = 0
        self._last: Snapshot | None = None
        self._last_ok: float | None = None
        self._history: dict[tuple[str, int], collections.deque[int]] = {}
        self._finished_metrics: collections.OrderedDict[str, Mapping[str, Points]] = collections.OrderedDict()
        self._log_key: tuple[str, Any] | None = None
        self._log_offset = 0
        self._log_total = 0
        self._log: collections.deque[LogLine] = collections.deque(maxlen=log_tail)

    # -- commands ---------------------------------------------------------------------

    def submit(self, command: Stop | Restart) -> None:
        """Queue a command for the poller thread (safe from any thread)."""
        self._commands.put(command)

    def run_commands(self) -> list[Outcome]:
        outcomes = []
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return outcomes
            outcomes.append(self._run(command))

    def _run(self, command: Stop | Restart) -> Outcome:
        try:
            if isinstance(command, Stop):
                self.client.stop(command.key)
                return Outcome(True, f"stopping {command.key}")
            answer = self.client.restart(command.key, dict(command.overrides))
            new = answer.get("id") if isinstance(answer, dict) else None
            return Outcome(True, f"restarted {command.key} as {new}" if new else f"restarted {command.key}")
        except FloyddError as exc:
            return Outcome(False, exc.message, exc.hint)
        except Exception as exc:  # noqa: BLE001 - a notification, never a traceback
            log.exception("command %r failed", command)
            return Outcome(False, f"{type(exc).__name__}: {exc}")

    # -- polling ----------------------------------------------------------------------

    def poll(self, want: Want) -> Snapshot:
        """One snapshot for ``want``; never raises."""
        started = time.perf_counter()
        self._seq += 1
        now = self.clock()
        prev = self._last
        where = str(getattr(self.client, "where", ""))
        try:
            parts = self._fetch(want)
        except Unavailable as exc:
            snap = self._stale(prev, want, now, exc.message, exc.hint, where)
        except FloyddError as exc:
            snap = self._stale(prev, want, now, f"floydd refused: {exc.message}", exc.hint, where)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            snap = self._stale(prev, want, now, f"lost the connection to floydd at {where}: {exc}",
                               "check the daemon: `floydd status`", where)
        except Exception as exc:  # noqa: BLE001 - the banner, never a traceback
            log.exception("poll failed")
            snap = self._stale(prev, want, now, f"poller error: {type(exc).__name__}: {exc}",
                               "this is a bug in floyd top; please report it", where)
        else:
            self._last_ok = now
            base = _carry(prev)
            base.update(parts)
            snap = Snapshot(seq=self._seq, now=now, want=want, reachable=True, where=where,
                            last_ok=now, **base)
        self._last = snap = dataclasses.replace(snap, poll_ms=(time.perf_counter() - started) * 1000)
        return snap

    def _stale(self, prev: Snapshot | None, want: Want, now: float, error: str, hint: str,
               where: str) -> Snapshot:
        return Snapshot(seq=self._seq, now=now, want=want, reachable=False, error=error, hint=hint,
                        where=where, last_ok=self._last_ok, **_carry(prev))

    def _fetch(self, want: Want) -> dict[str, Any]:
        parts: dict[str, Any] = {"info": self.client.info()}
        if want.view == View.CLUSTER:
            nodes = tuple(self.client.nodes())
            parts["nodes"] = nodes
            parts["history"] = self._record_history(nodes)
            parts["jobs"] = tuple(decode_jobs(self.client.jobs(state="running")))
            parts.update(all_jobs=False, more_jobs=False, open_jobs=None)
        elif want.view == View.JOBS:
            jobs = tuple(decode_jobs(self.client.jobs(state=want.state, limit=want.limit, sort=want.sort,
                                                      q=want.text)))
            more = want.limit is not None and len(jobs) >= want.limit
            counts = more or bool(want.text)        # the header counts every open job, not the page's
            parts.update(jobs=jobs, all_jobs=True, more_jobs=more, open_jobs=tuple(decode_jobs(
                self.client.jobs(state=",".join(sorted(OPEN_STATES))))) if counts else None)
        elif want.view == View.EXPERIMENTS:
            runs = tuple(decode_jobs(self.client.jobs(want.project, limit=want.limit))) if want.project else ()
            mine = {j.id for j in runs}
            recent = (j for j in decode_jobs(self.client.jobs(limit=want.limit)) if j.id not in mine)
            parts.update(jobs=runs + tuple(recent), all_jobs=True, more_jobs=False, open_jobs=None)
        if want.view == View.DETAIL and want.job:
            parts["detail"] = self._detail(want.job)
        if want.view == View.EXPERIMENTS:
            parts["comparison"] = self._comparison(want.compare) if want.compare else None
        return parts

    def _record_history(self, nodes: tuple[Mapping[str, Any], ...]) -> dict[tuple[str, int], tuple[int, ...]]:
        seen = set()
        for node in nodes:
            name = str(node.get("name", "?"))
            samples = [(_CPU, node.get("cpu_percent"))]
            samples += [(g.get("index", i), g.get("utilization")) for i, g in enumerate(node.get("gpus") or ())]
            for index, value in samples:
                key = (name, int(index))
                seen.add(key)
                ring = self._history.get(key)
                if ring is None:
                    ring = self._history[key] = collections.deque(maxlen=self._history_len)
                if isinstance(value, (int, float)):
                    ring.append(int(round(value)))
        for key in self._history.keys() - seen:
            del self._history[key]
        return {key: tuple(ring) for key, ring in self._history.items()}

    def _detail(self, key: str) -> Detail:
        try:
            answer = self.client.job(key)
        except Unavailable:
            raise
        except FloyddError as exc:
            return Detail(key=key, error=exc.message)
        job = decode_job(answer)
        log_id = (key, job.attempts)   # a rerun writes a new log (the latest attempt's): from its start
        if log_id != self._log_key:
            self._log_key, self._log_offset, self._log_total = log_id, 0, 0
            self._log.clear()
        try:
            series, system = self._metrics(key, job.state)
        except Forbidden:           # a box whose job_logs is owner: the job, not its numbers (its log says why)
            series, system = {}, ()
        note = self._read_log(key, ended=job.state not in OPEN_STATES)
        return Detail(key=key, job=job, metrics=series, system=system, log=tuple(self._log) + note,
                      log_total=self._log_total)

    def _metrics(self, key: str, state: Any) -> tuple[Mapping[str, Points], tuple]:
        cached = self._finished_metrics.get(key)
        if cached is not None and state not in OPEN_STATES:
            return cached
        answer = self.client.metrics(key) or {}
        series = {name: tuple((float(p[0]), float(p[1])) for p in points if p[1] is not None)
                  for name, points in (answer.get("metrics") or {}).items()}
        result = (series, tuple(answer.get("system") or ()))
        if state not in OPEN_STATES:
            self._finished_metrics[key] = result
            while len(self._finished_metrics) > _METRICS_CACHE:
                self._finished_metrics.popitem(last=False)
        return result

    def _read_log(self, key: str, ended: bool) -> tuple[LogLine, ...]:
        """Read on in the job's log; a note line (not kept) when the daemon says the log is
        unavailable now (the box that runs the job is away). The daemon itself gone is raised."""
        lines = self.client.logs(key, follow=False, offset=self._log_offset)
        read = 0
        try:
            for raw in lines:
                if not raw.endswith(b"\n") and not ended:
                    break  # a line still being written: read it whole next time
                self._log_offset += len(raw)
                self._log_total += 1
                self._log.append(_parse_log_line(raw))
                read += len(raw)
                if read >= self._log_chunk:
                    break  # a long backlog: the rest next poll, the UI stays live
        except FloyddError as exc:
            if exc.code == GONE:
                raise
            return (LogLine(0.0, "e", f"[floydd] log unavailable: {exc.message}"),)
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
        return ()

    def _comparison(self, keys: tuple[str, ...]) -> Comparison:
        try:
            table = self.client.compare(list(keys))
        except Unavailable:
            raise
        except FloyddError as exc:
            return Comparison(keys=keys, error=exc.message)
        states = {j.get("id"): j.get("state") for j in table.get("jobs") or ()}
        curves = {}
        for key in keys:
            try:
                curves[key] = self._metrics(key, states.get(key, "running"))[0]
            except Unavailable:
                raise
            except FloyddError:
                curves[key] = {}
        return Comparison(keys=keys, table=table, curves=curves)


def _parse_log_line(raw: bytes) -> LogLine:
    text = raw.decode("utf-8", errors="replace").rstrip("\n")
    ts, _, rest = text.partition(" ")
    stream, _, body = rest.partition(" ")
    try:
        return LogLine(float(ts), stream if stream in ("o", "e") else "o", body)
    except ValueError:
        return LogLine(0.0, "o", text)


def _carry(prev: Snapshot | None) -> dict[str, Any]:
    """What a snapshot keeps from the one before: the parts this poll did not fetch."""
    if prev is None:
        return {}
    return {"info": prev.info, "nodes": prev.nodes, "jobs": prev.jobs, "all_jobs": prev.all_jobs,
            "more_jobs": prev.more_jobs, "open_jobs": prev.open_jobs, "history": prev.history,
            "detail": prev.detail, "comparison": prev.comparison}
