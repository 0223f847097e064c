#!/usr/bin/env python3
"""Export/import of a project of 100 jobs with a 1 GiB dataset, against ``tar | zstd`` of the same files.

    python bench/exchange.py                 # 100 jobs, 1 GiB dataset, 3 rounds (a few minutes)
    python bench/exchange.py --smoke         # 3 jobs, 16 MiB, 1 round (seconds)
    python bench/exchange.py --jobs 20 --size-mb 256 --rounds 2
    python bench/exchange.py --text-share 0.5   # half the dataset CSV text (compresses), half shards

Site A is built in-process (the job pipeline of ``tests/harness/pipeline.py``: a real
control plane, store, catalog and records, a test runtime that runs no processes), so 100
jobs that each mount the dataset cost seconds, not 100 restores of it: the dataset is uploaded
once, then each job is submitted, placed, and ends having written metric points, log lines
and an /output of its own. Then real daemons take over: one on site A's state folder, and for
each round a fresh one for site B (another store secret, a box alone). Timed, back to back
per round (the box is shared, so ratios are per round, median printed):

- ``floyd export bench --to FILE --key-file K`` (the CLI streams the file from the daemon and
  verifies every part's hash, the MAC and the signature as it writes), against
  ``tar -cf - DATASET JOBS records.db | zstd -q -o FILE`` (level 3, one thread) of the same
  files: the dataset folder, site A's job folders (code, output, logs) and its records;
- ``floyd import FILE --key-file K`` into the fresh site B (every record opened, every chunk
  sealed again under B's key, written, read back, checked, fsynced; the jobs committed),
  against ``zstd -d -c FILE | tar -x`` into a fresh folder (no fsync).

Throughput is the same numerator for both: the bytes of those files (``du -b``), over wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from bench._daemon import serve  # noqa: E402
from bench._scratch import scratch  # noqa: E402
from tests.harness.pipeline import Lone  # noqa: E402

MiB = 1 << 20
TRAIN = "import json\nfor i in range(3):\n    print(json.dumps({'metric': 'loss', 'value': 1 / (i + 1)}))\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the dataset (default 1024)")
    ap.add_argument("--text-share", type=float, default=0.0,
                    help="share of the dataset that is CSV text, which compresses (default 0: incompressible "
                         "shards only, as model inputs usually are)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="3 jobs, 16 MiB, one round")
    ap.add_argument("--dir", default=None, help="where to make the temp folder (default: system temp)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.jobs, args.size_mb, args.rounds = 3, 16, 1
    with scratch("floydd-bench-exchange-", args.dir, keep=args.keep) as base:
        return run(args, base)


def run(args, base: Path) -> int:
    t = time.perf_counter()
    site_a = asyncio.run(build_site_a(base, args.jobs, args.size_mb, args.text_share))
    print(f"site A: {args.jobs} jobs mounting a {args.size_mb} MiB dataset ({args.text_share:.0%} text), built in {time.perf_counter() - t:.1f}s "
          f"under {base}")
    files = [base / "data", site_a / "jobs", site_a / "records.db"]
    payload = sum(_du(f) for f in files)
    mb = payload / 1e6
    print(f"the same files for tar: {payload / MiB:.0f} MiB (dataset, {args.jobs} job folders, records.db)")
    env = {**os.environ, "FLOYDD_LOG_LEVEL": "warning"}
    env.pop("FLOYD_HOST", None)
    key = base / "export.key"
    ours_out, ours_in, tar_out, tar_in = [], [], [], []
    sizes = {}
    with _site(site_a, base / "a.log", env) as (env_a, a):
        for k in range(args.rounds):
            export = base / "bench.floydx"
            export.unlink(missing_ok=True)
            _sync()
            ours_out.append(_timed(["floyd", "export", "bench", "--to", str(export), "--key-file", str(key)], env_a,
                                   (a,)))
            sizes["export"] = export.stat().st_size
            _sync()
            archive = base / "bench.tar.zst"
            archive.unlink(missing_ok=True)
            tar = f"tar -cf - -C '{base}' data -C '{site_a}' jobs records.db | zstd -q -o '{archive}'"
            tar_out.append(_timed(["sh", "-c", tar], env))
            sizes["tar"] = archive.stat().st_size
            site_b = base / f"site-b-{k}"
            with _site(site_b, base / f"b-{k}.log", env) as (env_b, b):
                _sync()
                ours_in.append(_timed(["floyd", "import", str(export), "--key-file", str(key), "--json"], env_b,
                                      (b,)))
                if k == 0:
                    _check(env_b, args.jobs, base)
            shutil.rmtree(site_b, ignore_errors=True)
            untar = base / "untar"
            shutil.rmtree(untar, ignore_errors=True)
            untar.mkdir()
            _sync()
            tar_in.append(_timed(["sh", "-c", f"zstd -d -q -c '{archive}' | tar -x -C '{untar}'"], env))
            shutil.rmtree(untar)
            print(f"  round {k + 1}: export {ours_out[-1][0]:.2f}s vs tar|zstd {tar_out[-1][0]:.2f}s, "
                  f"import {ours_in[-1][0]:.2f}s vs zstd -d|tar x {tar_in[-1][0]:.2f}s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    print()
    print(f"{'':<38}{'wall':>9}{'MB/s':>9}{'CPU s':>8}  vs baseline (per round, median; CPU: all processes)")
    for name, ours, theirs, label in (("floyd export (CLI, verified)", ours_out, tar_out, "tar | zstd"),
                                      ("floyd import (CLI, into a new site)", ours_in, tar_in, "zstd -d | tar x")):
        wall, cpu = statistics.median(w for w, _ in ours), statistics.median(c for _, c in ours)
        base_wall = statistics.median(w for w, _ in theirs)
        ratios = [tw / ow for (ow, _), (tw, _) in zip(ours, theirs)]
        print(f"  {name:<36}{wall:>8.2f}s{mb / wall:>9.0f}{cpu:>8.1f}  {statistics.median(ratios):.2f}x the speed "
              f"of {label} ({', '.join(f'{r:.2f}' for r in ratios)})")
        print(f"  {label:<36}{base_wall:>8.2f}s{mb / base_wall:>9.0f}"
              f"{statistics.median(c for _, c in theirs):>8.1f}")
    print(f"  file sizes: export {sizes['export'] / MiB:.0f} MiB (sealed; zstd inside where it pays: logs, metrics, text), "
          f"tar.zst {sizes['tar'] / MiB:.0f} MiB")
    return 0


async def build_site_a(base: Path, jobs: int, size_mb: int, text_share: float = 0.0) -> Path:
    rnd = random.Random(7)
    data = base / "data"
    data.mkdir()
    text = int(size_mb * MiB * text_share)
    for k in range(0, text, 64 * MiB):         # tables: numbers as text, as a CSV export writes them
        rows, n = [], 0
        while n < min(64 * MiB, text - k):
            row = f"{rnd.randrange(10**6)},{rnd.random():.6f},{rnd.choice(('cat', 'dog', 'bird'))},{rnd.gauss(0, 1):.4f}\n"
            rows.append(row)
            n += len(row)
        (data / f"table-{k // (64 * MiB):03d}.csv").write_text("".join(rows))
    left, i = size_mb * MiB - text, 0
    while left > 0:                           # large incompressible files, as model inputs are
        n = min(left, 64 * MiB)
        (data / f"shard-{i:03d}.bin").write_bytes(rnd.randbytes(n))
        left, i = left - n, i + 1
    for j in range(200):
        (data / f"label-{j:03d}.txt").write_text(f"{j} {rnd.random()}\n")
    lone = Lone(base / "a")
    box = await lone.start()
    try:
        version = await asyncio.to_thread(box.store.upload, data, "mnist")
        await box.datasets.register("mnist", str(version.tree), size=version.size, files=version.files, user="bench")
        (box.project / "train.py").write_text(TRAIN)
        for n in range(1, jobs + 1):
            await box.run("python train.py", project="bench", data=("mnist:/input",), params={"lr": f"{0.1 / n:.5f}"})
            await lone.wait_for(lambda: ("bench", n) in box.runtime.held, what=f"bench/{n} to run")
            await asyncio.to_thread(_fill, box, n, rnd)
            box.runtime.finish(("bench", n), "success")
            await lone.ended(box, f"bench/{n}")
    finally:
        await lone.close()
    return base / "a" / "box"


def _fill(box, n: int, rnd: random.Random) -> None:
    """What a training run leaves: 500 metric points, 64 KiB of log, a 1 MiB /output."""
    now = time.time()
    box.records.add_metrics("bench", n, [("loss", 1 / (i + 1), i, now + i) for i in range(400)]
                            + [("accuracy", i / 100, i, now + i) for i in range(100)])
    ws = box.runtime.jobs_dir / "bench" / str(n)
    with open(ws / "job.log", "a") as log:
        log.write("".join(f"{now + i:.3f} o epoch {i} loss {1 / (i + 1):.6f} " + "x" * 40 + "\n" for i in range(1000)))
    (ws / "output").mkdir()
    (ws / "output" / "model.bin").write_bytes(rnd.randbytes(MiB))
    version = box.store.upload(ws / "output", f"bench/{n}/output")
    box.records.update_job("bench", n, output_version=version.ref)


@contextlib.contextmanager
def _site(state: Path, log: Path, env: dict) -> Iterator[tuple[dict, subprocess.Popen]]:
    """A real daemon on the site ``state``, and the CLI's environment for it."""
    env = {**env, "FLOYDD_STATE_DIR": str(state)}
    with serve(state, log, "--dev-fake-gpus", "0", env=env, timeout=60) as (_client, proc):
        yield env, proc


def _check(env: dict, jobs: int, base: Path) -> None:
    """Site B holds every job, and an output as it was."""
    listed = json.loads(subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "data", "ls", "--json"],
                                       env=env, capture_output=True, text=True, check=True).stdout)
    outputs = [v for v in listed if v["name"].endswith("/output")]
    assert len(outputs) == jobs, f"site B has {len(outputs)} job outputs, not {jobs}"
    dest = base / "check-out"
    subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "data", "clone", outputs[0]["ref"], str(dest)],
                   env=env, capture_output=True, check=True)
    assert (dest / "model.bin").stat().st_size == MiB
    shutil.rmtree(dest)


def _timed(cmd: list[str], env: dict, daemons: tuple = ()) -> tuple[float, float]:
    """(wall, CPU seconds of the command and its children, and of the ``daemons`` serving it)."""
    if cmd[0] == "floyd":
        cmd = [sys.executable, "-m", "floydd.cli.floyd", *cmd[1:]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    served = sum(_cpu_of(d) for d in daemons)
    t = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    served = sum(_cpu_of(d) for d in daemons) - served
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) + served


def _cpu_of(daemon: subprocess.Popen) -> float:
    times = psutil.Process(daemon.pid).cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _sync() -> None:
    subprocess.run(["sync"], check=True)


if __name__ == "__main__":
    sys.exit(main())
