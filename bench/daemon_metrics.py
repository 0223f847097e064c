"""A job printing 200k metric lines: every point recorded, points/s, and the job's slowdown.

Baseline in the same run: the same script with its stdout to /dev/null, run
directly. Targets: all points recorded, ≥ 50k points/s into the records, job
slowed < 10 %.

    python bench/daemon_metrics.py [--points 200000] [--smoke]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import daemon  # noqa: E402

SCRIPT = """
import json, sys, time
t0 = time.time()
w = sys.stdout.write
for i in range({n}):
    w('{{"metric": "loss", "value": %r, "step": %d}}\\n' % (1.0 / (i + 1), i))
sys.stdout.flush()
print("elapsed", time.time() - t0, file=sys.stderr)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    n = 5_000 if args.smoke else args.points
    script = SCRIPT.format(n=n)

    res = subprocess.run([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, check=True)
    direct = float(res.stderr.split()[-1])

    with daemon() as (client, _proc, project):
        (project / "emit.py").write_text(script)
        t0 = time.perf_counter()
        job = client.submit({"project": "bench", "command": "python emit.py", "code_path": str(project)})
        done = client.wait(job["id"], timeout=600)
        total = time.perf_counter() - t0
        assert done["state"] == "success", done
        count = done["metrics"]["loss"]["count"]
        last = [line for line in client.logs(job["id"]) if b" elapsed " in line][-1]
        runtime = float(last.split()[-1])
    print(f"direct to /dev/null: the job's print loop took {direct:.3f} s for {n} lines")
    print(f"through floydd:      the job's print loop took {runtime:.3f} s; submit to all recorded {total:.2f} s")
    print(f"points recorded: {count} of {n} ({'all' if count == n else 'MISSING SOME'})")
    print(f"ingest rate: {count / total:,.0f} points/s end to end (target ≥ 50,000/s)")
    print(f"job slowdown: {100 * (runtime / direct - 1):+.1f} % vs /dev/null (target < 10 %)")


if __name__ == "__main__":
    main()
