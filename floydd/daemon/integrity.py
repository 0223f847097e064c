"""Start-up checks: the daemon refuses a state it cannot trust, rather than read it as "no data".

Three files hold what a box cannot make again: the dataset catalog ``STORE/catalog.db``,
this node's job records ``STATE/records.db`` and the control plane's log
``STATE/cluster/raft.db``. SQLite would open an empty, truncated or replaced file as a new,
empty database, and floydd would carry on as if nothing had ever been there: gc would then
call every object garbage, job numbers would start again at 1 over the old ones, the cluster
would forget its jobs and datasets. :func:`check_state` runs before any of them is opened and
raises :class:`~floydd.errors.Untrusted` naming each file, what is wrong with it and what
to do (restore it from a backup, or ``floydd repair``: :mod:`floydd.daemon.repair`). The
offline tools that open them with the daemon stopped (``floydd join``, ``floydd recover``) run
the same check first.

A fresh box legitimately has none of these files. A file "cannot be trusted" when:

every one of the three
    it is 0 bytes; it is not an SQLite database or is truncated; ``PRAGMA quick_check``
    fails; it has some of its tables but not all; its write-ahead log was lost while
    committed transactions were still only in it (the WAL index ``-shm`` says so: see
    :mod:`floydd.store.dbfile` for what can and cannot be seen of a deleted WAL).
``catalog.db`` (:mod:`floydd.store.care.untrusted`)
    it is missing or has no tables while ``objects/`` holds objects; it holds rows floydd
    never writes (tree ids that are not hex). Also the store's ``key`` missing while objects
    exist: a new key would be made and nothing stored would open again.
``records.db``
    it is missing or has no tables while ``STATE/jobs/`` holds job folders (the records of
    jobs that ran here are gone).
``raft.db``
    its rows do not decode (hard state, snapshot, membership, commands), its log has a gap
    after the snapshot, terms go down, or the commit index is past the last entry; or it is
    missing, has no tables or holds nothing while there is evidence that it held a cluster:
    ``records.db`` names jobs this box ran for its cluster (``attempt > 0``), or the cluster
    folder still has the marker written once the box's datasets entered the cluster catalog.

Cost: ``quick_check`` reads every page of each file; measured on a 170 MB records.db of 4M
metric points, warm cache: 0.8 s (``integrity_check``, which ``floydd repair`` runs, 2.7 s).

What cannot be seen: a file replaced by an older healthy copy of itself, and a WAL deleted
together with its ``-shm`` (or after any SQLite connection opened the file since the crash).
The cluster catalog (in raft.db) names every version a box holds, so the daemon re-mirrors
versions a lagging catalog lost, and gc keeps their trees (:mod:`floydd.cluster.replication.storecare`).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from floydd.cluster.state import commands
from floydd.cluster.raft.sqlite_storage import TABLES as RAFT_TABLES, inspect_log
from floydd.cluster.state.machine import ClusterState
from floydd.config import Config
from floydd.records._schema import TABLES as RECORDS_TABLES
from floydd.store.care import untrusted as trust
from floydd.errors import Untrusted
from floydd.store.dbfile import inspect

__all__ = ["Finding", "findings", "check_state", "raft_path", "IMPORTED_MARKER"]

IMPORTED_MARKER = "imported-datasets"
"""In ``STATE/cluster/``: written once this box's datasets entered its cluster's catalog."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    path: Path
    problem: str

    def __str__(self) -> str:
        return f"{self.path} {self.problem}"


def raft_path(config: Config) -> Path:
    return config.state_dir / "cluster" / "raft.db"


def findings(config: Config, *, deep: bool = False) -> list[Finding]:
    """Every file of ``config``'s state that cannot be trusted (nothing is changed).
    ``deep`` runs ``integrity_check`` instead of ``quick_check`` (``floydd repair``)."""
    found = [Finding(path=path, problem=problem) for path, problem in trust.store_problems(config.store_dir,
                                                                                          deep=deep)]
    records = _records_problem(config, deep)
    if records:
        found.append(Finding(path=config.records_path, problem=records))
    raft = _raft_problem(config, deep, records_ok=not records)
    if raft:
        found.append(Finding(path=raft_path(config), problem=raft))
    return found


def check_state(config: Config, *, doing: str = "start") -> None:
    """Raise :class:`Untrusted` naming every file that cannot be trusted; the daemon's first
    step, and the offline tools' (``floydd join``, ``floydd recover``: ``doing``), which would
    otherwise open a 0-byte or damaged database as a new, empty one."""
    found = findings(config)
    if not found:
        return
    command = f"floydd repair --state-dir {config.state_dir}"
    raise Untrusted(f"floydd will not {doing}: {'; '.join(map(str, found))} (never taken as \"no data\")",
                    hint=f"stop here and restore {'these files' if len(found) > 1 else 'that file'} from a "
                         f"backup, or run `{command}` to rebuild what it can (add --dry-run to see what it "
                         "would do first)")


# -- the files ------------------------------------------------------------------------------

def _records_problem(config: Config, deep: bool) -> str:
    found = inspect(config.records_path, RECORDS_TABLES, deep=deep)
    if found.problem:
        return found.problem
    if found.blank:
        folders = _job_folders(config.jobs_dir)
        if folders:
            what = "is missing" if not found.exists else "has no tables"
            return f"{what}, but {config.jobs_dir} holds {folders} job folder(s): the records of those jobs are gone"
    return ""


def _raft_problem(config: Config, deep: bool, *, records_ok: bool) -> str:
    path = raft_path(config)
    found = inspect(path, RAFT_TABLES, deep=deep)
    if found.problem:
        return found.problem
    if not found.blank:
        checked = inspect_log(path, decode=commands.decode, restore=ClusterState().restore)
        if checked.problem:
            return checked.problem
        if not checked.blank:
            return ""
    evidence = _cluster_evidence(config, records_ok)
    if evidence:
        what = "is missing" if not found.exists else "has no tables" if found.blank else "holds no log"
        return f"{what}, but {evidence}: the cluster's jobs and dataset catalog were in it"
    return ""


def _cluster_evidence(config: Config, records_ok: bool) -> str:
    """Why this box is known to have had a control-plane log ("" if it may be new)."""
    marker = raft_path(config).parent / IMPORTED_MARKER
    if marker.exists():
        return f"{marker} says this box's datasets were entered into it"
    if records_ok and config.records_path.exists():
        try:
            db = sqlite3.connect(config.records_path.absolute().as_uri() + "?mode=ro", uri=True)
            try:
                ran = db.execute("SELECT count(*) FROM jobs WHERE attempt > 0").fetchone()[0]
            finally:
                db.close()
        except sqlite3.DatabaseError:     # before migration m003 there is no attempt: no cluster jobs
            ran = 0
        if ran:
            return f"{config.records_path} names {ran} job(s) this box ran for its cluster"
    return ""


def _job_folders(jobs_dir: Path) -> int:
    """How many ``jobs/PROJECT/N`` folders there are."""
    try:
        projects = [p for p in os.scandir(jobs_dir) if p.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return 0
    return sum(1 for p in projects for n in os.scandir(p.path) if n.is_dir(follow_symlinks=False)
               and n.name.isdigit())
