#!/usr/bin/env python3
"""Re-key benchmark: re-sealing a whole store under a new secret against cp -r of its objects.

    python bench/store_rekey.py               # ~200 MiB store, 3 rounds (a minute or two)
    python bench/store_rekey.py --size-mb 1024
    python bench/store_rekey.py --smoke       # tiny, a few seconds (CI)

Builds the mixed tree of ``store_ingest.py`` (large random files + small files), uploads it
into a store, and then, per round, on a fresh copy of that store: ``cp -r objects``,
``cp -r objects && sync`` (a re-key is durable, cp is not) and the re-key
(``begin_rekey`` + ``rekey``: every object read, opened, re-hashed, sealed, written, read
back, checked and fsynced, then the old ones removed), back to back; ratios are per round.
Then one more re-key in a child process, for its peak RSS (memory must not grow with the
store). The sealed bytes of the objects folder are the MB of every MB/s.
"""

from __future__ import annotations

import argparse
import random
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._scratch import scratch  # noqa: E402
from floydd.store import Store  # noqa: E402
from floydd.store.keys import rekey  # noqa: E402
from store_ingest import MiB, build_tree, median, ratio, timed, walls  # noqa: E402

# VmHWM, not ru_maxrss: a forked child's ru_maxrss starts at its parent's RSS
CHILD = ("import sys; from pathlib import Path; from floydd.store.keys import rekey; rekey.rekey(Path(sys.argv[1])); "
         "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')))")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=200, help="size of the mixed tree (default 200)")
    ap.add_argument("--small-files", type=int, default=2000, help="number of small files (default 2000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of cp -r / re-key (default 3)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    ap.add_argument("--dir", default=None, help="where to make the temp folder (default: system temp)")
    args = ap.parse_args()
    if args.smoke:
        args.size_mb, args.small_files, args.rounds = 16, 200, 1
    with scratch("floydd-bench-rekey-", args.dir) as base:
        return run(args, base)


def run(args, base: Path) -> int:
    src, pristine = base / "src", base / "pristine"
    build_tree(src, args.size_mb * MiB, args.small_files, random.Random(42))
    with Store.open(pristine) as store:
        version = store.upload(src, "data")
        store.catalog.pin(store.snapshot(src / "small"), "job:bench/1")
    sealed = sum(p.stat().st_size for p in (pristine / "objects").rglob("*") if p.is_file())
    objects = sum(1 for p in (pristine / "objects").rglob("*") if p.is_file())
    mb = sealed / 1e6
    print(f"store: {sealed / MiB:.0f} MiB sealed in {objects} objects "
          f"({version.files} files, {version.size / MiB:.0f} MiB of data); {args.rounds} round(s)")

    cps, syncs, ours = [], [], []
    for i in range(args.rounds):
        work = base / f"work{i}"
        shutil.copytree(pristine, work)
        cps.append(timed(lambda: subprocess.run(["cp", "-r", str(work / "objects"), str(base / f"cp{i}")],
                                                check=True)))
        syncs.append(timed(lambda: subprocess.run(
            ["sh", "-c", f"cp -r '{work / 'objects'}' '{base / f'cps{i}'}' && sync"], check=True)))
        shutil.rmtree(base / f"cp{i}")
        shutil.rmtree(base / f"cps{i}")
        secret = secrets.token_bytes(32)

        def rekey_it() -> None:
            rekey.begin_rekey(work, secret)
            rekey.rekey(work)
        ours.append(timed(rekey_it))
        with Store.open(work) as store:
            assert store.verify().ok
        shutil.rmtree(work)

    rows = [
        ("cp -r objects", median(cps).show(mb) + walls(cps)),
        ("cp -r objects && sync", median(syncs).show(mb) + walls(syncs)),
        ("re-key (durable, verified)", median(ours).show(mb) + walls(ours)),
        ("re-key speed vs cp -r", ratio(cps, ours)),
        ("re-key speed vs cp -r && sync", ratio(syncs, ours)),
    ]
    work = base / "rss"
    shutil.copytree(pristine, work)
    rekey.begin_rekey(work, secrets.token_bytes(32))
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, str(work)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    rows.append(("re-key in a child: wall, peak RSS",
                 f"{time.perf_counter() - t:.2f}s, {int(out.stdout.split()[-1]) / 1024:.0f} MiB "
                 f"(store {sealed / MiB:.0f} MiB)"))
    for name, value in rows:
        print(f"{name:44s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
