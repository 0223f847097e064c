"""A job printing 200k metric lines: every point recorded, points/s, and the job's slowdown.

Baseline in the same run: the same script run the way a person runs it without
floydd, ``python emit.py > log``: a plain process in the project folder, its stdout
going to a regular file (block-buffered writes, as through floydd's capture). So the
slowdown is what floydd adds to the job's print loop (capture, tail, metric parsing
competing for the CPU), not what capture costs against no output at all (the baseline
was /dev/null until issue 23). The two sides alternate run by run, ``--repeat`` rounds;
min/median/max of each. The job is reported ended before its last points are recorded
(at 200k points, 145k-200k were in at that moment): the bench polls until all are, up to
60 s, and says how many were in and how long the rest took. Targets: all points recorded,
≥ 50k points/s into the records, job slowed < 10 %.

    python bench/daemon_metrics.py [--points 200000] [--smoke]
"""

from __future__ import annotations

import argparse
import os
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
    n, repeat = (5_000, 2) if args.smoke else (args.points, args.repeat)
    script = SCRIPT.format(n=n)
    direct, through, rates, totals, at_end, lags = [], [], [], [], [], []
    load = os.getloadavg()[0]
    with daemon() as (client, _proc, project):
        (project / "emit.py").write_text(script)
        for _ in range(repeat):  # alternate the two sides so load drifts hit both
            with open(project.parent / "plain.log", "wb") as log:    # python emit.py > log
                res = subprocess.run([sys.executable, "emit.py"], cwd=project, stdout=log,
                                     stderr=subprocess.PIPE, text=True, check=True)
            direct.append(float(res.stderr.split()[-1]))
            t0 = time.time()
            job = client.submit({"project": "bench", "command": "python emit.py", "code_path": str(project)})
            done = client.wait(job["id"], timeout=600)
            ended = time.time()
            assert done["state"] == "success", done
            count = done["metrics"]["loss"]["count"]
            at_end.append(count)
            deadline = ended + 60       # the job is reported ended before its last points are in
            while count != n and time.time() < deadline:
                time.sleep(0.02)
                count = client.job(job["id"])["metrics"]["loss"]["count"]
            recorded = time.time()
            if count != n:
                raise SystemExit(f"only {count} of {n} points recorded 60 s after the job ended")
            lags.append(recorded - ended)
            last = [line for line in client.logs(job["id"]) if b" elapsed " in line][-1]
            through.append(float(last.split()[-1]))
            rates.append(count / (recorded - done["started"]))  # job start until every point is recorded
            totals.append(recorded - t0)
    med = statistics.median
    print(f"{repeat} rounds, load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; "
          f"min/median/max")
    print(f"python emit.py > log:  the job's print loop took {_s(direct)} for {n} lines")
    print(f"through floydd:        the job's print loop took {_s(through)}; submit to all recorded "
          f"{_s(totals)}")
    print(f"points recorded: all {n} in each of {repeat} runs; when the job was reported ended: "
          f"{min(at_end)}-{max(at_end)}, the rest {_s(lags)} later")
    print(f"ingest rate: {med(rates):,.0f} points/s median ({min(rates):,.0f}-{max(rates):,.0f}) from job start "
          f"to all recorded (target ≥ 50,000/s)")
    print(f"job slowdown: {100 * (med(through) / med(direct) - 1):+.1f} % vs python emit.py > log, medians "
          f"(x{med(through) / med(direct):.2f}; target < 10 %)")


def _s(xs: list[float]) -> str:
    return f"{min(xs):.3f}/{statistics.median(xs):.3f}/{max(xs):.3f} s"


if __name__ == "__main__":
    main()
