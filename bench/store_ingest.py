#!/usr/bin/env python3
"""Store ingest benchmark: our snapshot/restore/verify against cp -r and restic, same run.

    python bench/store_ingest.py               # ~1 GiB mixed tree (a few minutes)
    python bench/store_ingest.py --size-mb 256
    python bench/store_ingest.py --smoke       # everything tiny, a few seconds (CI)

Builds a mixed tree (a few large random files + ~10k small files) in a temp folder on the
disk of --dir, then measures, in this order: --rounds rounds of cp -r, cp -r && sync (a
durable copy), restic's first backup into a fresh repository and its second (unchanged),
``floyd data upload`` (the CLI against a fresh real daemon, started before the clock runs)
and the same upload again (unchanged), and our first ingest in process into a fresh store,
back to back (ratios are per round: the box is shared and its load moves); then our
in-process re-ingest, restore vs cp -r, verify throughput, a 1-byte
change in the middle of a 500 MiB file (new chunks stored), the fsync policies, and the
chunker alternatives. Every timing shows wall time, CPU time (user+sys of this process
and the children it waited for) and the load average.
All runs are warm-cache: the source was just written and sits in the page cache for
every contender (dropping caches needs root and is not reliable here); an untimed
``sync`` before each timed run keeps one contender's dirty data out of the next one's time.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._scratch import scratch  # noqa: E402
from bench._store_probes import (aead_threads_scaling, chunker_comparison, dir_fsyncs,  # noqa: E402
                                 openssl_aes_gcm_mbps)
from floydd.store import LocalBackend, Store  # noqa: E402
from floydd.store.cache import RACY_NS  # noqa: E402

MiB = 1 << 20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the mixed tree (default 1024)")
    ap.add_argument("--small-files", type=int, default=10_000, help="number of small files (default 10000)")
    ap.add_argument("--change-mb", type=int, default=500, help="size of the 1-byte-change file (default 500)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    ap.add_argument("--dir", default=None, help="where to make the temp folder (default: system temp)")
    ap.add_argument("--skip-restic", action="store_true")
    ap.add_argument("--rounds", type=int, default=3,
                    help="times cp -r, cp -r && sync, restic and our first ingest are each run, "
                         "back to back per round (default 3)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    args = ap.parse_args()
    if args.smoke:
        args.size_mb, args.small_files, args.change_mb, args.rounds = 24, 300, 16, 1
    args.rounds = max(1, args.rounds)

    with scratch("floydd-bench-", args.dir, keep=args.keep) as base:
        return run(args, base)


def run(args, base: Path) -> int:
    rnd = random.Random(42)
    src = base / "src"
    t = time.perf_counter()
    size = build_tree(src, args.size_mb * MiB, args.small_files, rnd)
    print(f"tree: {size / MiB:.0f} MiB, {args.small_files} small files + large files, built in "
          f"{time.perf_counter() - t:.1f}s under {base} (warm page cache for every run below)")
    mb = size / 1e6
    rows: list[tuple[str, str]] = []

    def row(name: str, value: str) -> None:
        rows.append((name, value))
        print(f"  {name:<44} {value}", flush=True)

    # -- first ingest against cp -r and restic, in rounds ------------------------------
    # The box is shared: its load moves within seconds, so every round times all four
    # contenders back to back and the ratios are taken per round (median reported).
    wait_out_racy_window(src)  # (for the re-ingest: the metadata cache skips newer files)
    restic = shutil.which("restic") if not args.skip_restic else None
    env = {**os.environ, "RESTIC_PASSWORD": "bench", "RESTIC_REPOSITORY": str(base / "restic-repo"),
           "RESTIC_CACHE_DIR": str(base / "restic-cache")}
    backup = [restic, "backup", "-q", str(src)] if restic else []
    cps, cpss, r1s, r2s, o1s, u1s, u2s = [], [], [], [], [], [], []
    store = res1 = None
    for k in range(args.rounds):
        last = k == args.rounds - 1
        cps.append(timed(lambda: subprocess.run(["cp", "-r", str(src), str(base / "cp1")], check=True)))
        shutil.rmtree(base / "cp1")
        cpss.append(timed(lambda: subprocess.run(["sh", "-c", f"cp -r '{src}' '{base / 'cp2'}' && sync"],
                                                  check=True)))
        shutil.rmtree(base / "cp2")
        if restic:
            subprocess.run([restic, "init", "-q"], env=env, check=True, capture_output=True)
            r1s.append(timed(lambda: subprocess.run(backup, env=env, check=True, capture_output=True)))
            r2s.append(timed(lambda: subprocess.run(backup, env=env, check=True, capture_output=True)))
            shutil.rmtree(base / "restic-repo")
            shutil.rmtree(base / "restic-cache", ignore_errors=True)
        u1, u2 = upload_twice(src, base / "daemon")        # what a person runs: floyd data upload
        u1s.append(u1)
        u2s.append(u2)
        store = Store.open(base / "store")
        first = [None]
        o1s.append(timed(lambda: first.__setitem__(0, store.snapshot_report(src))))
        res1 = first[0]
        if not last:
            store.close()
            shutil.rmtree(base / "store")
    cp, cps_, o1, u1, u2 = median(cps), median(cpss), median(o1s), median(u1s), median(u2s)
    r1 = median(r1s) if r1s else None
    row(f"cp -r (median of {args.rounds})", f"{cp.show(mb)}{walls(cps)}")
    row("cp -r && sync (durable copy)", f"{cps_.show(mb)}{walls(cpss)}")
    if r1:
        row("restic backup (first)", f"{r1.show(mb)}{walls(r1s)}")
        row("restic backup (second, unchanged)", f"{median(r2s).show()}{walls(r2s)}")
    else:
        row("restic", "not run (missing or --skip-restic)")
    row("floyd data upload (a fresh daemon)", f"{u1.show(mb)}{walls(u1s)}")
    row("floyd data upload again (unchanged)", f"{u2.show()}{walls(u2s)}")
    row("floydd first ingest (in process)", f"{o1.show(mb)}{walls(o1s)}  {res1.stats.written_objects} objects")
    second = [None]
    o2 = timed(lambda: second.__setitem__(0, store.snapshot_report(src)))
    res2 = second[0]
    assert res2.tree == res1.tree, "re-ingest of unchanged data must give the same tree"
    row("floydd re-ingest (unchanged, in process)", f"{o2.show()}  {res2.cache_hits} files from the metadata "
        f"cache, {res2.stats.written_objects} new objects")
    subprocess.run(["cp", "-r", str(src), str(base / "cp1")], check=True)  # restore's baseline is cp -r

    rs = timed(lambda: store.restore(res1.tree, base / "restored"))
    row("floydd restore", rs.show(mb))
    same = subprocess.run(["diff", "-r", "-q", str(src), str(base / "restored")], capture_output=True)
    row("restore byte-identical (diff -r)", "yes" if same.returncode == 0 else "NO: " + same.stdout.decode()[:200])
    shutil.rmtree(base / "restored")
    shutil.rmtree(base / "cp1")

    vr = [None]
    v = timed(lambda: vr.__setitem__(0, store.verify()))
    row("floydd verify (reads the disk, bypasses cache)", f"{v.show(vr[0].checked_bytes / 1e6)}  ok={vr[0].ok}")

    aes = openssl_aes_gcm_mbps()
    gil = aead_threads_scaling()
    cores = len(os.sched_getaffinity(0))
    # -- ratios ------------------------------------------------------------------------
    print(f"ratios (median of the {args.rounds} per-round ratios; CPU = user+sys of the process and "
          "the children it waited for, all threads)")
    row("upload speed / (cp -r && sync) speed (>= 0.8)", ratio(cpss, u1s))
    row("upload speed / cp -r speed", ratio(cps, u1s))
    if r1:
        row("upload speed / restic first backup (>= 3)", ratio(r1s, u1s))
        row("re-upload speed / restic second (>= 1)", ratio(r2s, u2s))
    row("in-process ingest speed / (cp -r && sync) speed", ratio(cpss, o1s))
    row("in-process ingest speed / cp -r speed", ratio(cps, o1s))
    row("restore speed / cp -r speed", f"{cp.wall / rs.wall:.2f}x")
    row("CPU ms per MB: ingest | restic | cp -r", f"{o1.cpu_ms(mb):.2f} | "
        f"{r1.cpu_ms(mb) if r1 else float('nan'):.2f} | {cp.cpu_ms(mb):.2f}")
    row(f"ingest CPU / {cores} cores (its floor here)", f"{o1.cpu / cores:.2f}s = {cp.wall / (o1.cpu / cores):.2f}x cp -r; "
        f"it used {o1.cpu / o1.wall:.2f} cores")
    row("AES-GCM on 2 threads (1.0: holds the GIL)", gil)
    if aes:
        row("ingest / openssl aes-256-gcm (1 core)", f"{mb / o1.wall / aes:.2f}  (openssl: {aes:.0f} MB/s)")
    store.close()
    shutil.rmtree(base / "store")

    # -- 1-byte change -----------------------------------------------------------------
    print(f"1-byte change in the middle of a {args.change_mb} MiB file")
    one = base / "one"
    one.mkdir()
    big = one / "big.bin"
    write_random(big, args.change_mb * MiB, rnd)
    s1 = Store.open(base / "store1")
    a = s1.snapshot_report(one)
    with open(big, "r+b") as f:
        f.seek(args.change_mb * MiB // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    b = s1.snapshot_report(one)
    row("chunks in the file", f"{a.stats.written_objects - 1}")
    row("new chunks stored after the change (<= 3)", f"{b.stats.written_objects - 1}")
    s1.close()
    shutil.rmtree(base / "store1")
    shutil.rmtree(one)

    # -- fsync policies --------------------------------------------------------------
    print("fsync policy (fresh stores, whole tree; default: object)")
    for sync in ("object", "batch"):
        s = Store.open(base / f"store-{sync}", backend=LocalBackend(base / f"store-{sync}" / "objects", sync=sync))
        res = [None]
        t_s = timed(lambda: res.__setitem__(0, s.snapshot_report(src)))
        row(f"sync={sync}", f"{t_s.show(mb)}  {res[0].files} files in {res[0].stats.written_objects} objects")
        s.close()
        shutil.rmtree(base / f"store-{sync}")

    # -- the commit's folder fsyncs ---------------------------------------------------
    print("a commit's 256 fan-out folders made durable (each with a fresh rename), ms")
    row("one after another | 8 at a time (now)", dir_fsyncs(base / "dirs", rounds=3 if args.smoke else 7))

    # -- chunkers ----------------------------------------------------------------------
    print("chunkers (one core, in memory)")
    for name, value in chunker_comparison(8 if args.smoke else 64):
        row(name, value)
    return 0


# -- the tree ---------------------------------------------------------------------------

def build_tree(root: Path, total: int, small_files: int, rnd: random.Random) -> int:
    small_dir = root / "small"
    written = 0
    per_dir = 100
    for i in range(small_files):
        d = small_dir / f"d{i // per_dir:03d}"
        if i % per_dir == 0:
            d.mkdir(parents=True)
        n = int(rnd.expovariate(1 / 10_000)) + 1
        (d / f"file{i:05d}.txt").write_bytes(rnd.randbytes(min(n, 200_000)))
        written += min(n, 200_000)
    (root / "large").mkdir(parents=True)
    left = max(total - written, 4 * MiB)
    parts = 4
    for i in range(parts):
        n = left // parts
        write_random(root / "large" / f"blob{i}.bin", n, rnd)
        written += n
    (root / "empty-folder").mkdir()
    return written


def write_random(path: Path, size: int, rnd: random.Random) -> None:
    """Incompressible, non-repeating bytes (AES-CTR keystream: GB/s, unlike os.urandom)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    stream = Cipher(algorithms.AES(rnd.randbytes(32)), modes.CTR(rnd.randbytes(16))).encryptor()
    zeros = bytes(8 * MiB)
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, len(zeros))
            f.write(stream.update(zeros[:n]))
            left -= n


def wait_out_racy_window(src: Path) -> None:
    """The metadata cache ignores files changed in the last RACY_NS (see floydd/store/cache.py)."""
    newest = max(os.lstat(p).st_ctime_ns for p in src.rglob("*"))
    wait = (newest + RACY_NS - time.time_ns()) / 1e9
    if wait > 0:
        time.sleep(wait + 0.05)


# -- measurements ------------------------------------------------------------------------

@dataclass(frozen=True)
class Timing:
    wall: float   # seconds
    cpu: float    # user + sys seconds of this process (all threads) and of the children it waited for
    load: float   # 1-minute load average when the run ended (the box is shared)

    def show(self, mb: float | None = None) -> str:
        speed = f"{mb / self.wall:6.0f} MB/s  cpu {self.cpu_ms(mb):5.2f} ms/MB  " if mb else ""
        return f"{self.wall:6.2f}s {speed}(cpu {self.cpu:.2f}s, load {self.load:.2f})"

    def cpu_ms(self, mb: float) -> float:
        return self.cpu / mb * 1000


def median(ts: list[Timing]) -> Timing:
    return sorted(ts, key=lambda t: t.wall)[len(ts) // 2]


def walls(ts: list[Timing]) -> str:
    return "  [" + " ".join(f"{t.wall:.2f}" for t in ts) + "]" if len(ts) > 1 else ""


def ratio(base: list[Timing], ours: list[Timing]) -> str:
    """How many times faster than ``base`` we were, per round: median [each round]."""
    r = sorted(b.wall / o.wall for b, o in zip(base, ours))
    each = " ".join(f"{b.wall / o.wall:.2f}" for b, o in zip(base, ours))
    return f"{r[len(r) // 2]:.2f}x" + (f"  [{each}]" if len(r) > 1 else "")


def upload_twice(src: Path, state: Path) -> tuple[Timing, Timing]:
    """``floyd data upload`` of ``src`` to a fresh daemon (started before the clock runs), then
    the same folder again as the next version (unchanged: reused objects, each proven). CPU is
    the CLI's and the daemon's."""
    import psutil

    from bench._daemon import serve

    shutil.rmtree(state, ignore_errors=True)
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state)}
    out = []
    with serve(state, state.with_name("daemon.log"), "--log-level", "warning") as (_, proc):
        daemon = psutil.Process(proc.pid)
        for n in (1, 2):
            before = sum(daemon.cpu_times()[:2])
            cmd = [sys.executable, "-m", "floydd.cli.floyd", "data", "upload", str(src), "--name", "bench",
                   "-m", f"round {n}", "--json"]
            t = timed(lambda: subprocess.run(cmd, env=env, check=True, capture_output=True))
            out.append(Timing(t.wall, t.cpu + sum(daemon.cpu_times()[:2]) - before, t.load))
    shutil.rmtree(state)
    return out[0], out[1]


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn) -> Timing:
    os.sync()  # untimed: start from no dirty data of earlier runs
    c = _cpu()
    t = time.perf_counter()
    fn()
    wall = time.perf_counter() - t
    return Timing(wall, _cpu() - c, os.getloadavg()[0])


if __name__ == "__main__":
    sys.exit(main())
