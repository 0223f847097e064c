"""``floyd top`` at scale: 256 nodes × 8 GPUs and 10,000 jobs served by the stub API (issue 23;
``--nodes``/``--jobs`` change them).

Figures (targets: a refresh renders in < 100 ms; < 15 % of one core at 1 Hz):

* poll: one :class:`Poller` poll per view over the real client and socket
  (min/median/max wall ms, and the CPU ms it costs this process: HTTP + JSON), the
  baseline of what any client must spend; the views take turns in each round, and
  the jobs screen's sorted and filtered pages (the daemon sorts and filters before it
  pages) are set against the old path, every job in one poll, as a same-run ratio;
* render: a snapshot handed to the running app (headless, 160×50) until the
  screen is idle again, per screen: ``draw`` is the handler alone, ``draw+paint``
  the wall time until Textual has laid out and composited the screen (it waits
  for the next frame tick; min/median/max), the CPU that took, and the most time
  the cycle collector's full passes took inside one paint; the app paces the
  collector as ``floyd top`` does (:mod:`floydd.tui.gcpace`); the baseline is the
  same wait with no new snapshot;
* CPU: ``python -m floydd.tui --refresh 1`` on a real pty (the real terminal
  driver, found through ``FLOYDD_STATE_DIR`` as ``floyd top`` finds a daemon),
  CPU % of one core on the cluster and jobs screens, and the jobs screen sorted
  by time; the baseline is an empty Textual app on the same pty.

The load average is printed at the start and the end (2 cores are shared: wall times
under load are longer than the CPU they take).

The stub server runs in its own process (its CPU is not the TUI's) and moves
the cluster every second, so every poll brings new numbers to draw.

    python bench/tui_refresh.py [--smoke] [--seconds 10] [--nodes 64] [--jobs 1000]
    python bench/tui_refresh.py --nodes 256 --jobs 10000     # issue 23's size
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import gc
import os
import pty
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from floydd.client import Client  # noqa: E402
from floydd.tui.app import FloydTop, SnapshotReady  # noqa: E402
from floydd.tui.poll import PAGE, View, Want  # noqa: E402
from floydd.tui.poller import Poller  # noqa: E402
from floydd.tui.screens.jobs import JobsScreen  # noqa: E402

SIZE = (160, 50)
NODES, GPUS, JOBS = 256, 8, 10_000


@contextmanager
def stub_server(state_dir: Path) -> Iterator[Path]:
    sock = state_dir / "floydd.sock"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tests.tui.stub_api", "--socket", str(sock), "--nodes", str(NODES),
                             "--gpus", str(GPUS), "--jobs", str(JOBS), "--tick", "1"], cwd=ROOT, env=env)
    try:
        client = Client(sock, timeout=2)
        deadline = time.monotonic() + 30
        while not (sock.exists() and client.ping()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the stub API did not start")
            time.sleep(0.05)
        yield sock
    finally:
        proc.terminate()
        proc.wait(10)


def _jobs_want(sort: str = "newest", text: str = "") -> Want:
    screen = JobsScreen()
    screen.sort, screen.text = sort, text
    return screen.want()


def bench_poll(sock: Path, rounds: int) -> dict[str, tuple[float, float, float, float]]:
    """view -> (min, median, max wall ms, median CPU ms of this process); the views take turns
    in each round (interleaved), so a sorted or filtered page and the old path of every job
    (what a sort or a text filter fetched before the daemon sorted: the same ``Want`` with no
    page) see the same load."""
    wants = {"cluster": Want(view=View.CLUSTER), "jobs": _jobs_want(),
             "jobs, sorted by time": _jobs_want("time"),
             "jobs, filtered": _jobs_want("newest", "bert"),
             "jobs, every job (old path of a sort or filter)": Want(view=View.JOBS),
             "detail": Want(view=View.DETAIL, job="mnist/300"),
             "experiments": Want(view=View.EXPERIMENTS, compare=("mnist/300", "mnist/299", "mnist/298"),
                                 project="mnist", limit=PAGE)}
    poller = Poller(Client(sock))
    walls: dict[str, list[float]] = {name: [] for name in wants}
    cpus: dict[str, list[float]] = {name: [] for name in wants}
    for want in wants.values():
        poller.poll(want)  # warm: caches on both sides
    for _ in range(rounds):
        for name, want in wants.items():
            w0, c0 = time.perf_counter(), time.process_time()
            snap = poller.poll(want)
            walls[name].append((time.perf_counter() - w0) * 1000)
            cpus[name].append((time.process_time() - c0) * 1000)
            assert snap.reachable, snap.error
    return {name: (min(w), statistics.median(w), max(w), statistics.median(cpus[name])) for name, w in walls.items()}


class _FullPasses:
    """Milliseconds of the cycle collector's full passes (generation 2) while counting."""

    def __init__(self) -> None:
        self.ms, self._t0 = 0.0, 0.0
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.ms += (time.perf_counter() - self._t0) * 1000

    def close(self) -> None:
        gc.callbacks.remove(self._seen)


async def bench_render(sock: Path, rounds: int, paced: bool) -> dict[str, dict[str, list[float]]]:
    """screen -> {"draw", "paint" (draw+paint wall), "cpu", "gc" (full collector passes inside
    the paint)}: ms per round; "idle": the baseline.

    ``paced``: the app paces the collector as ``floyd top`` does (``pace_gc``); the feeder
    stands in for its poller thread and tells the pacing after each poll, as that thread does."""
    feeder = Poller(Client(sock))
    app = FloydTop(Client(sock), refresh=3600, pace_gc=paced)
    passes = _FullPasses()
    out: dict[str, dict[str, list[float]]] = {}
    async with app.run_test(size=SIZE) as pilot:
        while app.polls < 1:
            await pilot.pause(0.01)
        steps = [("cluster", "1", Want(view=View.CLUSTER)), ("jobs", "2", None),
                 ("experiments", "3", None), ("detail", None, Want(view=View.DETAIL, job="mnist/300"))]
        for name, key, want in steps:
            if key:
                await pilot.press(key)
            else:
                app.open_job("mnist/300")
            await pilot.pause(0.3)
            want = want or app._want
            got = out[name] = {"draw": [], "paint": [], "cpu": [], "gc": []}
            for _ in range(rounds):
                snap = feeder.poll(want)
                if app.gc_pacing is not None:
                    app.gc_pacing.after_poll()
                t0, c0, g0 = time.perf_counter(), time.process_time(), passes.ms
                app.post_message(SnapshotReady(snap))
                await pilot.pause()
                got["paint"].append((time.perf_counter() - t0) * 1000)
                got["cpu"].append((time.process_time() - c0) * 1000)
                got["gc"].append(passes.ms - g0)
                got["draw"].append(app.draw_ms)
        idle = out["idle"] = {"draw": [], "paint": [], "cpu": [], "gc": []}
        for _ in range(rounds):
            t0, c0 = time.perf_counter(), time.process_time()
            await pilot.pause()
            idle["paint"].append((time.perf_counter() - t0) * 1000)
            idle["cpu"].append((time.process_time() - c0) * 1000)
    passes.close()
    return out


def renders_both_ways(sock: Path, rounds: int) -> dict[bool, dict[str, dict[str, list[float]]]]:
    """Renders with the collector paced and as Python runs it, in alternating blocks of
    ``rounds / 2`` (unpaced, paced, unpaced, paced): paced -> screen -> measure -> ms."""
    both: dict[bool, dict[str, dict[str, list[float]]]] = {False: {}, True: {}}
    for paced in (False, True, False, True):
        for screen, got in asyncio.run(bench_render(sock, max(1, rounds // 2), paced)).items():
            mine = both[paced].setdefault(screen, {k: [] for k in got})
            for k, values in got.items():
                mine[k] += values
    return both


def cpu_on_pty(argv: list[str], env: dict[str, str], warmup: float, seconds: float,
               keys: list[tuple[bytes, str]]) -> dict[str, float]:
    """Run ``argv`` on a pty of SIZE; for each (keys to type, label): CPU % of one core over ``seconds``."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    env = {**env, "TERM": "xterm-256color", "COLUMNS": str(SIZE[0]), "LINES": str(SIZE[1])}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT,
                            start_new_session=True)
    os.close(slave)
    done = threading.Event()

    def drain() -> None:  # the terminal: read everything the app writes
        while not done.is_set():
            try:
                if not os.read(master, 65536):
                    return
            except OSError:
                return

    threading.Thread(target=drain, daemon=True).start()
    out = {}
    try:
        ps = psutil.Process(proc.pid)
        for typed, label in keys:
            if typed:
                os.write(master, typed)
            time.sleep(warmup)
            t0 = ps.cpu_times()
            time.sleep(seconds)
            t1 = ps.cpu_times()
            out[label] = max(0.0, (t1.user + t1.system - t0.user - t0.system) / seconds * 100)   # never -0.0
    finally:
        done.set()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.close(master)
    return out


def main() -> None:
    global NODES, JOBS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a quick run: 3 rounds, 1.5 s windows")
    ap.add_argument("--seconds", type=float, default=10.0, help="CPU window per screen (default 10)")
    ap.add_argument("--nodes", type=int, default=None, help=f"boxes (default {NODES}; smoke 32)")
    ap.add_argument("--jobs", type=int, default=None, help=f"jobs (default {JOBS:,}; smoke 1,000)")
    args = ap.parse_args()
    NODES = args.nodes or (32 if args.smoke else NODES)
    JOBS = args.jobs or (1000 if args.smoke else JOBS)
    rounds, seconds, warmup = (3, 1.5, 2.0) if args.smoke else (20, args.seconds, 3.0)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ftb") as tmp, stub_server(Path(tmp)) as sock:
        polls = bench_poll(sock, rounds)
        both = renders_both_ways(sock, rounds)
        env = {**os.environ, "FLOYDD_STATE_DIR": tmp, "PYTHONPATH": str(ROOT)}
        env.pop("FLOYD_HOST", None)
        empty = cpu_on_pty([sys.executable, "-c", "from textual.app import App; App().run()"], env, warmup,
                           seconds, [(b"", "empty")])
        tui = cpu_on_pty([sys.executable, "-m", "floydd.tui", "--refresh", "1"], env, warmup, seconds,
                         [(b"", "cluster"), (b"2", "jobs"), (b"ooooo", "jobs, sorted by time")])
    print(f"floyd top bench: {NODES} nodes × {GPUS} GPUs, {JOBS} jobs, stub API on a unix socket"
          f"{' (smoke)' if args.smoke else ''}; load average {load[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(f"poll alone (baseline: HTTP + JSON through floydd.client), {rounds} rounds, the views interleaved:"
          " min/median/max wall ms")
    every = "jobs, every job (old path of a sort or filter)"
    for name, (low, wall, high, cpu) in polls.items():
        vs = f"  {wall / polls[every][1]:5.2f}x the old path" if name.startswith("jobs, ") and name != every else ""
        print(f"  {name:46} {low:6.1f} / {wall:6.1f} / {high:6.1f} ms, {cpu:6.1f} ms CPU "
              f"(= {cpu / 10:4.1f} % of a core at 1 Hz){vs}")
    print(f"render a refresh, headless {SIZE[0]}×{SIZE[1]} (target < 100 ms, the worst too), {rounds} rounds each, "
          "in alternating blocks: draw+paint min/median/max")
    renders = {}
    for paced in (False, True):
        print("  the collector paced as floyd top paces it (floydd.tui.gcpace):" if paced else
              "  the collector as Python runs it (baseline):")
        screens = both[paced]
        idle = screens.pop("idle")
        for name, got in screens.items():
            paint = got["paint"]
            worst = max(paint)
            ok = "ok" if worst < 100 else "OVER"
            print(f"    {name:12} draw {statistics.median(got['draw']):5.1f} ms  draw+paint {min(paint):5.1f} / "
                  f"{statistics.median(paint):5.1f} / {worst:5.1f} ms wall, {statistics.median(got['cpu']):5.1f} ms "
                  f"CPU, full collector passes in one paint at most {max(got['gc']):4.1f} ms  {ok}")
            if paced:
                renders[name] = worst
        print(f"    {'baseline':12} the same wait with no new snapshot: {min(idle['paint']):.1f} / "
              f"{statistics.median(idle['paint']):.1f} / {max(idle['paint']):.1f} ms wall, "
              f"{statistics.median(idle['cpu']):.1f} ms CPU")
    print(f"CPU on a real pty at --refresh 1, over {seconds:.0f} s (target < 15 % of a core)")
    print(f"  {'empty app':22} {empty['empty']:5.1f} %   (baseline: an empty Textual app, idle)")
    for name in tui:
        ok = "ok" if tui[name] < 15 else "OVER"
        alone = polls["jobs, sorted by time" if "sorted" in name else name][3] / 10
        print(f"  {name:22} {tui[name]:5.1f} %   {tui[name] - empty['empty']:+5.1f} points over the empty app, "
              f"{tui[name] / max(alone, 0.1):4.1f}x the poll alone  {ok}")
    worst_paint = max(renders.values())
    worst_cpu = max(tui.values())
    print(f"result: worst render {worst_paint:.1f} ms (< 100), CPU {worst_cpu:.1f} % (< 15): "
          + ("PASS" if worst_paint < 100 and worst_cpu < 15 else "FAIL"))


if __name__ == "__main__":
    main()
