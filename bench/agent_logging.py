"""Cost of the agent's log capture for a job printing many metric lines.

The same Python job prints N ``{"metric": ...}`` lines (unbuffered, as every job runs)
and times itself; it runs once with stdout on /dev/null (the baseline) and once
through a real agent (``python -m floydd.agent``, no sandbox) that timestamps every
line into job.log. Reported: the job's own time both ways and their ratio (target:
< 1.10), plus the agent's end-to-end time (job spawn → all lines in job.log). Best of
``--runs`` each, alternating, to keep a shared machine's noise out of the ratio.

    python bench/agent_logging.py [--lines 200000] [--runs 5] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from floydd.agent.spec import AgentSpec
from floydd.agent.status import read_status
from floydd.runtime.spawn import write_spec

JOB = """import json, os, sys, time
t0, c0 = time.perf_counter(), time.process_time()
for i in range({n}):
    print(json.dumps({{"metric": "loss", "value": 1.0 / (i + 1), "step": i}}))
sys.stderr.write("JOBTIME %.6f %.6f\\n" % (time.perf_counter() - t0, time.process_time() - c0))
"""


def baseline(script: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(os.devnull, "wb") as null:
        res = subprocess.run([sys.executable, str(script)], stdout=null, stderr=subprocess.PIPE, env=env,
                             check=True)
    wall, cpu = res.stderr.split()[-2:]
    return float(wall), float(cpu)


def through_agent(root: Path, script: Path, run: int) -> tuple[tuple[float, float], float, int]:
    ws = root / "jobs" / "bench" / str(run)
    for name in ("code", "input", "output", "home", "tmp"):
        (ws / name).mkdir(parents=True)
    write_spec(ws, AgentSpec(job=f"bench/{run}", command=f"{sys.executable} {script}", sandbox="none",
                             python_bin=str(Path(sys.executable).parent), state_dir=str(root)))
    subprocess.run([sys.executable, "-m", "floydd.agent", str(ws)], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    status = read_status(ws)
    assert status is not None and status.outcome == "success", status
    log = (ws / "job.log").read_bytes()
    wall, cpu = log.rsplit(b"JOBTIME ", 1)[1].split()[:2]
    return (float(wall), float(cpu)), status.ended - status.started, log.count(b"\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="20k lines, 2 runs: a quick check that it works")
    args = ap.parse_args()
    lines, runs = (20_000, 2) if args.smoke else (args.lines, args.runs)
    root = Path(tempfile.mkdtemp(prefix="floydd-bench-"))
    try:
        script = root / "job.py"
        script.write_text(JOB.format(n=lines))
        base, ours, e2e = [], [], []
        for run in range(runs):
            base.append(baseline(script))
            jobtime, total, logged = through_agent(root, script, run)
            assert logged == lines + 1, f"job.log has {logged} lines, expected {lines + 1}"
            ours.append(jobtime)
            e2e.append(total)
        b, o = min(w for w, _ in base), min(w for w, _ in ours)
        bc, oc = min(c for _, c in base), min(c for _, c in ours)
        print(f"job printing {lines} metric lines, best of {runs} (the job's own wall / CPU time):")
        print(f"  stdout to /dev/null:  {b:7.3f} s wall  {bc:7.3f} s CPU")
        print(f"  through the agent:    {o:7.3f} s wall  {oc:7.3f} s CPU"
              f"   (job spawn to last line logged: {min(e2e):.3f} s)")
        print(f"  ratio: {o / b:.3f}x wall, {oc / bc:.3f}x CPU (target < 1.10)")
        print(json.dumps({"lines": lines, "runs": runs, "devnull_s": b, "agent_s": o, "agent_e2e_s": min(e2e),
                          "ratio": o / b, "cpu_ratio": oc / bc}))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
