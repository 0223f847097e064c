"""How fast a job's metric lines land in the records, against same-run SQLite baselines.

    python bench/records_metrics.py [--smoke] [--points N]

Inserts N points (default 200,000: a job printing 200k metric lines; --smoke: 20,000)
with ``Records.add_metrics`` in batches of 1,000 and 10,000, and the same points
  * with raw ``sqlite3`` ``executemany`` into a bare 4-column table, same batches and
    pragmas (the floor: what SQLite itself costs), and
  * one point per transaction, raw and through ``add_metrics`` (what a tailer that does not
    batch would get; timed on the first 5,000 points).
Then reads every point back and checks it is all there. Exits 1 if a point is missing,
or (full run only) if ``add_metrics`` stays under the 50,000 points/s target.
For reference, the issue quotes MLflow on SQLite at ~4,600 points/s in batches of 1,000.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from floydd.records import Records

TARGET = 50_000
NAMES = ("loss", "accuracy", "val_loss", "lr")


def make_points(n: int) -> list[tuple[str, float, int, float]]:
    t0 = 1.7e9
    return [(NAMES[i % 4], 1.0 / (1 + i), i // 4, t0 + i * 0.001) for i in range(n)]


def bench_records(folder: Path, points: list, batch: int) -> tuple[float, bool, dict]:
    with Records(folder / f"records-{batch}.db") as records:
        n = records.allocate_job("bench", {"command": "python train.py"})
        start = time.perf_counter()
        for i in range(0, len(points), batch):
            records.add_metrics("bench", n, points[i:i + batch])
        elapsed = time.perf_counter() - start

        start = time.perf_counter()
        series = records.metric_series("bench", n)
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        summary = records.metric_summary("bench", n)
        summary_s = time.perf_counter() - start
    expected: dict[str, list] = {}
    for name, value, step, ts in points:
        expected.setdefault(name, []).append((step, value, ts))
    ok = series == expected and all(summary[k]["count"] == len(v) for k, v in expected.items())
    return elapsed, ok, {"read_all_s": read_s, "summary_s": summary_s}


def bench_raw(folder: Path, points: list, batch: int) -> float:
    conn = sqlite3.connect(folder / f"raw-{batch}.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE m (name TEXT, value REAL, step INTEGER, ts REAL)")
    start = time.perf_counter()
    for i in range(0, len(points), batch):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO m VALUES (?, ?, ?, ?)", points[i:i + batch])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    assert conn.execute("SELECT count(*) FROM m").fetchone()[0] == len(points)
    conn.close()
    return elapsed


def bench_one_at_a_time(folder: Path, points: list) -> float:
    conn = sqlite3.connect(folder / "single.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE m (name TEXT, value REAL, step INTEGER, ts REAL)")
    start = time.perf_counter()
    for point in points:
        conn.execute("INSERT INTO m VALUES (?, ?, ?, ?)", point)  # autocommit: one transaction each
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def bench_records_one_at_a_time(folder: Path, points: list) -> float:
    with Records(folder / "records-single.db") as records:
        n = records.allocate_job("bench", {})
        start = time.perf_counter()
        for point in points:
            records.add_metrics("bench", n, [point])
        elapsed = time.perf_counter() - start
        assert sum(s["count"] for s in records.metric_summary("bench", n).values()) == len(points)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="20,000 points, no target check")
    parser.add_argument("--points", type=int, default=None)
    args = parser.parse_args(argv)
    n = args.points or (20_000 if args.smoke else 200_000)
    points = make_points(n)
    single = points[: min(n, 5_000)]
    failed = False
    with tempfile.TemporaryDirectory(prefix="floydd-bench-") as tmp:
        folder = Path(tmp)
        single_rate = len(single) / bench_one_at_a_time(folder, single)
        records_single_rate = len(single) / bench_records_one_at_a_time(folder, single)
        print(f"records_metrics: {n:,} points, {len(NAMES)} metric names, WAL + synchronous=NORMAL")
        print(f"{'method':<34}{'batch':>7}{'points/s':>12}{'vs raw':>9}{'vs 1-at-a-time':>16}")
        print(f"{'sqlite3, one point per transaction':<34}{1:>7}{single_rate:>12,.0f}{'':>9}{1:>15.1f}x"
              f"   (on {len(single):,} points)")
        print(f"{'Records.add_metrics, 1 point/call':<34}{1:>7}{records_single_rate:>12,.0f}{'':>9}"
              f"{records_single_rate / single_rate:>15.1f}x   (on {len(single):,} points)")
        for batch in (1_000, 10_000):
            raw_rate = n / bench_raw(folder, points, batch)
            elapsed, ok, reads = bench_records(folder, points, batch)
            rate = n / elapsed
            print(f"{'sqlite3 executemany, bare table':<34}{batch:>7}{raw_rate:>12,.0f}{1:>8.2f}x"
                  f"{raw_rate / single_rate:>15.1f}x")
            print(f"{'Records.add_metrics':<34}{batch:>7}{rate:>12,.0f}{rate / raw_rate:>8.2f}x"
                  f"{rate / single_rate:>15.1f}x   read back all {reads['read_all_s'] * 1e3:.0f} ms, "
                  f"summary {reads['summary_s'] * 1e3:.2f} ms")
            if not ok:
                print(f"FAIL: batch {batch}: points missing or altered on read-back")
                failed = True
            if not args.smoke and rate < TARGET:
                print(f"FAIL: batch {batch}: {rate:,.0f} points/s is under the {TARGET:,}/s target")
                failed = True
    print(f"every point recorded: {'no' if failed else 'yes'}; reference: MLflow on SQLite ~4,600 points/s "
          f"(batches of 1,000, quoted in the issue, not measured here)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
