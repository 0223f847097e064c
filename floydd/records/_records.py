"""The experiment records of one node: :class:`Records`, a synchronous, thread-safe API.

The daemon calls it from worker threads (``asyncio.to_thread``). Writes are serialised
on one connection (see :mod:`._db`); reads run in parallel on per-thread connections.
Jobs are named by ``(project, number)``; their key string is ``"project/number"``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

from floydd import log
from floydd.errors import Conflict, NotFound
from floydd.model import FINAL_STATES, Run, check_project, check_state, check_transition
from floydd.records import _series
from floydd.records._db import Connections
from floydd.records._jobs import COLUMNS, decode_row, encode_fields

__all__ = ["Records"]

_JOB_COLUMNS = ("project", "number", "state", *COLUMNS)
_SELECT_JOB = ("SELECT p.name, j.number, j.state, " + ", ".join(f'j."{c}"' for c in COLUMNS)
               + " FROM jobs j JOIN projects p ON p.id = j.project_id")


class Records:
    """SQLite records of the jobs that ran on this node (``records.db``), WAL, one writer."""

    def __init__(self, path: Path) -> None:
        """Open (creating and migrating as needed) the records database at ``path``."""
        self.path = Path(path)
        self._db = Connections(self.path)
        self._metric_names: dict[str, int] = {}  # committed interned ids only

    def close(self) -> None:
        """Close every connection; idempotent. Later calls raise ``Unavailable``."""
        self._db.close()

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pragmas(self) -> dict[str, dict[str, Any]]:
        """The effective pragmas of the write connection and of this thread's read one."""
        return self._db.pragmas()

    # -- projects ----------------------------------------------------------------------------

    def ensure_project(self, name: str, *, owner: str = "") -> None:
        """Create the project if missing; an ownerless project takes ``owner``."""
        check_project(name)
        with self._db.write() as conn:
            _ensure_project(conn, name, owner)

    def list_projects(self) -> list[dict]:
        """``[{"name", "owner", "created", "jobs", "last_number"}]`` by name."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT p.name, p.owner, p.created, count(j.id), p.last_number FROM projects p "
                "LEFT JOIN jobs j ON j.project_id = p.id GROUP BY p.id ORDER BY p.name").fetchall()
        return [dict(zip(("name", "owner", "created", "jobs", "last_number"), row)) for row in rows]

    # -- jobs --------------------------------------------------------------------------------

    def allocate_job(self, project: str, fields: dict) -> int:
        """Insert a ``queued`` job under the project's next number (creating the project if
        needed) and return the number. Numbers run 1, 2, ... and are never reused."""
        check_project(project)
        values = encode_fields(fields)
        values.setdefault("created", time.time())
        owner = fields.get("user", "")
        with self._db.write() as conn:
            project_id = _ensure_project(conn, project, owner)
            conn.execute("UPDATE projects SET last_number = last_number + 1 WHERE id = ?", (project_id,))
            (number,) = conn.execute("SELECT last_number FROM projects WHERE id = ?", (project_id,)).fetchone()
            values.update(project_id=project_id, number=number, state="queued")
            conn.execute(f"INSERT INTO jobs ({', '.join(map(_quote, values))}) "
                         f"VALUES ({', '.join('?' * len(values))})", tuple(values.values()))
        log.records.debug("allocated job %s/%d", project, number)
        return number

    def insert_job(self, project: str, number: int, fields: dict) -> None:
        """Insert a ``queued`` job under a number given by the cluster (``Conflict`` if this
        node already has a job with that number); later local numbers follow it."""
        check_project(project)
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise TypeError(f"job number must be a positive int, not {number!r}")
        values = encode_fields(fields)
        values.setdefault("created", time.time())
        with self._db.write() as conn:
            project_id = _ensure_project(conn, project, fields.get("user", ""))
            if conn.execute("SELECT 1 FROM jobs WHERE project_id = ? AND number = ?",
                            (project_id, number)).fetchone():
                raise Conflict(f"this node already has a job {project}/{number}", code="job_exists",
                               hint="its own history from before it joined the cluster uses that number")
            conn.execute("UPDATE projects SET last_number = max(last_number, ?) WHERE id = ?", (number, project_id))
            values.update(project_id=project_id, number=number, state="queued")
            conn.execute(f"INSERT INTO jobs ({', '.join(map(_quote, values))}) "
                         f"VALUES ({', '.join('?' * len(values))})", tuple(values.values()))
        log.records.debug("inserted job %s/%d", project, number)

    def update_job(self, project: str, number: int, **fields: Any) -> None:
        """Set job fields (not ``state``: see :meth:`set_state`)."""
        values = encode_fields(fields)
        with self._db.write() as conn:
            job_id = _job_id(conn, project, number)
            _update(conn, job_id, values)

    def set_state(self, project: str, number: int, state: str, reason: str = "", **fields: Any) -> None:
        """Move the job to ``state`` (a valid transition, else ``Conflict``) with its other fields.

        Writes a ``state`` event; entering ``running`` sets ``started``, entering a final
        state sets ``ended`` (unless given); leaving ``queued`` clears ``waiting_for``.
        """
        check_state(state)
        if not isinstance(reason, str):
            raise TypeError(f"reason must be str, not {type(reason).__name__}")
        values = encode_fields(fields)
        key = f"{project}/{number}"
        now = time.time()
        with self._db.write() as conn:
            job_id = _job_id(conn, project, number)
            (old,) = conn.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            check_transition(key, old, state)
            values.update(state=state, reason=reason)
            if state == "running":
                values.setdefault("started", now)
            if state in FINAL_STATES:
                values.setdefault("ended", now)
            if old == "queued":
                values.setdefault("waiting_for", "")
            _update(conn, job_id, values)
            message = f"{old} → {state}: {reason}" if reason else f"{old} → {state}"
            _series.insert_event(conn, job_id, now, "state", message, {"from": old, "to": state})
        log.records.info("job %s: %s", key, message)

    def get_job(self, project: str, number: int) -> dict:
        """The job as a dict of every column plus ``"id"``; ``NotFound`` if there is none."""
        with self._db.read() as conn:
            row = conn.execute(f"{_SELECT_JOB} WHERE p.name = ? AND j.number = ?", (project, number)).fetchone()
        if row is None:
            raise _job_not_found(project, number)
        return decode_row(_JOB_COLUMNS, row)

    def get_run(self, project: str, number: int) -> Run:
        """The record typed (:class:`~floydd.model.Run`); ``NotFound`` if there is none."""
        return Run.from_row(self.get_job(project, number))

    def list_runs(self, project: str | None = None, states: Iterable[str] | None = None) -> list[Run]:
        """:meth:`list_jobs`, typed."""
        return [Run.from_row(job) for job in self.list_jobs(project, states)]

    def list_jobs(self, project: str | None = None, states: Iterable[str] | None = None,
                  limit: int | None = None) -> list[dict]:
        """Jobs, newest first, optionally of one project and/or in some states."""
        where, args = [], []
        if project is not None:
            where.append("p.name = ?")
            args.append(project)
        if states is not None:
            wanted = [check_state(s) for s in ([states] if isinstance(states, str) else states)]
            if not wanted:
                return []
            where.append(f"j.state IN ({', '.join('?' * len(wanted))})")
            args.extend(wanted)
        sql = _SELECT_JOB + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY j.id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._db.read() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [decode_row(_JOB_COLUMNS, row) for row in rows]

    def delete_job(self, project: str, number: int) -> None:
        """Delete the job with its metrics, events and samples (its number stays used)."""
        with self._db.write() as conn:
            job_id = _job_id(conn, project, number)
            conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))  # ON DELETE CASCADE
        log.records.info("deleted job %s/%s", project, number)

    # -- metrics -----------------------------------------------------------------------------

    def add_metrics(self, project: str, number: int,
                    points: Iterable[tuple[str, float, int | None, float]], *,
                    log_offset: int | None = None, skipped: int = 0, first_skip: str = "",
                    attempt: int | None = None) -> int:
        """Record ``(name, value, step, unix_ts)`` points in one transaction; return the count.

        A batch with a non-numeric value or a step that is not a 64-bit whole number raises
        ``InvalidSpec`` and records nothing. ``log_offset``, if given, is stored in the same
        transaction (so the tailer's offset never runs ahead of what it recorded), and so is
        ``skipped``: metric lines the tailer skipped, added to the job's count (its one
        ``metrics`` event, which names ``first_skip``: why the first was skipped). With
        ``attempt``, a record of another attempt (the job placed here again since) is
        ``NotFound`` and nothing is recorded.
        """
        if log_offset is not None:
            _check_offset(log_offset)
        fresh: dict[str, int] = {}
        with self._db.write() as conn:
            job_id = _job_id(conn, project, number)
            if attempt is not None:
                (now,) = conn.execute("SELECT attempt FROM jobs WHERE id = ?", (job_id,)).fetchone()
                if now != attempt:
                    raise NotFound(f"job {project}/{number} is recorded here for attempt {now}, not {attempt}",
                                   hint="the job was placed here again")
            count = _series.insert_metrics(conn, job_id, points, self._metric_names, fresh)
            if skipped:
                _series.count_skipped(conn, job_id, time.time(), skipped, first_skip)
            if log_offset is not None:
                _set_log_offset(conn, job_id, log_offset)
        self._metric_names.update(fresh)  # only once committed: a rolled-back id must not stick
        return count

    def skipped_metrics(self, project: str, number: int) -> int:
        """How many metric lines of the job were skipped (not recorded)."""
        with self._db.read() as conn:
            return _series.skipped_metrics(conn, _job_id(conn, project, number))

    def metric_series(self, project: str, number: int,
                      name: str | None = None) -> dict[str, list[tuple[int | None, float, float]]]:
        """``name -> [(step, value, ts)]`` in insertion order (only names with points)."""
        with self._db.read(snapshot=True) as conn:
            return _series.metric_series(conn, _job_id(conn, project, number), name)

    def metric_summary(self, project: str, number: int) -> dict[str, dict]:
        """``name -> {"last", "last_step", "last_ts", "min", "max", "count"}``.

        ``min``/``max`` ignore NaN (``None`` if every value was NaN); ``last`` may be NaN.
        """
        with self._db.read(snapshot=True) as conn:
            return _series.metric_summary(conn, _job_id(conn, project, number))

    # -- events, system samples, log offset ------------------------------------------------------

    def add_event(self, project: str, number: int, kind: str, message: str, data: dict | None = None) -> None:
        """Append an event (``kind`` is a short word such as ``state``, ``agent``, ``output``)."""
        if not isinstance(kind, str) or not kind or not isinstance(message, str):
            raise TypeError("an event needs a non-empty str kind and a str message")
        with self._db.write() as conn:
            _series.insert_event(conn, _job_id(conn, project, number), time.time(), kind, message, data)

    def events(self, project: str, number: int, *, after: int = 0) -> list[dict]:
        """``[{"seq", "ts", "kind", "message", "data"}]`` oldest first; ``after`` resumes past a seq."""
        with self._db.read(snapshot=True) as conn:
            return _series.events(conn, _job_id(conn, project, number), after)

    def add_system_samples(self, project: str, number: int, samples: Iterable[dict]) -> None:
        """Append ``{"ts", "cpu_percent", "rss_bytes", "gpu_util", "gpu_mem_bytes"}`` samples."""
        with self._db.write() as conn:
            _series.insert_samples(conn, _job_id(conn, project, number), samples)

    def system_samples(self, project: str, number: int) -> list[dict]:
        """The job's system samples in the order they were added."""
        with self._db.read(snapshot=True) as conn:
            return _series.samples(conn, _job_id(conn, project, number))

    def set_log_offset(self, project: str, number: int, offset: int) -> None:
        """Remember where the log tailer got to, to resume there after a daemon restart."""
        _check_offset(offset)
        with self._db.write() as conn:
            _set_log_offset(conn, _job_id(conn, project, number), offset)

    def set_log_behind(self, project: str, number: int, behind: bool) -> None:
        """Mark (or clear) the job as ended with its log not yet recorded to the end (issue 20:
        its final state does not wait for that); :meth:`logs_behind` finds it after a restart."""
        with self._db.write() as conn:
            conn.execute("UPDATE jobs SET log_behind = ? WHERE id = ?", (int(behind), _job_id(conn, project, number)))

    def logs_behind(self) -> list[tuple[str, int]]:
        """``(project, number)`` of the ended jobs whose log is not recorded to the end yet."""
        states = sorted(FINAL_STATES)
        with self._db.read() as conn:
            rows = conn.execute("SELECT p.name, j.number FROM jobs j JOIN projects p ON p.id = j.project_id "
                                f"WHERE j.log_behind = 1 AND j.state IN ({', '.join('?' * len(states))}) "
                                "ORDER BY j.id", states).fetchall()
        return [(name, number) for name, number in rows]

    def metric_points(self, project: str, number: int) -> int:
        """How many metric points the job has recorded (from the per-metric counts)."""
        with self._db.read() as conn:
            (count,) = conn.execute("SELECT coalesce(sum(count), 0) FROM metric_stats WHERE job_id = ?",
                                    (_job_id(conn, project, number),)).fetchone()
        return int(count)

    def get_log_offset(self, project: str, number: int) -> int:
        """The offset last set (0 for a new job)."""
        with self._db.read() as conn:
            row = conn.execute("SELECT j.log_offset FROM jobs j JOIN projects p ON p.id = j.project_id "
                               "WHERE p.name = ? AND j.number = ?", (project, number)).fetchone()
        if row is None:
            raise _job_not_found(project, number)
        return row[0]

    # -- jobs from another site (floydd.exchange) ------------------------------------------------

    def insert_imported(self, project: str, number: int, fields: dict, *, state: str, reason: str = "",
                        events: Iterable[dict] = (), metrics: Iterable[list[tuple]] = (),
                        samples: Iterable[dict] = ()) -> None:
        """The record of a finished job brought from another site, with its events, metric
        points (batches of ``(name, value, step, ts)``) and system samples as they were there,
        in one transaction. A record already under that number (an import cut short before
        the cluster committed its job) is replaced; one of this node's history is not."""
        check_project(project)
        check_state(state)
        if state not in FINAL_STATES:
            raise Conflict(f"an imported job has ended; {state!r} is not a final state")
        values = encode_fields(fields)
        fresh: dict[str, int] = {}
        with self._db.write() as conn:
            project_id = _ensure_project(conn, project, fields.get("user", ""))
            row = conn.execute("SELECT id, attempt FROM jobs WHERE project_id = ? AND number = ?",
                               (project_id, number)).fetchone()
            if row is not None:
                if row[1] == 0:
                    raise Conflict(f"this node already has a job {project}/{number} of its own", code="job_exists")
                conn.execute("DELETE FROM jobs WHERE id = ?", (row[0],))
            conn.execute("UPDATE projects SET last_number = max(last_number, ?) WHERE id = ?", (number, project_id))
            values.update(project_id=project_id, number=number, state=state, reason=reason)
            cur = conn.execute(f"INSERT INTO jobs ({', '.join(map(_quote, values))}) "
                               f"VALUES ({', '.join('?' * len(values))})", tuple(values.values()))
            job_id = int(cur.lastrowid)  # type: ignore[arg-type]
            for e in events:
                _series.insert_event(conn, job_id, e["ts"], e["kind"], e["message"], e.get("data"))
            for batch in metrics:
                _series.insert_metrics(conn, job_id, batch, self._metric_names, fresh)
            _series.insert_samples(conn, job_id, samples)
        self._metric_names.update(fresh)
        log.records.info("imported job %s/%d", project, number)

    # -- leaving a cluster -----------------------------------------------------------------------

    def make_history(self) -> int:
        """Every job becomes this node's history (``attempt`` 0): the node is joining another
        cluster, which does not know them. How many jobs there are."""
        with self._db.write() as conn:
            return conn.execute("UPDATE jobs SET attempt = 0").rowcount

    def remap_trees(self, trees: dict[str, str]) -> int:
        """Rename the store trees jobs name (code snapshots, data mounts) after the store was
        re-sealed under another secret: ``{old hex: new hex}``. Idempotent; jobs changed."""
        changed = 0
        with self._db.write() as conn:
            for job_id, code_tree, data in conn.execute("SELECT id, code_tree, data FROM jobs").fetchall():
                mounts = json.loads(data) if data else []
                new_mounts = [{**m, "tree": trees.get(m.get("tree"), m.get("tree"))} for m in mounts]
                new_code = trees.get(code_tree, code_tree)
                if new_code != code_tree or new_mounts != mounts:
                    conn.execute("UPDATE jobs SET code_tree = ?, data = ? WHERE id = ?",
                                 (new_code, json.dumps(new_mounts, separators=(",", ":")), job_id))
                    changed += 1
        return changed


def _quote(column: str) -> str:
    return f'"{column}"'  # column names come from COLUMNS only, never from callers


def _ensure_project(conn: sqlite3.Connection, name: str, owner: str) -> int:
    row = conn.execute("SELECT id, owner FROM projects WHERE name = ?", (name,)).fetchone()
    if row is None:
        cur = conn.execute("INSERT INTO projects (name, owner, created) VALUES (?, ?, ?)",
                           (name, owner, time.time()))
        return int(cur.lastrowid)  # type: ignore[arg-type]
    if owner and not row[1]:
        conn.execute("UPDATE projects SET owner = ? WHERE id = ?", (owner, row[0]))
    return row[0]


def _job_id(conn: sqlite3.Connection, project: str, number: int) -> int:
    row = conn.execute("SELECT j.id FROM jobs j JOIN projects p ON p.id = j.project_id "
                       "WHERE p.name = ? AND j.number = ?", (project, number)).fetchone()
    if row is None:
        raise _job_not_found(project, number)
    return row[0]


def _job_not_found(project: str, number: int) -> NotFound:
    return NotFound(f"job {project}/{number} not found", hint="floyd status lists this project's jobs")


def _update(conn: sqlite3.Connection, job_id: int, values: dict[str, Any]) -> None:
    if values:
        conn.execute(f"UPDATE jobs SET {', '.join(f'{_quote(c)} = ?' for c in values)} WHERE id = ?",
                     (*values.values(), job_id))


def _check_offset(offset: object) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise TypeError(f"a log offset is an int >= 0, not {offset!r}")


def _set_log_offset(conn: sqlite3.Connection, job_id: int, offset: int) -> None:
    conn.execute("UPDATE jobs SET log_offset = ? WHERE id = ?", (offset, job_id))
