"""Submit-to-running latency of a trivial job on the local daemon vs a direct spawn.

Both sides run the same command, which prints the wall-clock time at which it
started; latency is that time minus the moment the caller began (the
``Client.submit`` call, or ``subprocess.Popen``). Target: the daemon's median is
< 150 ms above the direct spawn's. Median of 50 each (``--smoke``: 5).

A box alone is a one-voter cluster, so a job's road includes fsynced raft commits (the
submission, the placement, the running report). What one costs is measured in the same
run: proposals committed one at a time on a one-voter log in its own folder (the same
storage, the same fsync), and the time ``floyd run`` waits for its answer (snapshot of
the code folder + one commit).

    python bench/daemon_submit_latency.py [--runs 50] [--smoke] [--busy]

``--busy`` keeps one core busy with another process during the whole run (the figure
the issue names: a busy 2-core box).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import statistics
import subprocess
import sys
import tempfile
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


def through_daemon(runs: int) -> tuple[list[float], list[float]]:
    """Submit-to-running, and how long the submit call itself took (answered once committed)."""
    out, answered = [], []
    with daemon() as (client, _proc, project):
        for _ in range(runs):
            t0 = time.time()
            job = client.submit({"project": "bench", "command": CMD, "code_path": str(project)})
            answered.append(time.time() - t0)
            done = client.wait(job["id"], timeout=120)
            assert done["state"] == "success", done
            line = b"".join(client.logs(job["id"])).decode().split()
            out.append(float(line[2]) - t0)
    return out, answered


def one_voter_commits(runs: int) -> list[float]:
    """Seconds per command committed on a one-voter log (what each step of a job's road costs)."""
    from floydd.cluster.service import ClusterService
    from floydd.security.identity import NodeIdentity

    async def measure(folder: Path) -> list[float]:
        service = ClusterService(NodeIdentity.load_or_create(folder / "tls"), folder / "cluster", advertise="",
                                 rng=random.Random(1))
        await service.start(bootstrap=True)
        try:
            times = []
            for i in range(runs):
                t0 = time.perf_counter()
                await service.reserve_numbers("bench", i)
                times.append(time.perf_counter() - t0)
            return times
        finally:
            await service.close()
    with tempfile.TemporaryDirectory(prefix="floydd-bench-") as tmp:
        return asyncio.run(measure(Path(tmp)))


def _spin(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--busy", action="store_true", help="keep one core busy with another process")
    args = ap.parse_args()
    runs = 5 if args.smoke else args.runs
    stop = multiprocessing.Event()
    spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True) if args.busy else None
    if spinner:
        spinner.start()
    try:
        base = direct(runs)
        ours, answered = through_daemon(runs)
        commits = one_voter_commits(max(runs, 20))
    finally:
        if spinner:
            stop.set()
            spinner.join()
    b, o = statistics.median(base), statistics.median(ours)
    print(f"{'busy' if args.busy else 'quiet'} box, {runs} runs each")
    print(f"direct spawn:   median {b * 1000:7.1f} ms  max {max(base) * 1000:7.1f} ms")
    print(f"floydd submit:  median {o * 1000:7.1f} ms  max {max(ours) * 1000:7.1f} ms")
    print(f"  of which the submit call (snapshot + one commit): median {statistics.median(answered) * 1000:.1f} ms")
    print(f"  one fsynced raft commit on a one-voter log: median {statistics.median(commits) * 1000:.1f} ms "
          f"(a job's road commits 3: submission, placement, running)")
    print(f"overhead: {1000 * (o - b):.1f} ms above direct spawn (target < 150 ms); ratio {o / b:.2f}x")


if __name__ == "__main__":
    main()
