"""How long until a fresh node is listed by every peer, on a namespace LAN with real mDNS.

N hosts on one bridge (tests/netns); hosts 1..N-1 run a discovery node each. Each round a
fresh node (a new node id) is spawned in host N, and we time from its spawn until every
peer prints a peer list holding it ("listed by all"); also from its ``starting`` line (what
discovery itself costs, without Python's start-up) and how long until every peer drops it
once it stops (its goodbye). Same-run baseline: spawning a bare Python process in host N
that multicasts one datagram and waits for every other host to answer (what any discovery
must pay: a process start plus a multicast round trip), and the ping RTT between two hosts.
Needs root (network namespaces).

    python bench/netns_discovery.py [--hosts 4] [--rounds 10] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.netns.discovery_node import DiscoveryNode  # noqa: E402
from tests.netns.network import TestNetwork, netns_unavailable_reason  # noqa: E402

QUERY, EXPIRE = 1.0, 3.0


def baseline(net: TestNetwork, rounds: int) -> list[float]:
    """Spawn-to-all-answered of a bare multicast round trip from the last host."""
    last = net.hosts[-1]
    echoes = [h.popen([sys.executable, "-m", "tests.netns._probe", "mcast-echo", "--iface", h.ip],
                      stdout=subprocess.PIPE, text=True) for h in net.hosts[:-1]]
    for echo in echoes:
        json.loads(echo.stdout.readline())
    out = []
    for _ in range(rounds):
        t0 = time.monotonic()
        res = last.python("-m", "tests.netns._probe", "mcast-rtt", "--iface", last.ip,
                          "--expect", str(len(echoes)), "--timeout", "10")
        answer = json.loads(res.stdout)
        assert len(answer["replies"]) == len(echoes), answer
        out.append(answer["t_done"] - t0)
    for echo in echoes:
        net.kill(echo.pid)
    return out


def discovery(net: TestNetwork, rounds: int, log_dir: Path) -> dict[str, list[float]]:
    fp = secrets.token_hex(16)
    peers = [DiscoveryNode(h, f"p{h.index}", fp, log_dir=log_dir, query_interval=QUERY, expire_after=EXPIRE)
             for h in net.hosts[:-1]]
    for p in peers:
        p.start()
    ids = {p.node_id for p in peers}
    for p in peers:
        p.wait(lambda seen, me=p.node_id: seen == ids - {me}, 30, "the other peers")
    figures: dict[str, list[float]] = {"spawn": [], "start": [], "own_view": [], "goodbye": []}
    for r in range(rounds):
        fresh = DiscoveryNode(net.hosts[-1], f"fresh{r}", fp, log_dir=log_dir, query_interval=QUERY,
                              expire_after=EXPIRE).start()
        listed = max(p.wait(lambda seen: fresh.node_id in seen, 30, "the fresh node") for p in peers)
        starting = fresh.wait_event("starting", 30)["t"]
        own = fresh.wait(lambda seen: seen == ids, 30, "every peer")
        figures["spawn"].append(listed - fresh.t_spawn)
        figures["start"].append(listed - starting)
        figures["own_view"].append(own - starting)
        fresh.wait_event("started", 30)
        stopped = time.monotonic()
        fresh.stop()
        gone = max(p.wait(lambda seen: fresh.node_id not in seen, 30, "the fresh node gone", after=stopped)
                   for p in peers)
        figures["goodbye"].append(gone - stopped)
    return figures


def _line(label: str, values: list[float]) -> str:
    return (f"{label:<44} median {statistics.median(values) * 1000:7.1f} ms  "
            f"max {max(values) * 1000:7.1f} ms  ({len(values)} rounds)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="3 hosts, 2 rounds")
    args = ap.parse_args()
    reason = netns_unavailable_reason()
    if reason:
        print(f"netns_discovery: skipped: {reason}", file=sys.stderr)
        return 2
    hosts, rounds = (3, 2) if args.smoke else (args.hosts, args.rounds)
    with TestNetwork().up(hosts) as net, tempfile.TemporaryDirectory() as logs:
        rtt = [r for r in net.host(1).ping(net.host(2).ip, count=10) if r is not None]
        base = baseline(net, rounds)
        ours = discovery(net, rounds, Path(logs))
    b, s = statistics.median(base), statistics.median(ours["spawn"])
    print(f"{hosts} hosts on a namespace bridge; questions every {QUERY:g}s, expiry {EXPIRE:g}s")
    print(f"{'ping RTT host1->host2':<44} median {statistics.median(rtt):7.3f} ms")
    print(_line("baseline: spawn -> multicast answered by all", base))
    print(_line("fresh node listed by all peers (from spawn)", ours["spawn"]))
    print(_line("fresh node listed by all (from discovery start)", ours["start"]))
    print(_line("fresh node lists all peers (from its start)", ours["own_view"]))
    print(_line("stopped node dropped by all (goodbye)", ours["goodbye"]))
    print(f"listed-by-all vs baseline: {s / b:.1f}x ({1000 * (s - b):.0f} ms above a bare multicast round trip)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
