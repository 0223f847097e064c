"""Leader failover of a real 3-node control plane, and how fast an isolated leader steps down.

Three ``python -m floydd.cluster.devnode`` processes on 127.0.0.1 (mTLS, SQLite logs, the
daemon's timings: ``floydd.cluster.config.BOX_RAFT``, since issue 23 a 250 ms tick, a heartbeat
every 2 ticks, election timeout 1-2 s; before, 50 ms, every tick, 0.5-1 s). Each trial
waits for a leader that serves, SIGKILLs it, and times until another node serves in a
higher term (it leads and has committed in its term, so it takes writes and linearizable
reads); the killed node is then restarted from its state and catches up. Then, per
isolation trial, the leader's traffic is dropped both ways (its cable pulled) and the time
until it stops acting as leader is taken (CheckQuorum).

Baseline, same run: the deterministic simulator's failover for 3 nodes with the same
timings (``tests/sim``: the protocol alone, no processes, sockets or fsyncs).

    python bench/cluster_failover.py              # 12 kill trials, 5 isolation trials
    python bench/cluster_failover.py --smoke      # 3 + 1 trials
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG  # noqa: E402
from tests.integration.cluster.procs import DevNode, free_ports, make_identities  # noqa: E402
from tests.sim.failover import measure, summary  # noqa: E402

RAFT = DEFAULT_CLUSTER_CONFIG.raft
ELECTION = RAFT.election_ticks * RAFT.tick_interval_ms / 1000
"""The shortest election timeout (s); the targets scale with it: median < 2x, worst and an
isolated leader's step-down < 4x (1 s and 2 s when it was 0.5 s)."""


def start_cluster(root: Path, n: int = 3) -> list[DevNode]:
    folders = make_identities(root, n)
    ports = free_ports(n)
    nodes = [DevNode(tls, root / f"state{i + 1}", f"127.0.0.1:{port}")
             for i, (tls, port) in enumerate(zip(folders, ports))]
    founders = ",".join(f"{node.node_id}={node.listen}" for node in nodes)
    for node in nodes:
        node.start("--founders", founders)
    return nodes


def serving(nodes: list[DevNode], *, after: float, above_term: int = 0, timeout: float = 30.0) -> tuple[DevNode, dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        best = None
        for node in nodes:
            for e in node.events:
                if e["event"] == "serving" and e["t"] >= after and e["term"] > above_term:
                    if best is None or e["t"] < best[1]["t"]:
                        best = (node, e)
        if best:
            return best
        time.sleep(0.005)
    raise TimeoutError("no leader serving")


def kill_trials(nodes: list[DevNode], trials: int) -> list[float]:
    took = []
    leader, event = serving(nodes, after=0)
    for _ in range(trials):
        time.sleep(0.5)                                 # steady state: heartbeats flowing
        killed_at = leader.kill9()
        survivors = [n for n in nodes if n is not leader]
        new, new_event = serving(survivors, after=killed_at, above_term=event["term"])
        took.append(new_event["t"] - killed_at)
        leader.start()                                  # restart from its state dir, same address
        leader.wait(lambda e: e["event"] == "leader" and e["leader"] == new.node_id, 30, "rejoin",
                    after=killed_at)
        leader, event = new, new_event
    return took


def current_leader(nodes: list[DevNode]) -> DevNode:
    """The node that says it leads the highest term (asked over stdin)."""
    asked = time.monotonic()
    for node in nodes:
        node.send("status")
    answers = [(node, node.wait(lambda e: e["event"] == "status", 10, "status", after=asked)) for node in nodes]
    leaders = [(a["term"], node) for node, a in answers if a["role"] == "leader"]
    if not leaders:
        raise TimeoutError(f"no leader: {[a for _, a in answers]}")
    return max(leaders, key=lambda tn: tn[0])[1]


def isolation_trials(nodes: list[DevNode], trials: int) -> list[float]:
    took = []
    for _ in range(trials):
        time.sleep(0.5)
        leader = current_leader(nodes)
        sent = time.monotonic()
        leader.send("isolate")
        cut = leader.wait(lambda e: e["event"] == "isolated", 10, "isolated", after=sent)
        down = leader.wait(lambda e: e["event"] == "stepped_down", 10, "step down", after=cut["t"])
        took.append(down["t"] - cut["t"])
        leader.send("heal")
        others = [n for n in nodes if n is not leader]
        try:
            serving(others, after=cut["t"])
        except TimeoutError:
            for n in nodes:
                print(n, [e for e in n.events if e["t"] >= cut["t"] - 1], file=sys.stderr)
            raise
        leader.wait(lambda e: e["event"] == "leader" and e["leader"] not in (None, leader.node_id), 30,
                    "follow the new leader", after=cut["t"])
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--isolations", type=int, default=5)
    args = ap.parse_args(argv)
    trials, isolations = (3, 1) if args.smoke else (args.trials, args.isolations)
    with tempfile.TemporaryDirectory(prefix="floydd-failover-") as tmp:
        nodes = start_cluster(Path(tmp))
        try:
            kills = kill_trials(nodes, trials)
            isolated = isolation_trials(nodes, isolations)
        finally:
            for node in nodes:
                node.stop()
    sim = summary([measure(seed, nodes=3, raft=RAFT) for seed in range(200 if not args.smoke else 30)])
    med, worst = statistics.median(kills) * 1000, max(kills) * 1000
    print(f"leader failover, 3 processes on loopback, SIGKILL of the leader, {len(kills)} trials "
          f"(tick {RAFT.tick_interval_ms} ms, heartbeat {RAFT.heartbeat_ticks} ticks, "
          f"election {ELECTION:g}-{2 * ELECTION:g} s):")
    print(f"  kill -> another node serving: median {med:.0f} ms, max {worst:.0f} ms, min {min(kills) * 1000:.0f} ms "
          f"(targets: median < {2000 * ELECTION:.0f}, max < {4000 * ELECTION:.0f})")
    print(f"  trials (ms): {', '.join(f'{t * 1000:.0f}' for t in kills)}")
    print(f"isolated leader stops acting as leader: median {statistics.median(isolated) * 1000:.0f} ms, "
          f"max {max(isolated) * 1000:.0f} ms over {len(isolated)} trials (target < {4000 * ELECTION:.0f})")
    print(f"baseline: simulator, same timings, 3 nodes, {sim['runs']} seeds: median {sim['median_ms']:.0f} ms, "
          f"max {sim['max_ms']:.0f} ms; real/simulated median = {med / sim['median_ms']:.2f}")
    ok = med < 2000 * ELECTION and worst < 4000 * ELECTION and max(isolated) < 4 * ELECTION
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
