"""State that stays small: 2,000 then 20,000 finished jobs in a 3-box cluster, then a fresh box.

Three real daemons (``floydd start``) on 127.0.0.1, formed with the real CLI (``floydd init``,
``floydd token create``, ``floydd join``), default knobs: the leader archives finished jobs past
the newest ``archive_keep`` (1,000) in batches of 500.

How the jobs are made (say it exactly): running 20,000 real jobs would take most of an hour on
a 2-core box, so the bench **commits them through the real state machine's commands**, as a
member of the cluster would: it holds a node certificate signed by the cluster's CA and posts,
to the leader's ``/cluster/v1/propose`` over mTLS, 32 at a time, for each job a ``job.submit``
(a real spec asking for 64 GPUs, so no box can place it) then a ``job.update`` to ``stopped``
with an exit code and a metric summary (a finished job of the usual size in the replicated
state). ``--real N`` first runs N real jobs (``floyd run "true"``, default 10) through the API,
so that some of the archived jobs have records, logs and events on the box that ran them.

After each phase (when the hot state is back to ~1,000 finished jobs) it prints, per box:

- the replicated state: the hot part (bytes of a snapshot of it, as every box holds it in
  memory) and the archive (rows and bytes, in SQLite on every box);
- daemon RSS;
- ``floyd status`` (this project's 20 newest), ``floyd status --all --limit 10000`` and
  ``floyd status --all`` wall time (the CLI process, output to a pipe);

and at the end a fourth box joins: the snapshot it is sent (hot bytes + archive bytes) and the
time from starting its daemon to holding every job (it lists the newest and reads the oldest
archived job from its own copy).

Baselines, same run: the hot state had nothing been archived (the archive's jobs with their
cluster history back, as before this issue), the RSS after the first phase (flatness), and
the old table renderer (rich) on the same 10,000 rows in this process.

    python bench/cluster_archive.py                  # 2,000 then 10,000 (~3 min on 2 cores)
    python bench/cluster_archive.py --phases 2000,20000   # issue 12's sizes
    python bench/cluster_archive.py --smoke          # 150 jobs, one phase, archived 2 s after they end,
                                                     # no restarts (CI, ~35 s)
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import msgpack  # noqa: E402

from floydd.cluster.state import commands  # noqa: E402
from floydd.cluster.raft import EntryKind  # noqa: E402
from floydd.cluster.state.machine import ClusterState  # noqa: E402
from floydd.cluster.net.transport import Transport  # noqa: E402
from floydd.errors import FloyddError  # noqa: E402
from floydd.security.identity import NodeIdentity  # noqa: E402
from tests.harness.processes import box, stop  # noqa: E402
from bench._boxes import form, join, leader, member_identity, wait  # noqa: E402

SPEC = {"command": "python train.py --lr 0.01 --epochs 10", "params": {"lr": "0.01", "epochs": "10"},
        "code_tree": "ab" * 32, "data": [], "resources": {"gpus": 64, "nodes": 1}, "env": "default",
        "message": "a bench job", "mode": "job", "max_runtime": None}

SMOKE_JOBS, SMOKE_KEEP = 150, 50


async def commit_jobs(identity: NodeIdentity, lead: tuple[str, str], n: int, clients: int = 32) -> float:
    """Commit ``n`` finished jobs (see the module docstring); jobs per second."""
    transport = Transport(identity)
    transport.set_peer(*lead)
    todo = iter(range(n))

    async def client() -> None:
        for _ in todo:
            key = uuid.uuid4().hex
            cmd = {"op": "job.submit", "idem_key": key, "project": "bench", "spec": SPEC, "ts": time.time()}
            job, _ = await _retry(transport, cmd, lead)
            await _retry(transport, {"op": "job.update", "job": job["id"], "state": "stopped",
                                     "reason": "stopped by the bench", "ts": time.time()}, lead)

    t0 = time.monotonic()
    try:
        await asyncio.gather(*(client() for _ in range(clients)))
    finally:
        await transport.close()
    return n / (time.monotonic() - t0)


async def _retry(transport, cmd, lead):
    for attempt in range(50):
        try:
            return await transport.forward_propose(cmd, 10.0, peer=lead[0])
        except FloyddError as exc:
            if getattr(exc, "code", "") == "bad_transition":
                return None, ""
            await asyncio.sleep(0.1)
    raise SystemExit(f"{cmd['op']} was never committed")


def state_sizes(raft_db: Path) -> dict:
    """The hot state (replayed from the log, read-only) and the archive of one box."""
    db = sqlite3.connect(raft_db.absolute().as_uri() + "?mode=ro", uri=True)
    try:
        (snap_index, data), = db.execute("SELECT idx, data FROM raft_snapshot").fetchall()
        entries = db.execute("SELECT idx, term, kind, data FROM raft_log WHERE idx > ? ORDER BY idx",
                             (snap_index,)).fetchall()
        rows, archive_bytes = db.execute("SELECT count(*), coalesce(sum(length(job)), 0) FROM archive "
                                         "WHERE deleted IS NULL").fetchone()
        history = sum(len(msgpack.packb(msgpack.unpackb(b, raw=False).get("history", []))) for (b,) in
                      db.execute("SELECT job FROM archive LIMIT 100"))
    finally:
        db.close()
    state = ClusterState()
    state.restore(bytes(data))
    for idx, term, kind, entry in entries:
        if kind == int(EntryKind.NORMAL) and entry:
            try:
                state.apply(commands.decode(bytes(entry)), index=idx, term=term)
            except FloyddError:
                pass
    hot = len(state.snapshot())
    return {"hot_bytes": hot, "hot_jobs": len(state.jobs), "log_entries": len(entries), "archived": rows,
            "archive_bytes": archive_bytes, "history_sample": history}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_cli(daemon, *args) -> float:
    """Wall seconds of ``floyd ARGS`` as a person runs it: a fresh CLI process, output to a pipe."""
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", *args], env=daemon.env, cwd=daemon.project,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    took = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"floyd {' '.join(args)} failed: {res.stderr.decode()[-500:]}")
    return took


def time_cli(daemon, *args, runs: int = 3) -> float:
    return min(run_cli(daemon, *args) for _ in range(runs))


def spread(xs: list[float]) -> str:
    return f"{min(xs):.3f}/{statistics.median(xs):.3f}/{max(xs):.3f} s"


def status_rounds(big, small, rounds: int) -> tuple[list[float], list[float]]:
    """``floyd status`` on ``big`` (the cluster with the archive) and on ``small`` (the
    baseline: a lone box holding only the real jobs), interleaved round by round, the order
    within a round alternating."""
    ours, base = [], []
    for r in range(rounds):
        if r % 2:
            base.append(run_cli(small, "status"))
            ours.append(run_cli(big, "status"))
        else:
            ours.append(run_cli(big, "status"))
            base.append(run_cli(small, "status"))
    return ours, base


def rich_baseline(daemon) -> tuple[float, float, int]:
    """(ours, rich) seconds to render the same 10,000 rows, in this process."""
    from floydd.cli.jobs import _status_table
    from floydd.answers import decode_jobs
    from floydd.cli.table import render
    jobs = decode_jobs(daemon.client.jobs(limit=10_000))
    headers, rows = _status_table(jobs)
    t0 = time.perf_counter()
    render(headers, rows)
    ours = time.perf_counter() - t0
    from rich import box as rbox
    from rich.console import Console
    from rich.table import Table
    t0 = time.perf_counter()
    table = Table(box=rbox.SIMPLE_HEAD, pad_edge=False)
    for h in headers:
        table.add_column(h, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(file=io.StringIO(), width=160).print(table)
    return ours, time.perf_counter() - t0, len(rows)


def settle(boxes, total: int, keep: int, timeout: float = 600) -> None:
    """Wait until the leader archived down to ``keep`` hot finished jobs on every box."""
    def archived(b) -> int:
        db = sqlite3.connect((b.state / "cluster" / "raft.db").absolute().as_uri() + "?mode=ro", uri=True)
        try:
            return db.execute("SELECT count(*) FROM archive WHERE deleted IS NULL").fetchone()[0]
        finally:
            db.close()

    def done() -> bool:
        return all(archived(b) >= total - keep - 5 for b in boxes)
    wait(done, timeout, "the archive to catch up")


def report(label: str, boxes, phase_jobs: int, rate: float, lone, rounds: int, args_real: int,
           restart: bool = True) -> dict:
    print(f"\n== {label}: {phase_jobs} finished jobs committed ({rate:.0f} jobs/s, 2 commands each)")
    out = {}
    for b in boxes:
        s = state_sizes(b.state / "cluster" / "raft.db")
        rss = rss_mib(b.proc.pid)
        would_be = s["hot_bytes"] + s["archive_bytes"] + s["history_sample"] / 100 * s["archived"]
        print(f"  {b.env['FLOYDD_NODE_NAME']}: hot state {s['hot_bytes'] / 1e6:6.2f} MB ({s['hot_jobs']} jobs, "
              f"{s['log_entries']} log entries since its snapshot); archive {s['archived']} jobs, "
              f"{s['archive_bytes'] / 1e6:.2f} MB; RSS {rss:.0f} MiB; "
              f"hot state had nothing been archived: {would_be / 1e6:.1f} MB")
        out[b.env["FLOYDD_NODE_NAME"]] = (s, rss)
    restarted = []
    for b in boxes if restart else ():  # without what the burst of commits left in the allocator
        b.proc.send_signal(signal.SIGTERM)
        b.proc.wait(timeout=60)
        b.start("--dev-fake-gpus", "2")
        wait(lambda b=b: _lists(b), 60, "the box to answer listings again")
        restarted.append(rss_mib(b.proc.pid))
    if restart:
        print("  RSS after a restart (and a listing of 20): " + ", ".join(f"{r:.0f} MiB" for r in restarted))
    out["restarted"] = restarted
    d = boxes[0]
    load = os.getloadavg()[0]
    ours, base = status_rounds(d, lone, rounds)
    status = statistics.median(ours)
    print(f"  floyd status (20 newest, {rounds} rounds, min/median/max): {spread(ours)} (target < 0.5 s) vs "
          f"{spread(base)} on a lone box holding {args_real} jobs, same rounds interleaved: "
          f"x{status / statistics.median(base):.2f} median (load {load:.1f})")
    many = time_cli(d, "status", "--all", "--limit", "10000")
    every = time_cli(d, "status", "--all", runs=1)
    as_json = time_cli(d, "status", "--all", "--json", runs=1)
    print(f"  floyd status --all --limit 10000: {many:.2f} s (best of 3, target < 1); --all: {every:.2f} s, "
          f"--all --json {as_json:.2f} s (one run each)")
    out["status"] = (status, many, every)
    return out


def _lists(b) -> bool:
    try:
        return bool(b.client.jobs(limit=20))
    except FloyddError:
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--phases", default="2000,10000", help="cumulative job counts (issue 12 ran 2000,20000)")
    ap.add_argument("--real", type=int, default=None, help="real jobs run first through the API (default 10; "
                    "smoke 2)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of floyd status and its baseline (default 9; "
                    "smoke 3)")
    args = ap.parse_args(argv)
    phases = [SMOKE_JOBS] if args.smoke else [int(p) for p in args.phases.split(",")]
    keep = 1000 if not args.smoke else SMOKE_KEEP
    args.real = args.real if args.real is not None else (2 if args.smoke else 10)
    args.rounds = args.rounds if args.rounds is not None else (3 if args.smoke else 9)
    with tempfile.TemporaryDirectory(prefix="floydd-archive-") as tmp:
        tmp = Path(tmp)
        os.environ["FLOYDD_ARCHIVE_KEEP"] = str(keep)
        if args.smoke:      # archive each job 2 s after it ends, looking every 0.5 s (not every 10 s)
            os.environ["FLOYDD_ARCHIVE_AFTER"] = "2"
        began = time.monotonic()
        lone = box(tmp, "lone", cluster=False)
        lone.env["FLOYDD_LOG_LEVEL"] = "warning"
        lone.start()
        boxes, fourth = [], None
        try:
            form(tmp, 3, boxes)
            print(f"3 boxes formed in {time.monotonic() - began:.1f} s")
            for b in boxes:
                b.env["FLOYDD_ARCHIVE_KEEP"] = str(keep)
            first = boxes[0]
            (first.project / "train.py").write_text("print('hi')\n")
            real = [first.client.submit({"project": "bench", "command": "true", "code_path": str(first.project)})["id"]
                    for _ in range(args.real)]
            for key in real:
                first.client.wait(key, timeout=120)
            lone.floyd("init", "bench")
            body = {"project": "bench", "command": "true", "code_path": str(lone.project)}
            for key in [lone.client.submit(body)["id"] for _ in range(args.real)]:
                lone.client.wait(key, timeout=120)
            identity = member_identity(boxes[1])
            done, results = len(real), []
            for total in phases:
                lead = leader(boxes)
                rate = asyncio.run(commit_jobs(identity, lead, total - done))
                done = total
                settle(boxes, done, keep)
                results.append(report(f"{done} jobs", boxes, done, rate, lone, args.rounds, len(real),
                                      restart=not args.smoke))
            ours, old, n = rich_baseline(first)
            print(f"\nrendering {n} rows: ours {ours * 1000:.0f} ms, rich (before) {old * 1000:.0f} ms "
                  f"({old / ours:.0f}x)")
            if len(results) > 1:
                for name in results[0]:
                    if name.startswith("box"):
                        (a, ra), (b, rb) = results[0][name], results[-1][name]
                        print(f"{name}: hot state x{b['hot_bytes'] / a['hot_bytes']:.2f}, RSS x{rb / ra:.2f} "
                              f"from {phases[0]} to {phases[-1]} jobs (target: flat)")
                rs = [r["restarted"] for r in results]
                print("RSS after a restart, per box: " + ", ".join(f"x{b / a:.2f}" for a, b in zip(rs[0], rs[-1])))
            fourth = box(tmp, "box4")
            fourth.env["FLOYDD_ARCHIVE_KEEP"] = str(keep)
            fourth.env["FLOYDD_LOG_LEVEL"] = "warning"
            newest = first.client.jobs(limit=1)[0]["id"]
            oldest = real[0] if real else "bench/1"
            sizes = state_sizes(first.state / "cluster" / "raft.db")
            started = join(first, fourth)

            def up_to_date() -> bool:
                try:
                    listed = fourth.client.jobs(stale=True, limit=1)
                    old = fourth.client._call("GET", f"/v1/jobs/{oldest}", query={"stale": "1"})
                    return bool(listed) and listed[0]["id"] == newest and old["id"] == oldest
                except FloyddError:
                    return False
            wait(up_to_date, 300, "the fourth box to be up to date")
            took = time.monotonic() - started
            (snap_bytes,) = sqlite3.connect((first.state / "cluster" / "raft.db").as_uri() + "?mode=ro",
                                            uri=True).execute("SELECT length(data) FROM raft_snapshot").fetchone()
            print(f"\na fresh box joins after {done} jobs: up to date {took:.1f} s after its daemon started "
                  f"(target < 10 s); the snapshot it is sent: {snap_bytes / 1e6:.2f} MB of hot state + "
                  f"{sizes['archive_bytes'] / 1e6:.1f} MB of archive ({sizes['archived']} jobs) in chunks; "
                  f"RSS {rss_mib(fourth.proc.pid):.0f} MiB")
            listed = fourth.client.jobs(stale=True)
            print(f"  its own listing: {len(listed)} jobs (expected {done})")
            print(f"the bench took {time.monotonic() - began:.0f} s")
        finally:
            stop(lone, *boxes, *([fourth] if fourth and fourth.proc else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
