"""Submit-to-running latency of a trivial job on the local daemon vs a direct spawn.

Both sides run the same command, which prints the wall-clock time at which it
started; latency is that time minus the moment the caller began (the
``Client.submit`` call, or ``subprocess.Popen``). Target: the daemon's median is
< 150 ms above the direct spawn's. Median of 50 each (``--smoke``: 5).

    python bench/daemon_submit_latency.py [--runs 50] [--smoke]
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

CMD = 'python -c "import time; print(time.time())"'


def direct(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.time()
        res = subprocess.run(["/bin/sh", "-c", CMD], capture_output=True, text=True)
        out.append(float(res.stdout) - t0)
    return out


def through_daemon(runs: int) -> list[float]:
    out = []
    with daemon() as (client, _proc, project):
        for _ in range(runs):
            t0 = time.time()
            job = client.submit({"project": "bench", "command": CMD, "code_path": str(project)})
            done = client.wait(job["id"], timeout=120)
            assert done["state"] == "success", done
            line = b"".join(client.logs(job["id"])).decode().split()
            out.append(float(line[2]) - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    runs = 5 if args.smoke else args.runs
    base = direct(runs)
    ours = through_daemon(runs)
    b, o = statistics.median(base), statistics.median(ours)
    print(f"direct spawn:   median {b * 1000:7.1f} ms  max {max(base) * 1000:7.1f} ms  ({runs} runs)")
    print(f"floydd submit:  median {o * 1000:7.1f} ms  max {max(ours) * 1000:7.1f} ms  ({runs} runs)")
    print(f"overhead: {1000 * (o - b):.1f} ms above direct spawn (target < 150 ms); ratio {o / b:.2f}x")


if __name__ == "__main__":
    main()
