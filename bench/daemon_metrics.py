"""A job printing 200k metric lines: every point recorded, points/s, and the job's slowdown.

Baseline in the same run: the same script with its stdout to /dev/null, run
directly. Targets: all points recorded, ≥ 50k points/s into the records, job
slowed < 10 %.

    python bench/daemon_metrics.py [--points 200000] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
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
    ap.add_argument("--repeat", type=int, default=5, help="runs of each side; medians are reported")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    n, repeat = (5_000, 1) if args.smoke else (args.points, args.repeat)
    script = SCRIPT.format(n=n)
    direct, through, rates, totals = [], [], [], []
    with daemon() as (client, _proc, project):
        (project / "emit.py").write_text(script)
        for _ in range(repeat):  # alternate the two sides so load drifts hit both
            res = subprocess.run([sys.executable, "-c", script], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True, check=True)
            direct.append(float(res.stderr.split()[-1]))
            t0 = time.time()
            job = client.submit({"project": "bench", "command": "python emit.py", "code_path": str(project)})
            done = client.wait(job["id"], timeout=600)
            recorded = time.time()
            assert done["state"] == "success", done
            count = done["metrics"]["loss"]["count"]
            if count != n:
                raise SystemExit(f"only {count} of {n} points recorded")
            last = [line for line in client.logs(job["id"]) if b" elapsed " in line][-1]
            through.append(float(last.split()[-1]))
            rates.append(count / (recorded - done["started"]))  # job start until every point is recorded
            totals.append(recorded - t0)
    med = statistics.median
    print(f"direct to /dev/null: the job's print loop took {med(direct):.3f} s for {n} lines (median of {repeat})")
    print(f"through floydd:      the job's print loop took {med(through):.3f} s; submit to all recorded "
          f"{med(totals):.2f} s")
    print(f"points recorded: all {n} in each of {repeat} runs")
    print(f"ingest rate: {med(rates):,.0f} points/s from job start to all recorded (target ≥ 50,000/s)")
    print(f"job slowdown: {100 * (med(through) / med(direct) - 1):+.1f} % vs /dev/null (target < 10 %)")


if __name__ == "__main__":
    main()
