"""Daemon idle footprint: RSS and CPU of boxes doing nothing (targets: a box alone ≤ 60 MiB and
≤ 0.2 % of a core; a cluster member ≤ 0.5 %).

Started together and sampled over the same windows (so a busy moment of the machine hits
them all alike): a bare ``python`` sleeping (the baseline), a fresh box alone (``floydd
start`` on an empty state dir: its first windows are its first minute), and, unless
``--no-cluster``, a cluster of two formed as the README's tour does (``floydd init``, ``token
create``, ``join``, on loopback): its leader and its other member. CPU is each process's
on-CPU time over a window (``/proc/PID/task/*/schedstat``, ns, the threads alive at both
ends; the kernel's tick count over the whole run is printed as a cross-check: it counts
threads that ended too, in 10 ms steps). RSS is taken at the end of each window.

    python bench/daemon_idle.py [--windows 6] [--window 10] [--no-cluster]
    python bench/daemon_idle.py --smoke        # a few seconds: 2 windows of 1 s, targets not judged

Exit status 1 when a target is missed (not with ``--smoke``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import daemon, floydd_cli, free_port  # noqa: E402
from floydd.client import Client  # noqa: E402
from floydd.config import socket_path_for  # noqa: E402

ALONE_RSS_MIB, ALONE_CPU, MEMBER_CPU = 60.0, 0.2, 0.5
_TICK = os.sysconf("SC_CLK_TCK")


def on_cpu_ns(pid: int) -> int:
    """On-CPU nanoseconds of the threads of ``pid`` alive now."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue                            # a thread gone meanwhile
    return total


def ticks(pid: int) -> int:
    """utime + stime of ``pid`` in clock ticks (threads that ended included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def sample(pids: dict[str, int], windows: int, window: float) -> dict[str, dict]:
    """Per process: CPU % of a core in each window, RSS at the end of each, and the ticks'
    figure over all windows."""
    out = {name: {"cpu": [], "rss": [], "ticks": ticks(pid)} for name, pid in pids.items()}
    began = time.monotonic()
    for _ in range(windows):
        t0, c0 = time.monotonic(), {name: on_cpu_ns(pid) for name, pid in pids.items()}
        time.sleep(window)
        t1, c1 = time.monotonic(), {name: on_cpu_ns(pid) for name, pid in pids.items()}
        for name, pid in pids.items():
            out[name]["cpu"].append(max(0, c1[name] - c0[name]) / 1e9 / (t1 - t0) * 100)
            out[name]["rss"].append(rss_mib(pid))
    spent = time.monotonic() - began
    for name, pid in pids.items():
        out[name]["ticks"] = (ticks(pid) - out[name]["ticks"]) / _TICK / spent * 100
    return out


def _until(cond, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if cond():
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def two_boxes(tmp: Path):
    """A cluster of two daemons on loopback: box-a founds it, box-b joins; yields their pids."""
    procs: list[subprocess.Popen] = []
    try:
        clients = []
        for name in ("box-a", "box-b"):
            state, port = tmp / name, free_port()
            if name == "box-a":
                floydd_cli(state, "init", "--name", "idle", "--listen", f"127.0.0.1:{port}",
                        "--advertise", f"127.0.0.1:{port}", "--api-listen", "off")
            else:
                token = floydd_cli(tmp / "box-a", "token", "create")
                floydd_cli(state, "join", token, "--listen", f"127.0.0.1:{port}", "--advertise", f"127.0.0.1:{port}",
                        "--api-listen", "off")
            log = open(tmp / f"{name}.log", "wb")
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state), "--node-name", name,
                 "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            client = Client(socket_path_for(state), timeout=60)
            proc = procs[-1]
            _until(lambda: proc.poll() is None and client.ping() or proc.poll() is not None, f"{name} to answer")
            if proc.poll() is not None:
                raise SystemExit(f"{name} stopped:\n" + (tmp / f"{name}.log").read_text(errors="replace")[-2000:])
            clients.append(client)
        _until(lambda: all(len(c.nodes()) == 2 for c in clients), "both boxes listed")
        yield {"cluster leader": procs[0].pid, "cluster member": procs[1].pid}
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)


def _mmm(values: list[float], fmt: str) -> str:
    return "/".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def report(res: dict[str, dict], windows: int, window: float, load: tuple, cluster: bool) -> bool:
    base = res["bare python"]
    base_cpu, base_rss = statistics.median(base["cpu"]), statistics.median(base["rss"])
    print(f"idle footprint over {windows} windows of {window:g} s, sampled together; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start, "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} at end")
    print(f"{'':16} {'RSS MiB min/med/max':>22} {'CPU % min/med/max':>20} {'ticks %':>8}  vs bare python")
    for name, r in res.items():
        cpu, rss = statistics.median(r["cpu"]), statistics.median(r["rss"])
        vs = "" if r is base else (f"RSS x{rss / base_rss:.1f}, CPU +{cpu - base_cpu:.2f} pt"
                                   + (f" (x{cpu / base_cpu:.0f})" if base_cpu > 0.005 else ""))
        print(f"{name:16} {_mmm(r['rss'], '.1f'):>22} {_mmm(r['cpu'], '.3f'):>20} {r['ticks']:8.2f}  {vs}")
    alone = res["box alone"]
    print("box alone, CPU % per window (fresh start first): " + ", ".join(f"{c:.3f}" for c in alone["cpu"]))
    ok = statistics.median(alone["rss"]) <= ALONE_RSS_MIB and statistics.median(alone["cpu"]) <= ALONE_CPU
    print(f"targets: box alone ≤ {ALONE_RSS_MIB:g} MiB and ≤ {ALONE_CPU} % (median): "
          f"{'met' if ok else 'MISSED'}", end="")
    if cluster:
        member = max(statistics.median(res[n]["cpu"]) for n in ("cluster leader", "cluster member"))
        ok_member = member <= MEMBER_CPU
        ok = ok and ok_member
        print(f"; a cluster member ≤ {MEMBER_CPU} % (median, the busier of the two): "
              f"{'met' if ok_member else 'MISSED'}")
    else:
        print("; cluster not measured")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--window", type=float, default=10.0, help="seconds per window")
    ap.add_argument("--no-cluster", action="store_true", help="only the box alone and the baseline")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    windows, window = (2, 1.0) if args.smoke else (args.windows, args.window)
    cluster = not args.no_cluster and not args.smoke
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1e6)"])
    try:
        with contextlib.ExitStack() as stack:
            pids = {"bare python": bare.pid}
            if cluster:
                pids.update(stack.enter_context(two_boxes(Path(stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="floydd-idle-"))))))
            client, proc, _project = stack.enter_context(daemon())    # last: its first minute is sampled
            client.nodes()
            pids["box alone"] = proc.pid
            load = os.getloadavg()
            res = sample(pids, windows, window)
    finally:
        bare.kill()
        bare.wait()
    order = ["bare python", "box alone"] + (["cluster leader", "cluster member"] if cluster else [])
    ok = report({name: res[name] for name in order}, windows, window, load, cluster)
    return 0 if ok or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
