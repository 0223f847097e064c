"""Copies go where they can live (issue 21): time from a copy failing for lack of space to a
healthy second copy on another box, vs a normal second copy in the same run.

Three in-process boxes (real ``ClusterService`` nodes over mTLS on loopback, real raft, real
stores, each with its store watch: :class:`floydd.runtime.disk.StoreWatch`) with the daemon's
default heartbeat (``--heartbeat``, 5 s: the failure is said in a heartbeat sent at once, not
at the next one). Run as root, the stores of box-b and box-c are small tmpfs disks; the box
chosen for a full round's second copy has its disk filled to a few MB (less than the version,
more than "full" by the reserve's measure), so its copy really fails with ENOSPC part-way.
Without root the chosen store refuses every write as the local backend does on ENOSPC
(``StoreFull``), said in the output. Rounds interleave:

- **normal**: a version of ``--mb`` MB of random bytes registered on box-a; from the register
  call's answer to the second holder committed (box-a's state): the fetch and a commit;
- **full**: the same for a version whose chosen box is full; timed from the register answer
  and from the failed write (the watch's ``failed``) to a second holder committed on the
  third box. Then the disk is emptied and the next round waits until the box says ``ok``.

    python bench/copy_placement.py [--rounds 3] [--mb 16] [--heartbeat 5] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from floydd.scheduler import storehealth  # noqa: E402
from floydd.cluster.config import TEST_CONFIG  # noqa: E402
from floydd.cluster.replication.replicas import choose_replicas  # noqa: E402
from floydd.errors import StoreFull  # noqa: E402
from floydd.runtime.disk import StoreWatch, reserve_size  # noqa: E402
from floydd.store import Store  # noqa: E402
from tests.integration.cluster.test_cluster_datasets import DataCluster, _holders  # noqa: E402

TARGET = 30.0
MB = 1_000_000


class Boxes(DataCluster):
    """The harness's data cluster whose box-b and box-c stores are tmpfs disks (as root)."""

    def __init__(self, root: Path, heartbeat: float, disk_mb: int) -> None:
        super().__init__(root)
        self.config = replace(TEST_CONFIG, heartbeat_interval=heartbeat, stale_after=4 * heartbeat)
        self.disk_mb, self.mounts = disk_mb, []

    def store(self, node):
        folder = node.folder / "disk" / "store"
        if node.name not in self.stores and self.stores and os.geteuid() == 0:
            folder.parent.mkdir(parents=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m,mode=0700", "tmpfs",
                            str(folder.parent)], check=True)
            self.mounts.append(folder.parent)
            folder.mkdir(mode=0o700)
            shutil.copy(next(iter(self.stores.values())).root / "key", folder / "key")
            self.stores[node.name] = Store.open(folder)
        return super().store(node)

    def unmount(self) -> None:
        for folder in self.mounts:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


async def watched(c: Boxes, node) -> StoreWatch:
    watch = StoreWatch([c.store(node).root])
    node.service.upkeep.usage = lambda: {"store": watch.report()}
    failed = watch.failed

    def noted(exc):
        hit = failed(exc)
        if hit and not hasattr(watch, "failed_at"):
            watch.failed_at = time.monotonic()
        return hit
    watch.failed = noted
    await c.attach(node, store_watch=watch)
    return watch


def fill(root: Path, leave: int) -> Path:
    """Write a file on ``root``'s disk until ``leave`` bytes are free."""
    st = os.statvfs(root)
    filler = root / "filler"
    with open(filler, "wb", buffering=0) as f:
        left = st.f_bavail * st.f_frsize - leave
        block = b"\0" * (1 << 20)
        while left > 0:
            left -= f.write(block[:left])
    return filler


async def one(c: Boxes, a, name: str, mb: float, watches: dict, full: bool) -> dict:
    src = c.bench_dir / name
    src.mkdir()
    (src / "blob.bin").write_bytes(os.urandom(int(mb * MB)))
    snap = await asyncio.to_thread(c.store(a).snapshot_report, src)
    tree = str(snap.tree)
    chosen = choose_replicas(a.service.state.nodes, {"holders": [a.id], "tree": tree}, 2,
                             c.datasets[a.name].liveness())
    box = next(n for n in c.nodes if n.id == chosen[0])
    watch, undo = watches[box.name], None
    for attr in ("failed_at",):
        watch.__dict__.pop(attr, None)
    if full:
        store = c.store(box)
        if store.root.parent in c.mounts:
            total = os.statvfs(store.root).f_blocks * os.statvfs(store.root).f_frsize
            leave = int(3.5 * reserve_size(total))          # not "full" by the reserve's measure
            assert mb * MB > 2 * leave, \
                f"a {mb:g} MB version fits in the {leave} bytes left: use fewer --rounds or a larger --mb"
            filler = fill(store.root.parent, leave)
            undo = filler.unlink
        else:
            def refuse(oid, data):
                raise StoreFull(f"no space left on the device of {store.root} while writing object {oid.short}")
            store.save_sealed, undo = refuse, lambda: store.__dict__.pop("save_sealed", None)
    began = time.monotonic()
    await c.datasets[a.name].register(name, tree, size=snap.size, files=snap.files, idem_key=name)
    answered = time.monotonic()
    await c.wait_for(lambda: len(_holders(a, name)) == 2, timeout=120, what=f"{name}: two copies")
    done = time.monotonic()
    row = {"from_upload": done - answered, "register": answered - began, "full": full,
           "on": next(n.name for n in c.nodes if n.id in _holders(a, name) and n is not a)}
    if full:
        assert box.id not in _holders(a, name), f"{name}: the full box holds it"
        row["from_failure"] = done - watch.failed_at
        row["said"] = storehealth.why(a.service.state.nodes[box.id])
        undo()
        await c.wait_for(lambda: not storehealth.trouble(a.service.state.nodes[box.id]), timeout=60,
                         what=f"{box.name} well again")
    return row


async def run(args) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="floydd-bench-copies-") as tmp:
        disk = int(24 + 1.3 * args.mb * args.rounds)
        c = Boxes(Path(tmp), args.heartbeat, disk)
        c.bench_dir = Path(tmp)
        try:
            nodes = await c.start(3)
            watches = {n.name: await watched(c, n) for n in nodes}
            how = "tmpfs disks of %d MB (real ENOSPC)" % disk if c.mounts else "writes refused (not root)"
            print(f"copy_placement: 3 in-process boxes, heartbeat {args.heartbeat:g} s, {args.mb:g} MB versions, "
                  f"{args.rounds} rounds; full box: {how}")
            rows = []
            for i in range(args.rounds):
                rows.append(await one(c, nodes[0], f"normal{i}", args.mb, watches, full=False))
                rows.append(await one(c, nodes[0], f"full{i}", args.mb, watches, full=True))
                r = rows[-1]
                print(f"round {i}: normal {rows[-2]['from_upload']:.2f} s; full: {r['from_upload']:.2f} s from the "
                      f"upload, {r['from_failure']:.2f} s from the failed write, on {r['on']} ({r['said']})")
            return rows
        finally:
            for ds in list(c.datasets.values()):
                await ds.close()
            c.datasets.clear()
            await c.close()
            c.unmount()


def spread(xs: list[float]) -> str:
    return f"min {min(xs):.2f} / median {statistics.median(xs):.2f} / max {max(xs):.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds (the tmpfs disks grow with them; past 4 rounds use a larger --mb)")
    ap.add_argument("--mb", type=float, default=16.0)
    ap.add_argument("--heartbeat", type=float, default=5.0)
    ap.add_argument("--smoke", action="store_true", help="1 round, 8 MB versions")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.mb = 1, 8.0
    logging.basicConfig(level=logging.ERROR)
    rows = asyncio.run(run(args))
    normal = [r["from_upload"] for r in rows if not r["full"]]
    full = [r["from_upload"] for r in rows if r["full"]]
    failure = [r["from_failure"] for r in rows if r["full"]]
    print(f"normal second copy, from the upload's answer:   {spread(normal)}")
    print(f"full box, from the upload's answer:            {spread(full)}")
    print(f"full box, from the failed write to a copy:      {spread(failure)}")
    ratio = statistics.median(full) / statistics.median(normal)
    print(f"ratio full / normal (medians): {ratio:.2f}x")
    ok = max(failure) < TARGET
    print(f"second copy elsewhere < {TARGET:g} s after the failed write: {'yes' if ok else 'no'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
