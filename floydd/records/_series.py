"""The per-job series: metric points, events and system samples (SQL on a given connection).

Write helpers run inside the caller's ``BEGIN IMMEDIATE`` on the write connection; read
helpers inside a read snapshot. ``job_id`` is the job's integer rowid.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import sqlite3
from typing import Any, Iterable

from floydd.errors import InvalidSpec

__all__ = ["insert_metrics", "metric_series", "metric_summary", "insert_event", "events",
           "count_skipped", "skipped_metrics", "insert_samples", "samples", "SKIPPED_KIND"]

MAX_METRIC_NAME = 200
SKIPPED_KIND = "metrics"
"""The kind of the one event that counts a job's skipped metric lines (updated in place, so a
job printing a million bad lines has one warning, not a million)."""
_NAN = math.nan
_INSERT_METRIC = "INSERT INTO metrics (job_id, name_id, step, value, ts) VALUES (?, ?, ?, ?, ?)"
# Fold the rows just inserted (rowid > ?: one writer, so they are all ours) into metric_stats.
# min()/max() skip NULL (NaN); coalesce keeps the side that has a value.
_UPDATE_STATS = (
    "INSERT INTO metric_stats (job_id, name_id, count, lo, hi, last_row) "
    "SELECT job_id, name_id, count(*), min(value), max(value), max(rowid) FROM metrics NOT INDEXED WHERE rowid > ? "
    "GROUP BY job_id, name_id "
    "ON CONFLICT (job_id, name_id) DO UPDATE SET count = count + excluded.count, "
    "lo = coalesce(min(lo, excluded.lo), lo, excluded.lo), "
    "hi = coalesce(max(hi, excluded.hi), hi, excluded.hi), last_row = excluded.last_row")
_SAMPLE_KEYS = ("ts", "cpu_percent", "rss_bytes", "gpu_util", "gpu_mem_bytes")


def insert_metrics(conn: sqlite3.Connection, job_id: int, points: Iterable[tuple], known: dict[str, int],
                   fresh: dict[str, int]) -> int:
    """Insert points with one ``executemany``; names resolve through ``known`` (committed ids,
    read only here) or get interned into ``fresh`` (the caller keeps them once committed)."""

    def intern(name: str) -> int:
        name_id = fresh.get(name)
        if name_id is None:
            if not isinstance(name, str) or not name or len(name) > MAX_METRIC_NAME:
                raise InvalidSpec(f"{name!r} is not a metric name",
                                  hint=f"metric names are non-empty strings of at most {MAX_METRIC_NAME} characters")
            conn.execute("INSERT OR IGNORE INTO metric_names (name) VALUES (?)", (name,))
            (name_id,) = conn.execute("SELECT id FROM metric_names WHERE name = ?", (name,)).fetchone()
            fresh[name] = name_id
        return name_id

    get = known.get
    rows = [(job_id, get(name) or intern(name), step, value, ts) for name, value, step, ts in points]
    if not rows:
        return 0
    (before,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM metrics").fetchone()
    try:
        conn.executemany(_INSERT_METRIC, rows)
    except (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError, OverflowError) as exc:
        raise _bad_point(rows, exc) from None
    conn.execute(_UPDATE_STATS, (before,))
    return len(rows)


def metric_series(conn: sqlite3.Connection, job_id: int,
                  name: str | None) -> dict[str, list[tuple[int | None, float, float]]]:
    sql = ("SELECT n.name, m.step, m.value, m.ts FROM metrics m JOIN metric_names n ON n.id = m.name_id "
           "WHERE m.job_id = ?")
    args: tuple = (job_id,)
    if name is not None:
        sql += " AND m.name_id = (SELECT id FROM metric_names WHERE name = ?)"
        args = (job_id, name)
    rows = conn.execute(sql + " ORDER BY m.name_id, m.rowid", args)
    return {key: [(step, _NAN if value is None else value, ts) for _, step, value, ts in group]
            for key, group in itertools.groupby(rows, operator.itemgetter(0))}


def metric_summary(conn: sqlite3.Connection, job_id: int) -> dict[str, dict]:
    rows = conn.execute(
        "SELECT n.name, s.count, s.lo, s.hi, m.value, m.step, m.ts FROM metric_stats s "
        "JOIN metrics m ON m.rowid = s.last_row JOIN metric_names n ON n.id = s.name_id "
        "WHERE s.job_id = ? ORDER BY s.name_id", (job_id,))
    return {name: {"last": _NAN if last is None else last, "last_step": step, "last_ts": ts,
                   "min": lo, "max": hi, "count": count}
            for name, count, lo, hi, last, step, ts in rows}


def insert_event(conn: sqlite3.Connection, job_id: int, ts: float, kind: str, message: str,
                 data: dict | None) -> None:
    conn.execute("INSERT INTO events (job_id, ts, kind, message, data) VALUES (?, ?, ?, ?, ?)",
                 (job_id, ts, kind, message, None if data is None else json.dumps(data)))


def events(conn: sqlite3.Connection, job_id: int, after: int) -> list[dict]:
    rows = conn.execute("SELECT id, ts, kind, message, data FROM events WHERE job_id = ? AND id > ? "
                        "ORDER BY id", (job_id, after))
    return [{"seq": seq, "ts": ts, "kind": kind, "message": message,
             "data": None if data is None else json.loads(data)}
            for seq, ts, kind, message, data in rows]


def count_skipped(conn: sqlite3.Connection, job_id: int, ts: float, count: int, first: str) -> None:
    """Add ``count`` metric lines to the job's skipped count: its one ``metrics`` event, made
    (naming why the first was skipped) or updated."""
    row = conn.execute("SELECT id, data FROM events WHERE job_id = ? AND kind = ? ORDER BY id LIMIT 1",
                       (job_id, SKIPPED_KIND)).fetchone()
    if row is None:
        total, first_text = count, first
        event_id = None
    else:
        event_id, data = row
        old = json.loads(data) if data else {}
        total, first_text = int(old.get("skipped", 0)) + count, old.get("first") or first
    message = (f"{total} metric line{'s' if total != 1 else ''} skipped (not recorded); "
               f"the first: {first_text}")
    data = json.dumps({"skipped": total, "first": first_text})
    if event_id is None:
        conn.execute("INSERT INTO events (job_id, ts, kind, message, data) VALUES (?, ?, ?, ?, ?)",
                     (job_id, ts, SKIPPED_KIND, message, data))
    else:
        conn.execute("UPDATE events SET message = ?, data = ? WHERE id = ?", (message, data, event_id))


def skipped_metrics(conn: sqlite3.Connection, job_id: int) -> int:
    """How many metric lines of the job were skipped."""
    row = conn.execute("SELECT data FROM events WHERE job_id = ? AND kind = ? ORDER BY id LIMIT 1",
                       (job_id, SKIPPED_KIND)).fetchone()
    return int(json.loads(row[0]).get("skipped", 0)) if row and row[0] else 0


def insert_samples(conn: sqlite3.Connection, job_id: int, samples: Iterable[dict]) -> None:
    conn.executemany(
        "INSERT INTO samples (job_id, ts, cpu_percent, rss_bytes, gpu_util, gpu_mem_bytes) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(job_id, s["ts"], s.get("cpu_percent"), s.get("rss_bytes"), s.get("gpu_util"), s.get("gpu_mem_bytes"))
         for s in samples])


def samples(conn: sqlite3.Connection, job_id: int) -> list[dict]:
    rows = conn.execute("SELECT ts, cpu_percent, rss_bytes, gpu_util, gpu_mem_bytes FROM samples "
                        "WHERE job_id = ? ORDER BY rowid", (job_id,))
    return [dict(zip(_SAMPLE_KEYS, row)) for row in rows]


def _bad_point(rows: list[tuple], exc: Exception) -> Exception:
    """Name the first point SQLite refused (the whole batch was rolled back)."""
    for i, (_, _, step, value, ts) in enumerate(rows):
        if not (_is_number(value) and _is_number(ts) and ts is not None
                and (step is None or (_is_number(step) and float(step).is_integer() and _fits(step)))):
            return InvalidSpec(f"metric point {i} of the batch is not numeric: value={value!r} step={step!r} "
                               f"ts={ts!r}; nothing of this batch was recorded",
                               hint='metric lines look like {"metric": "loss", "value": 0.3, "step": 10}')
    return exc


def _fits(step: int | float) -> bool:
    return -2**63 <= step < 2**63


def _is_number(x: Any) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))
