"""Daemon idle footprint: RSS and CPU over a window with no jobs (target ≤ 80 MiB, < 1 % of a core).

Baseline in the same run: a bare ``python -c 'import time; time.sleep(N)'`` over the same window.

    python bench/daemon_idle.py [--seconds 60] [--smoke]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import daemon  # noqa: E402


def measure(pid: int, seconds: float) -> tuple[float, float]:
    proc = psutil.Process(pid)
    t0 = proc.cpu_times()
    time.sleep(seconds)
    t1 = proc.cpu_times()
    cpu = max(0.0, (t1.user + t1.system - t0.user - t0.system) / seconds * 100)
    return proc.memory_info().rss / 2**20, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    seconds = 3 if args.smoke else args.seconds
    bare = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds + 5})"])
    time.sleep(0.5)
    base_rss, base_cpu = measure(bare.pid, seconds)
    bare.kill()
    with daemon() as (client, proc, _project):
        client.nodes()
        time.sleep(1)  # let start-up work settle before the window
        rss, cpu = measure(proc.pid, seconds)
    print(f"bare python:  RSS {base_rss:6.1f} MiB  CPU {base_cpu:5.2f} % of a core over {seconds:.0f}s")
    print(f"floydd idle:  RSS {rss:6.1f} MiB  CPU {cpu:5.2f} % of a core over {seconds:.0f}s "
          f"(targets ≤ 80 MiB, < 1 %)")
    print(f"ratio: RSS {rss / base_rss:.1f}x bare python")


if __name__ == "__main__":
    main()
