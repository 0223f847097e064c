"""Submit-to-running latency of a trivial job on the local daemon vs a direct spawn.

Both sides run the same command, which prints the wall-clock time at which it
started; latency is that time minus the moment the caller began (the
``Client.submit`` call, or ``subprocess.Popen``). Target: the daemon's median is
< 60 ms above the direct spawn's (issue 23; it was < 150 ms). 50 rounds (``--smoke``: 5),
each a direct spawn, a job through a daemon as it runs by default (its spare agent ready:
:mod:`floydd.runtime.spare`) and a job through a daemon with spares off (each job starts its
agent, as the first job on a box idle for ``agent_spare_idle`` does), the order rotating round
by round (interleaved, so all see the same load); min / median / max of each and the ratio of
the medians. A first job on each daemon, not counted, warms it up.

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
import os
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


def direct() -> float:
    """One direct spawn: from Popen to the command's first line of Python."""
    t0 = time.time()
    res = subprocess.run(["/bin/sh", "-c", CMD], capture_output=True, text=True)
    return float(res.stdout) - t0


def submitted(client, project: Path) -> tuple[float, float]:
    """One job through the daemon: (submit-to-running, the submit call alone: answered once committed)."""
    t0 = time.time()
    job = client.submit({"project": "bench", "command": CMD, "code_path": str(project)})
    answered = time.time() - t0
    done = client.wait(job["id"], timeout=120)
    assert done["state"] == "success", done
    line = b"".join(client.logs(job["id"])).decode().split()
    return float(line[2]) - t0, answered


def interleaved(runs: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """``runs`` rounds, each a direct spawn, a job through a daemon with its spare agent (the
    default: a box that started a job in the last ``agent_spare_idle`` seconds) and a job through
    a daemon with spares off (every job starts its agent: the first job on an idle box), the
    order rotating round by round: (direct, warm, cold, the warm daemon's submit call)."""
    base, ours, cold, answered = [], [], [], []
    with daemon() as (client, _proc, project), \
            daemon(env={"FLOYDD_AGENT_SPARE_IDLE": "0"}) as (cold_client, _cold_proc, cold_project):
        submitted(client, project)      # warm-up, not counted: the first job makes the project
        submitted(cold_client, cold_project)

        def warm() -> None:
            o, a = submitted(client, project)
            ours.append(o)
            answered.append(a)
        steps = [lambda: base.append(direct()), warm,
                 lambda: cold.append(submitted(cold_client, cold_project)[0])]
        for r in range(runs):
            for i in range(3):
                steps[(r + i) % 3]()
    return base, ours, cold, answered


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
        load = os.getloadavg()
        base, ours, cold, answered = interleaved(runs)
        commits = one_voter_commits(max(runs, 20))
    finally:
        if spinner:
            stop.set()
            spinner.join()
    b, o = statistics.median(base), statistics.median(ours)
    extra = "one core kept busy by this bench" if args.busy else "no load added by this bench"
    print(f"{extra}, {runs} rounds (a direct spawn and a job through each daemon, "
          f"the order rotating), load average {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"direct spawn:   min/median/max {_ms(base)}")
    print(f"floydd submit:  min/median/max {_ms(ours)} (its spare agent ready: a box that ran a job lately)")
    print(f"  spares off:   min/median/max {_ms(cold)} (each job starts its agent: the first job after "
          f"agent_spare_idle; +{1000 * (statistics.median(cold) - b):.1f} ms)")
    print(f"  of which the submit call (snapshot + one commit): min/median/max {_ms(answered)}")
    print(f"  one fsynced raft commit on a one-voter log: median {statistics.median(commits) * 1000:.1f} ms "
          f"(a job's road commits 3: submission, placement, running)")
    print(f"overhead: {1000 * (o - b):.1f} ms above direct spawn, medians (target < 60 ms, issue 23; was < 150); "
          f"ratio {o / b:.2f}x")


def _ms(xs: list[float]) -> str:
    return f"{min(xs) * 1000:.1f} / {statistics.median(xs) * 1000:.1f} / {max(xs) * 1000:.1f} ms"


if __name__ == "__main__":
    main()
