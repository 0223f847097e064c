"""Entries per second that one node's raft core plus its SQLite log can commit.

A single-voter cluster (its quorum is itself, so a commit costs exactly its own
fsync) runs the real driver loop: each cycle takes the proposals that arrived since
the last one, then one ready: one SQLite transaction (WAL, synchronous=FULL, one
fsync) holding the new entries and the commit index of the previous batch, then
advance. Baseline, same run: bare SQLite inserting the same rows in transactions
of the same size, same pragmas, no raft.

    python bench/raft_storage.py            # batches of 1, 10, 100; ~10 s
    python bench/raft_storage.py --smoke    # a couple of seconds
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from floydd.cluster.raft import ConfState, RaftNode, Role  # noqa: E402
from floydd.cluster.raft.sqlite_storage import SqliteStorage  # noqa: E402

PAYLOAD = b"x" * 200     # a job-state update is a few hundred bytes of msgpack


def raft_commits_per_second(path: Path, batch: int, seconds: float) -> tuple[float, int]:
    storage = SqliteStorage.bootstrap(path, ConfState(voters=frozenset({1})))
    node = RaftNode(1, rng=random.Random(0), state=storage.load())
    node.campaign()
    fsyncs = 0

    def cycle() -> int:
        nonlocal fsyncs
        rd = node.ready()
        storage.save(rd.hard_state, rd.entries, rd.snapshot)
        fsyncs += rd.must_sync
        node.advance()
        return sum(1 for e in rd.committed_entries if e.data)

    while node.role != Role.LEADER or node.has_ready():
        cycle()
    committed, fsyncs = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(batch):
            node.propose(PAYLOAD)
        committed += cycle()
    while node.has_ready():
        committed += cycle()
    elapsed = time.perf_counter() - t0
    storage.close()
    return committed / elapsed, fsyncs


def sqlite_rows_per_second(path: Path, batch: int, seconds: float) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (idx INTEGER PRIMARY KEY, data BLOB)")
    rows, idx = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(idx + i, PAYLOAD) for i in range(batch)])
        db.execute("COMMIT")
        idx += batch
        rows += batch
    elapsed = time.perf_counter() - t0
    db.close()
    return rows / elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--dir", type=Path, default=ROOT / ".bench",
                    help="where the databases go (a real disk: fsync must cost what it costs)")
    args = ap.parse_args(argv)
    seconds = 0.5 if args.smoke else args.seconds
    args.dir.mkdir(exist_ok=True)
    print(f"raft core + SQLite log (WAL, synchronous=FULL), 1 voter, {len(PAYLOAD)}-byte entries, "
          f"{seconds:g} s each")
    for batch in (1, 10, 100):
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            raft, fsyncs = raft_commits_per_second(Path(tmp) / "raft.db", batch, seconds)
            base = sqlite_rows_per_second(Path(tmp) / "base.db", batch, seconds)
        print(f"  batch {batch:>3}: {raft:>9,.0f} entries/s committed ({fsyncs} fsyncs); "
              f"bare SQLite {base:>9,.0f} rows/s; ratio {raft / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
