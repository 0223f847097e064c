"""Committed, fsynced job submissions per second through the leader of a 3-node control plane.

Three ``python -m floydd.cluster.devnode`` processes on 127.0.0.1 (mTLS, SQLite logs with
``synchronous=FULL``, default timings). A client process holding a certificate of the
same cluster posts ``job.submit`` commands (each with its own idempotency key) to the
leader's ``/cluster/v1/propose``; each is answered only once a quorum has fsynced it and the
leader has applied it. Measured with one client (one submission at a time) and with 32
concurrent clients (the leader batches what arrives during an fsync into the next one).

Baselines, same run, same disk: a 1-node cluster through the same client path (the cost
of replication is the difference), and bare SqliteStorage saving one 300-byte entry per
transaction (one fsync each: a single node's commit rate without batching, HTTP or raft).

    python bench/cluster_throughput.py             # 5 s per load
    python bench/cluster_throughput.py --smoke     # 1 s per load
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from floydd.cluster.raft import ConfState, Entry, HardState  # noqa: E402
from floydd.cluster.raft.sqlite_storage import SqliteStorage  # noqa: E402
from floydd.cluster.net.transport import Transport  # noqa: E402
from floydd.security.identity import NodeIdentity  # noqa: E402
from tests.integration.cluster.procs import DevNode, free_ports, make_identities  # noqa: E402

SPEC = {"command": "python train.py --epochs 10", "resources": {"gpus": 1}, "params": {"lr": "0.01"},
        "code_tree": "ab" * 32, "env": "default"}


async def submissions_per_second(transport: Transport, leader: dict, clients: int, seconds: float) -> float:
    """Commits/s of ``clients`` concurrent submitters; ``leader``: forward_propose's peer= or address=."""
    done = 0
    stop = time.monotonic() + seconds

    async def client() -> None:
        nonlocal done
        while time.monotonic() < stop:
            cmd = {"op": "job.submit", "idem_key": uuid.uuid4().hex, "project": "bench", "spec": SPEC,
                   "ts": time.time()}
            await transport.forward_propose(cmd, 10.0, **leader)
            done += 1

    t0 = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    return done / (time.monotonic() - t0)


def bare_sqlite_commits(path: Path, seconds: float) -> float:
    storage = SqliteStorage.bootstrap(path, ConfState(voters=frozenset({"a"})))
    index, n, t0 = 1, 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        index += 1
        storage.save(HardState(term=1, vote="a", commit=index - 1), [Entry(1, index, b"x" * 300)], None)
        n += 1
    rate = n / (time.monotonic() - t0)
    storage.close()
    return rate


async def run(root: Path, seconds: float, n: int = 3) -> tuple[float, float]:
    folders = make_identities(root, n)
    ports = free_ports(n)
    nodes = [DevNode(tls, root / f"state{i + 1}", f"127.0.0.1:{port}")
             for i, (tls, port) in enumerate(zip(folders[:n], ports))]
    founders = ",".join(f"{n.node_id}={n.listen}" for n in nodes)
    for node in nodes:
        node.start("--founders", founders)
    try:
        lead = await asyncio.to_thread(_serving, nodes)
        # the client speaks as a member (since the trust boundary, issue 21, the leader takes
        # proposals from members only): a follower's certificate, the leader's own when alone
        sender = next((f for f, node in zip(folders, nodes) if node is not lead), folders[0])
        transport = Transport(NodeIdentity.load(sender))
        transport.set_peer(lead.node_id, lead.listen)
        # a transport never dials its own node id: alone, the leader is reached by its address
        target = {"peer": lead.node_id} if n > 1 else {"address": lead.listen}
        try:
            await submissions_per_second(transport, target, 4, 0.5)      # warm connections
            one = await submissions_per_second(transport, target, 1, seconds)
            many = await submissions_per_second(transport, target, 32, seconds)
        finally:
            await transport.close()
    finally:
        for node in nodes:
            node.stop()
    return one, many


def _serving(nodes: list[DevNode]) -> DevNode:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for node in nodes:
            if any(e["event"] == "serving" for e in node.events):
                return node
        time.sleep(0.01)
    raise TimeoutError("no leader")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args(argv)
    seconds = 1.0 if args.smoke else args.seconds
    with tempfile.TemporaryDirectory(prefix="floydd-throughput-") as tmp:
        one, many = asyncio.run(run(Path(tmp) / "three", seconds))
        solo_one, solo_many = asyncio.run(run(Path(tmp) / "one", seconds, n=1))
        bare = bare_sqlite_commits(Path(tmp) / "bare.db", min(seconds, 2.0))
    print(f"committed submissions through the leader of 3 processes (fsync on each, mTLS), {seconds:.0f} s each:")
    print(f"  1 client:   {one:8.0f} /s   ({1000 / one:.1f} ms each)")
    print(f"  32 clients: {many:8.0f} /s   (target >= 500)")
    print(f"baseline, 1-node cluster, same path: 1 client {solo_one:.0f} /s ({1000 / solo_one:.1f} ms), "
          f"32 clients {solo_many:.0f} /s; 3 nodes / 1 node: {one / solo_one:.2f}, {many / solo_many:.2f}")
    print(f"baseline, bare SqliteStorage, one entry per fsynced transaction: {bare:.0f} /s; "
          f"32 clients / bare: {many / bare:.2f}")
    return 0 if many >= 500 or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
