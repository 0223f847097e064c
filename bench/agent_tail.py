"""Speed of the daemon's job.log tailer (floydd.runtime.tail) vs a bare line split.

Writes a job.log of N lines (half ``{"metric": ...}`` lines, half plain text, as the
agent writes them), then times reading it from offset 0 in chunks as the runtime
does: metric points only (what the watcher records), and every line as LogLine
objects (what a log reader would use). Baseline: ``bytes.split(b"\\n")`` over the
same file (the least any parser must do). Target: ≥ 200k lines/s. Best of 5.

    python bench/agent_tail.py [--lines 1000000] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from floydd.runtime.tail import read_chunk


def write_log(path: Path, n: int) -> None:
    ts = 1_700_000_000.0
    with open(path, "wb") as f:
        for i in range(0, n, 2):
            f.write(b"%.6f o %s\n" % (ts + i * 1e-4, json.dumps({"metric": "loss", "value": 1 / (i + 1),
                                                                  "step": i}).encode()))
            f.write(b"%.6f e epoch %d batch %d: still training, nothing to see\n" % (ts + i * 1e-4, i, i))


def best(fn, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--smoke", action="store_true", help="100k lines")
    args = ap.parse_args()
    n = 100_000 if args.smoke else args.lines
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.log"
        write_log(path, n)

        def metrics() -> None:
            offset, count = 0, 0
            while True:
                chunk = read_chunk(path, offset)
                if chunk.offset == offset:
                    break
                count += len(chunk.metrics)
                offset = chunk.offset
            assert count == n // 2, count

        def lines() -> None:
            offset, count = 0, 0
            while True:
                chunk = read_chunk(path, offset)
                if chunk.offset == offset:
                    break
                count += len(chunk.lines)
                offset = chunk.offset
            assert count == n, count

        def split() -> None:
            assert len(path.read_bytes().split(b"\n")) == n + 1

        t_split, t_metrics, t_lines = best(split), best(metrics), best(lines)
    print(f"job.log of {n} lines ({n // 2} metric lines), best of 5:")
    print(f"  bytes.split baseline:      {t_split:7.3f} s  {n / t_split / 1e6:6.2f} M lines/s")
    print(f"  metric points (watcher):   {t_metrics:7.3f} s  {n / t_metrics / 1e6:6.2f} M lines/s"
          f"  ({t_metrics / t_split:.1f}x baseline)")
    print(f"  all lines as LogLine:      {t_lines:7.3f} s  {n / t_lines / 1e6:6.2f} M lines/s"
          f"  ({t_lines / t_split:.1f}x baseline)   target ≥ 0.20 M lines/s")
    print(json.dumps({"lines": n, "split_s": t_split, "metrics_s": t_metrics, "lines_s": t_lines,
                      "metrics_lines_per_s": n / t_metrics, "all_lines_per_s": n / t_lines}))


if __name__ == "__main__":
    main()
