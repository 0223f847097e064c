"""``floydd repair``: rebuild what can be rebuilt of a state the daemon refused, and say what not.

Run with the daemon stopped (it takes the state lock). Each file :mod:`~floydd.daemon.integrity`
does not trust is renamed ``NAME.damaged-WHEN`` (with its ``-wal``/``-shm``; never deleted,
so a backup restore or a better tool can still use it) and a new one is made from what is
left, in this order:

``records.db``
    a new, empty records file; every row still readable in the damaged one is copied in
    (projects, jobs, metric names, metrics, events, system samples: the rows on pages that can
    no longer be reached are lost), per-metric summaries are recomputed, rows whose job or
    project is gone are dropped, and project counters are set past every job number kept, so
    no number is used twice. Jobs the cluster placed here that it has no record of any more are
    listed: the cluster runs them again if they had not ended.
``catalog.db``
    rebuilt from the cluster's catalog (versions this node holds, under their numbers), the
    rows still readable in the damaged file, the job records (code pins), and the trees in the
    store: a tree nothing names becomes a ``lost-found:N`` version rather than garbage
    (:mod:`floydd.store.care.rebuild`). A missing store ``key`` cannot be rebuilt: only a backup has it.
``cluster/raft.db``
    on a box alone (no ``cluster.json``, or a cluster whose only member is this node): a new
    one-voter log whose first snapshot is the state salvaged from the damaged log (its snapshot
    and every entry that still decodes, as ``floydd recover`` replays), completed with this
    box's datasets under their own numbers and project counters past every job number in its
    records; jobs its records name that the new state lacks become this box's history (listed,
    never run again). On a member of a cluster of several boxes a log cannot be rebuilt alone
    (its votes and the others' entries are not here): repair says how to leave and join again.

``dry_run`` does all the reading and reports what would be done, changing nothing.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from floydd.cluster.state import commands
from floydd.cluster.raft import ConfState, EntryKind, HardState, Snapshot
from floydd.cluster.raft.sqlite_storage import SqliteStorage
from floydd.cluster.recover import read_state
from floydd.cluster.state.machine import ClusterState
from floydd.config import Config
from floydd.daemon.integrity import IMPORTED_MARKER, Finding, findings, raft_path
from floydd.errors import FloyddError
from floydd.model import ACTIVE_STATES
from floydd.records import Records
from floydd.store.catalog import DatasetVersion
from floydd.store.dbfile import copy_rows, readable, salvage, set_aside
from floydd.store.ids import ObjectId
from floydd.store.care.rebuild import rebuild_catalog

__all__ = ["RepairReport", "repair"]

_RECORD_TABLES = ("projects", "jobs", "metric_names", "metrics", "events", "samples")
_NODE_ID = Path("tls") / "node-id"


@dataclass(slots=True, kw_only=True)
class RepairReport:
    found: list[Finding]
    done: list[str] = field(default_factory=list)       # what was (or, dry, would be) done
    lost: list[str] = field(default_factory=list)       # what could not be recovered
    left: list[Finding] = field(default_factory=list)   # still untrusted afterwards
    dry_run: bool = False

    def say(self, line: str) -> None:
        self.done.append(line)


def repair(config: Config, *, dry_run: bool = False) -> RepairReport:
    """Repair the state of ``config`` (the daemon must be stopped: the caller holds its lock)."""
    found = findings(config, deep=True)
    report = RepairReport(found=found, dry_run=dry_run)
    bad = {f.path for f in found}
    suffix = f"damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    if config.store_dir / "key" in bad:
        report.lost.append(f"{config.store_dir / 'key'}: the store key cannot be rebuilt; put it back from your "
                           "backup (nothing else was changed)")
        report.left = found
        return report
    raft = raft_path(config)
    salvaged, state = None, None
    if raft in bad or not (config.state_dir / "cluster.json").exists():     # damaged, or a box alone
        salvaged = _salvage_state(raft)
        state = salvaged.state if salvaged is not None else None
    else:
        state = _trusted_state(raft)
    node_id = _node_id(config)
    if config.records_path in bad:
        _repair_records(config, report, suffix)
        if state is not None and raft not in bad:
            _unrecorded_jobs(config, report, state, node_id)
    if config.store_dir / "catalog.db" in bad:
        _repair_catalog(config, report, state, node_id, suffix)
    if raft in bad:
        _repair_raft(config, report, salvaged or _Salvaged(), node_id, suffix)
    if not dry_run:
        report.left = findings(config)
    return report


# -- records.db -----------------------------------------------------------------------------------

def _repair_records(config: Config, report: RepairReport, suffix: str) -> None:
    path = config.records_path
    if report.dry_run:
        with readable(path) as src:
            counts = {t: sum(1 for _ in salvage(src, t, "1")) for t in _RECORD_TABLES}
        report.say(f"{path}: would be set aside as {path.name}.{suffix} and a new one made with the rows still "
                   f"readable: {_counts(counts)}")
        return
    set_aside(path, suffix)
    aside = path.with_name(f"{path.name}.{suffix}")
    Records(path).close()                       # a new file, every migration applied
    copied: dict[str, int] = {}
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        with readable(aside) as src:
            for table in _RECORD_TABLES:
                copied[table] = copy_rows(src, db, table)[0]
        dropped = _tidy_records(db)
        db.execute("COMMIT")
    finally:
        db.close()
    note = f" (the damaged file is {aside.name})" if aside.exists() else ""
    report.say(f"{path}: made anew{note}; rows salvaged: {_counts(copied)}")
    if dropped:
        report.lost.append(f"{path}: {dropped} row(s) whose job or project was not salvaged were dropped")
    if not copied.get("jobs"):
        report.lost.append(f"{path}: no job record could be read back; this box's job history starts empty")


def _unrecorded_jobs(config: Config, report: RepairReport, state: ClusterState, node_id: str) -> None:
    """Say which jobs the cluster has placed here and not seen end, whose records were lost."""
    kept = {key for key, _ in _record_jobs(config)}
    lost = sorted(key for key, job in state.jobs.items()
                  if key not in kept and job.state in ACTIVE_STATES and job.part_on(node_id) is not None)
    if lost:
        report.lost.append(f"{config.records_path}: the record of {len(lost)} job(s) placed here that had not "
                           f"ended is gone; the cluster starts them again: {', '.join(lost[:10])}")


def _tidy_records(db: sqlite3.Connection) -> int:
    """Drop rows whose parent was lost, recompute the metric summaries, and move project
    counters past every job number kept; how many rows were dropped."""
    dropped = db.execute("DELETE FROM jobs WHERE project_id NOT IN (SELECT id FROM projects)").rowcount
    for table in ("metrics", "events", "samples"):
        dropped += db.execute(f"DELETE FROM {table} WHERE job_id NOT IN (SELECT id FROM jobs)").rowcount
    db.execute("DELETE FROM metric_stats")
    db.execute("INSERT INTO metric_stats (job_id, name_id, count, lo, hi, last_row) "
               "SELECT job_id, name_id, count(*), min(value), max(value), max(rowid) FROM metrics "
               "GROUP BY job_id, name_id")
    db.execute("UPDATE projects SET last_number = max(last_number, "
               "coalesce((SELECT max(number) FROM jobs WHERE jobs.project_id = projects.id), 0))")
    return dropped


# -- catalog.db -----------------------------------------------------------------------------------

def _repair_catalog(config: Config, report: RepairReport, state: ClusterState | None, node_id: str,
                    suffix: str) -> None:
    versions, pins = [], []
    if state is not None:
        for dataset in state.datasets.values():
            versions += [_version(v) for v in dataset["versions"].values() if node_id in v.get("holders", ())]
        pins += [(f"job:{key}", job.code_tree) for key, job in state.jobs.items()]
    pins += [(f"job:{key}", code_tree) for key, code_tree in _record_jobs(config)]
    pins = [(holder, ObjectId.from_hex(tree)) for holder, tree in pins if _is_tree(tree)]

    def deleted(name: str, number: int) -> bool:      # numbered by the cluster, and gone from it since
        dataset = state.datasets.get(name) if state is not None else None
        return dataset is not None and number < dataset["next"] and str(number) not in dataset["versions"]
    store = config.store_dir
    rebuilt = rebuild_catalog(store, versions=versions, pins=pins, deleted=deleted, suffix=suffix,
                              dry_run=report.dry_run)
    verb = "would be rebuilt" if report.dry_run else "rebuilt"
    aside = f" (the damaged file is {rebuilt.set_aside[0].name})" if rebuilt.set_aside else ""
    report.say(f"{store / 'catalog.db'}: {verb} from {rebuilt.objects} objects ({rebuilt.trees} trees){aside}: "
               f"{len(rebuilt.versions)} version(s) put back, {len(rebuilt.pins)} pin(s)")
    for found in rebuilt.found:
        report.say(f"  a tree no catalog named, kept as {found}: look at it with `floyd data info`, "
                   "delete it when it is not needed")
    report.lost += [f"{store / 'catalog.db'}: {lost}" for lost in rebuilt.lost]
    if rebuilt.damaged:
        report.lost.append(f"{store}: {rebuilt.damaged} object(s) do not open (damaged): run `floyd data verify` "
                           "once floydd runs to see what they affect")
    marker = raft_path(config).parent / IMPORTED_MARKER
    if rebuilt.found and marker.exists() and not report.dry_run:   # the next start enters them into the
        os.replace(marker, marker.with_name(f"{IMPORTED_MARKER}.{suffix}"))  # cluster's catalog (import_local)


def _version(v: dict) -> DatasetVersion:
    return DatasetVersion(name=v["name"], version=int(v["version"]), tree=ObjectId.from_hex(v["tree"]),
                          created=float(v.get("created") or time.time()), size=int(v.get("size") or 0),
                          files=int(v.get("files") or 0), message=str(v.get("message") or ""))


# -- raft.db --------------------------------------------------------------------------------------

@dataclass(slots=True)
class _Salvaged:
    state: ClusterState | None = None
    index: int = 1          # the last entry salvaged (the new log starts past it)
    term: int = 1           # the highest term seen (the new log's terms are above it)


def _repair_raft(config: Config, report: RepairReport, salvaged: _Salvaged, node_id: str, suffix: str) -> None:
    path = raft_path(config)
    state = salvaged.state
    others = sorted(n for n in (state.nodes if state is not None else {}) if n != node_id)
    member = (config.state_dir / "cluster.json").exists()
    if member and (state is None or others):
        report.lost.append(
            f"{path}: this box is a member of a cluster of several boxes; its log cannot be rebuilt here (its votes "
            "and the others' entries are not on this box). Restore it from a backup, or join again: move "
            f"{config.state_dir / 'cluster.json'} and {path.parent} aside, run `floydd repair` again, then "
            "`floydd join TOKEN` with a token made on another member (`floydd token create`)")
        return
    state = state or ClusterState()
    kept_jobs = len(state.jobs)
    added = _add_local_datasets(config, state, node_id)
    counters = _records_counters(config)
    for project, number in counters.items():
        state.counters[project] = max(state.counters.get(project, 0), number)
    history = [k for k in _cluster_jobs_in_records(config) if k not in state.jobs]
    if report.dry_run:
        report.say(f"{path}: would be set aside and a new one-voter log made for node {node_id}: {kept_jobs} job(s) "
                   f"and {_n_versions(state)} dataset version(s) salvaged or re-entered ({added} from this box's "
                   f"catalog); {len(history)} job(s) of its records would become its history")
        return
    moved = set_aside(path, suffix)
    _write_log(path, state, node_id, salvaged.index, salvaged.term)
    if history:
        _make_history(config.records_path, history)
    marker = path.parent / IMPORTED_MARKER
    marker.write_text("local datasets entered into the cluster catalog by floydd repair\n")
    aside = f" (the damaged file is {moved[0].name})" if moved else ""
    report.say(f"{path}: a new one-voter log for node {node_id}{aside}: {kept_jobs} job(s) salvaged, "
               f"{_n_versions(state)} dataset version(s) ({added} re-entered from this box's catalog), "
               f"project counters past every job number ({len(counters)} projects)")
    if history:
        report.lost.append(f"{path}: {len(history)} job(s) of this box's records are unknown to the rebuilt log "
                           f"and were made its history (listed, never run again): {', '.join(history[:10])}")


def _salvage_state(path: Path) -> _Salvaged | None:
    """The state a (damaged) log still holds: its snapshot and the entries after it that decode
    (committed or not, as ``floydd recover`` replays: on a box alone every entry in its log is
    committed at its next start, though the commit index on disk may lag), up to the first gap;
    None if nothing."""
    if not path.exists():
        return None
    with readable(path) as src:
        return _replay(src)


def _replay(path: Path) -> _Salvaged | None:
    out = _Salvaged(state=ClusterState(), index=0)
    snapshots = list(salvage(path, "raft_snapshot", "idx, term, data"))
    if snapshots:
        try:
            out.state.restore(bytes(snapshots[0][2]))
            out.index, out.term = snapshots[0][0], max(1, snapshots[0][1])
        except Exception:  # noqa: BLE001 - a snapshot that does not decode is simply not used
            return None
    applied = 0
    for idx, term, kind, data in salvage(path, "raft_log", "idx, term, kind, data"):
        if idx <= out.index:
            continue
        if idx != out.index + 1:
            break
        out.index, out.term = idx, max(out.term, term)
        if kind != int(EntryKind.NORMAL) or not data:
            continue
        try:
            out.state.apply(commands.decode(bytes(data)), index=idx, term=term)
            applied += 1
        except Exception:  # noqa: BLE001 - refused then, refused now; or damaged: skipped
            continue
    for (term,) in salvage(path, "raft_hard_state", "term"):
        out.term = max(out.term, term if type(term) is int else 0)
    return out if snapshots or applied else None


def _trusted_state(path: Path) -> ClusterState | None:
    """The committed state of a member's log (entries past its commit index may yet be undone)."""
    try:
        return read_state(path) if path.exists() else None
    except FloyddError:
        return None


def _add_local_datasets(config: Config, state: ClusterState, node_id: str) -> int:
    """Enter this box's catalog versions that the state lacks, under their own numbers (not
    those the cluster numbered and deleted since); how many."""
    added = 0
    rows = salvage(config.store_dir / "catalog.db", "versions", "name, version, tree, created, size, files, message")
    for name, number, tree, created, size, files, message in rows:
        dataset = state.datasets.setdefault(name, {"next": 1, "versions": {}})
        if str(number) in dataset["versions"] or number < dataset["next"]:
            continue                    # the cluster's own, or numbered by it and deleted since
        dataset["versions"][str(number)] = {
            "name": name, "version": number, "ref": f"{name}:{number}", "tree": tree, "created": created,
            "size": size, "files": files, "message": message, "holders": [node_id], "idem_key": None}
        dataset["next"] = max(dataset["next"], number + 1)
        added += 1
    return added


def _write_log(path: Path, state: ClusterState, node_id: str, index: int, term: int) -> None:
    """A log whose first snapshot is ``state`` with this node as its only voter, past the
    salvaged ``index`` and ``term`` (fences and replays never see them go back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    storage = SqliteStorage(path)
    try:
        snap = Snapshot(index=max(1, index), term=max(1, term), conf=ConfState(voters=frozenset({node_id})),
                        data=state.snapshot())
        storage.save(HardState(term=max(1, term) + 1, vote=None, commit=max(1, index)), (), snap)
    finally:
        storage.close()


# -- this box's records and identity ---------------------------------------------------------------

def _record_jobs(config: Config) -> list[tuple[str, str | None]]:
    """``(project/number, code tree)`` of every job the damaged records still name."""
    rows = salvage(config.records_path, "jobs", "(SELECT name FROM projects WHERE id = project_id), number, code_tree")
    return [(f"{p}/{n}", t) for p, n, t in rows if p is not None]


def _records_counters(config: Config) -> dict[str, int]:
    return {name: number for name, number in salvage(config.records_path, "projects", "name, last_number")
            if isinstance(name, str) and type(number) is int}


def _cluster_jobs_in_records(config: Config) -> list[str]:
    rows = salvage(config.records_path, "jobs", "(SELECT name FROM projects WHERE id = project_id), number, attempt")
    return [f"{p}/{n}" for p, n, attempt in rows if p is not None and attempt]


def _make_history(records: Path, keys: list[str]) -> None:
    db = sqlite3.connect(records, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        for key in keys:
            project, _, number = key.rpartition("/")
            db.execute("UPDATE jobs SET attempt = 0 WHERE number = ? AND project_id = "
                       "(SELECT id FROM projects WHERE name = ?)", (int(number), project))
        db.execute("COMMIT")
    finally:
        db.close()


def _node_id(config: Config) -> str:
    try:
        return (config.state_dir / _NODE_ID).read_text().strip()
    except FileNotFoundError:
        from floydd.security.identity import NodeIdentity
        return NodeIdentity.load_or_create(config.state_dir / "tls").node_id


# -- helpers --------------------------------------------------------------------------------------

def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {table}" for table, n in counts.items()) or "none"


def _n_versions(state: ClusterState) -> int:
    return sum(len(d["versions"]) for d in state.datasets.values())


def _is_tree(tree: object) -> bool:
    try:
        ObjectId.from_hex(tree)  # type: ignore[arg-type]
        return True
    except FloyddError:
        return False

