"""``floydd recover``: restart a survivor as a new single-node cluster, loudly.

For when quorum is lost for good (the other voters are gone). The survivor's state is
rebuilt from its snapshot and *every* entry in its log, committed or not (like etcd's
``--force-new-cluster``: an entry this node holds may have been committed by a majority
that is gone, and the commands are idempotent), then written back as a snapshot whose
membership is this node alone; the log after it is empty. Every other node is removed
from the state (tombstoned: its certificate is refused until it joins again with a new
token), so an old member coming back cannot split the history. Run it with the daemon
stopped; the next start leads at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from floydd import log
from floydd.cluster.state import commands
from floydd.cluster.tables.archive_db import SqliteArchive
from floydd.cluster.raft import ConfState, EntryKind, HardState, Snapshot
from floydd.cluster.raft.sqlite_storage import SqliteStorage
from floydd.cluster.state.machine import ClusterState
from floydd.errors import FloyddError, NotFound

__all__ = ["RecoverReport", "recover", "read_state"]

_log = log.cluster.getChild("recover")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoverReport:
    node_id: str
    index: int                 # the new snapshot's index: everything up to here is kept
    term: int                  # the term the new cluster starts from
    uncommitted: int           # entries kept that this node did not know to be committed
    removed: tuple[str, ...]   # nodes dropped from the cluster
    jobs: int


def recover(path: str | Path, node_id: str, *, now: float) -> RecoverReport:
    """Rewrite the raft log at ``path`` as a one-voter cluster of ``node_id``."""
    path = Path(path)
    if not path.exists():
        raise NotFound(f"no raft log at {path}", hint="recover runs on a node that was a cluster member")
    storage = SqliteStorage(path)
    archive = SqliteArchive(path)       # the jobs the replayed entries archive go where the others are
    try:
        durable = storage.load()
        state, uncommitted = _replay(durable, committed_only=False, archive=archive)
        archive.flush_now()
        last_index, last_term = durable.snapshot.index, durable.snapshot.term
        if durable.entries:
            last_index, last_term = durable.entries[-1].index, durable.entries[-1].term
        removed = tuple(sorted(n for n in state.nodes if n != node_id))
        for other in removed:
            state.apply({"op": "node.remove", "id": other, "ts": now}, index=last_index, term=last_term)
        term = max(durable.hard_state.term, last_term) + 1
        snap = Snapshot(index=last_index, term=last_term, conf=ConfState(voters=frozenset({node_id})),
                        data=state.snapshot())
        storage.save(HardState(term=term, vote=None, commit=last_index), (), snap)
    finally:
        storage.close()
        archive.close()
    report = RecoverReport(node_id=node_id, index=last_index, term=term, uncommitted=uncommitted,
                           removed=removed, jobs=len(state.jobs))
    _log.warning("[%s] RECOVER: this node is now a NEW single-node cluster. Kept %d log entries "
                 "(%d not known to be committed), %d jobs; removed nodes %s. They must join again "
                 "with a new token; never restart them with their old state.", node_id, last_index,
                 uncommitted, report.jobs, ", ".join(removed) or "none")
    return report


def read_state(path: str | Path) -> ClusterState:
    """The state a stopped node's log holds (its snapshot and committed entries), read offline;
    an empty state when there is no log."""
    path = Path(path)
    if not path.exists():
        return ClusterState()
    storage = SqliteStorage(path)
    try:
        return _replay(storage.load(), committed_only=True)[0]
    finally:
        storage.close()


def _replay(durable, *, committed_only: bool, archive: SqliteArchive | None = None) -> tuple[ClusterState, int]:
    """The snapshot's state with the log's entries applied; and how many applied entries this
    node did not know to be committed. Jobs the entries archive go to ``archive`` (default: in
    memory, for a look at the hot state)."""
    state = ClusterState(archive)
    state.restore(durable.snapshot.data)
    uncommitted = 0
    for e in durable.entries:
        if e.kind != EntryKind.NORMAL or not e.data:
            continue
        if e.index > durable.hard_state.commit:
            if committed_only:
                break
            uncommitted += 1
        try:
            state.apply(commands.decode(e.data), index=e.index, term=e.term)
        except FloyddError:
            pass        # refused then, refused now: the same on every node
    return state, uncommitted
