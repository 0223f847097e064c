"""The records schema, built by :class:`~floydd.records._migrations.Migrations` (the table
sqlite-utils kept, on plain sqlite3), and the connection pragmas.

Tables (one ``records.db`` per node)::

    projects      id, name UNIQUE, owner, created, last_number (numbers are never reused)
    jobs          id, project_id → projects, number, state, ... (see _jobs.COLUMNS), log_offset,
                  log_behind (1: ended, its log not yet recorded to the end)
                  UNIQUE (project_id, number)
    metric_names  id, name UNIQUE                 interned once; never deleted
    metrics       job_id → jobs CASCADE, name_id, step, value, ts
                  rowid order = insertion order; index (job_id, name_id)
    metric_stats  (job_id → jobs CASCADE, name_id) → count, lo, hi, last_row (a metrics rowid)
    events        id, job_id → jobs CASCADE, ts, kind, message, data (JSON)
    samples       job_id → jobs CASCADE, ts, cpu_percent, rss_bytes, gpu_util, gpu_mem_bytes

``metrics`` is the one big table (a job may print hundreds of thousands of points), so
its rows are five numbers: the job's integer rowid, an interned name id, step, value, ts.
A NaN value is stored as NULL (SQLite has no NaN) and read back as NaN; CHECK
constraints reject non-numeric values and fractional steps, so a bad batch fails whole.

Migrations are append-only: never edit one that has shipped, add the next instead.
All pending ones run in a single ``BEGIN IMMEDIATE`` transaction, so two processes
opening the same file cannot both apply them and a failing one leaves no trace.
"""

from __future__ import annotations

import sqlite3

from floydd import log
from floydd.errors import Conflict
from floydd.records._migrations import Migrations


__all__ = ["MIGRATIONS", "migrate", "configure", "SYNCHRONOUS", "BUSY_TIMEOUT_MS", "TABLES"]

SYNCHRONOUS = "NORMAL"
"""Records survive a crash of floydd or of a job; on power loss WAL + NORMAL may drop the
last transactions committed before the cut but never corrupts the file. What is lost can
be re-read: the log tailer resumes from the log offset, which is committed together with
(or after) the metrics it covers, so it is never ahead of them. FULL would fsync every
metric batch, for no record we could not rebuild."""

BUSY_TIMEOUT_MS = 5000
"""How long a connection waits on a lock held by *another process* (e.g. a ``sqlite3``
shell); inside floydd, writes queue on the writer lock and WAL readers never wait."""

JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
"""After a checkpoint the WAL file is truncated to this size, so one burst does not keep
a large file around."""

MIGRATIONS = Migrations("floydd.records")

TABLES = frozenset({"_sqlite_migrations", "projects", "jobs", "metric_names", "metrics", "events", "samples"})
"""The tables every records.db has had since its first migration (``floydd.daemon.integrity``
checks for them; later migrations add more)."""


@MIGRATIONS()
def m001_initial(db: sqlite3.Connection) -> None:
    for statement in _INITIAL:
        db.execute(statement)


_INITIAL = (
    """CREATE TABLE projects (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        owner TEXT NOT NULL DEFAULT '',
        created REAL NOT NULL,
        last_number INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        project_id INTEGER NOT NULL REFERENCES projects(id),
        number INTEGER NOT NULL,
        state TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        command TEXT NOT NULL DEFAULT '',
        params TEXT NOT NULL DEFAULT '{}',
        code_tree TEXT,
        data TEXT NOT NULL DEFAULT '[]',
        resources TEXT NOT NULL DEFAULT '{}',
        gpus TEXT NOT NULL DEFAULT '[]',
        env TEXT NOT NULL DEFAULT 'default',
        message TEXT NOT NULL DEFAULT '',
        mode TEXT NOT NULL DEFAULT 'job',
        max_runtime REAL,
        created REAL NOT NULL,
        started REAL,
        ended REAL,
        exit_code INTEGER,
        output_version TEXT,
        node TEXT NOT NULL DEFAULT '',
        workspace TEXT NOT NULL DEFAULT '',
        agent_pid INTEGER,
        "user" TEXT NOT NULL DEFAULT '',
        waiting_for TEXT NOT NULL DEFAULT '',
        latest TEXT,
        log_offset INTEGER NOT NULL DEFAULT 0,
        UNIQUE (project_id, number)
    )""",
    "CREATE INDEX jobs_state ON jobs(state)",
    """CREATE TABLE metric_names (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE
    )""",
    """CREATE TABLE metrics (
        job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        name_id INTEGER NOT NULL,
        step INTEGER CHECK (step IS NULL OR typeof(step) = 'integer'),
        value REAL CHECK (value IS NULL OR typeof(value) IN ('real', 'integer')),
        ts REAL NOT NULL CHECK (typeof(ts) IN ('real', 'integer'))
    )""",
    "CREATE INDEX metrics_job_name ON metrics(job_id, name_id)",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        ts REAL NOT NULL,
        kind TEXT NOT NULL,
        message TEXT NOT NULL,
        data TEXT
    )""",
    "CREATE INDEX events_job ON events(job_id)",
    """CREATE TABLE samples (
        job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        ts REAL NOT NULL,
        cpu_percent REAL,
        rss_bytes INTEGER,
        gpu_util REAL,
        gpu_mem_bytes INTEGER
    )""",
    "CREATE INDEX samples_job ON samples(job_id)",
)


@MIGRATIONS()
def m002_metric_stats(db: sqlite3.Connection) -> None:
    """Per (job, metric) count/min/max/last kept up to date by ``add_metrics``, so a summary
    costs O(metric names) instead of a scan of every point (job lists show summaries)."""
    db.execute("""CREATE TABLE metric_stats (
        job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        name_id INTEGER NOT NULL,
        count INTEGER NOT NULL,
        lo REAL,
        hi REAL,
        last_row INTEGER NOT NULL,
        PRIMARY KEY (job_id, name_id)
    ) WITHOUT ROWID""")
    db.execute("INSERT INTO metric_stats (job_id, name_id, count, lo, hi, last_row) "
               "SELECT job_id, name_id, count(*), min(value), max(value), max(rowid) FROM metrics "
               "GROUP BY job_id, name_id")


@MIGRATIONS()
def m003_cluster_attempt(db: sqlite3.Connection) -> None:
    """Which placement of a cluster job this record is (the cluster's ``attempts`` count when it
    was placed here); 0 for this node's history: jobs it ran before it joined its cluster (or
    before a box alone had a control plane), which that cluster does not know."""
    db.execute("ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0")


@MIGRATIONS()
def m004_log_behind(db: sqlite3.Connection) -> None:
    """Whether an ended job's log still holds lines not recorded (issue 20): its final state is
    set as soon as its process ended, and the rest of its log is recorded behind it; a daemon
    restarted meanwhile picks that up again from the log offset."""
    db.execute("ALTER TABLE jobs ADD COLUMN log_behind INTEGER NOT NULL DEFAULT 0")


def configure(conn: sqlite3.Connection, *, writer: bool) -> None:
    """Set the per-connection pragmas; the writer also makes the file WAL (persistent)."""
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if writer:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise Conflict(f"could not switch the records database to WAL (it stays {mode!r})",
                           hint="keep the state dir on a local filesystem, not NFS")
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
    else:
        conn.execute("PRAGMA query_only = ON")  # readers also open the file read-only
    conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
    conn.execute("PRAGMA foreign_keys = ON")


def migrate(conn: sqlite3.Connection, migrations: Migrations = MIGRATIONS) -> list[str]:
    """Apply every pending migration in one ``BEGIN IMMEDIATE``; return their names.

    ``conn`` must be in autocommit mode (``isolation_level=None``) with no open transaction.
    Refuses a file written by a newer floydd (a migration this code does not know).
    """
    known = set(migrations.names())
    conn.execute("BEGIN IMMEDIATE")
    try:
        unknown = [name for name in migrations.applied(conn) if name not in known]
        if unknown:
            raise Conflict(f"the records database has migration {unknown[0]!r}, unknown to this "
                           "floydd: it was written by a newer version",
                           hint="upgrade floydd on this node (or move records.db aside)")
        pending = migrations.pending(conn)
        migrations.apply(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    if pending:
        log.records.info("records schema migrated: %s", ", ".join(pending))
    return pending
