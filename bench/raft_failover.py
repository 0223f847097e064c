"""Simulated failover with the default timing settings.

Five nodes on a healthy LAN (1-5 ms); the leader crashes at a random moment; the
figure is the time until a new leader has committed an entry of its term (it then
serves writes and reads), in ticks and in milliseconds (tick = 50 ms, election
timeout 10 ticks randomized in [10, 20), heartbeat 1 tick: floydd.cluster.raft.config).
Baseline, same run: the shortest possible failover, one minimum election timeout.

    python bench/raft_failover.py            # 1,000 seeds
    python bench/raft_failover.py --smoke    # 50 seeds
    python bench/raft_failover.py --boxes    # with the daemon's timings (cluster.config.BOX_RAFT)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from floydd.cluster.config import BOX_RAFT  # noqa: E402
from floydd.cluster.raft import DEFAULT_CONFIG  # noqa: E402
from tests.sim.failover import measure, summary  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--boxes", action="store_true", help="the daemon's timings, not the raft core's defaults")
    args = ap.parse_args(argv)
    n = 50 if args.smoke else args.seeds
    cfg = BOX_RAFT if args.boxes else DEFAULT_CONFIG
    t0 = time.perf_counter()
    s = summary([measure(seed, raft=cfg) for seed in range(n)])
    floor_ms = cfg.election_ticks * cfg.tick_interval_ms
    print(f"failover over {s['runs']} seeds (5 nodes, tick {cfg.tick_interval_ms} ms, election "
          f"{cfg.election_ticks}-{2 * cfg.election_ticks - 1} ticks, heartbeat {cfg.heartbeat_ticks} "
          f"ticks), {time.perf_counter() - t0:.1f} s")
    print(f"  ticks: median {s['median_ticks']:.1f}, max {s['max_ticks']:.1f}")
    print(f"  ms:    median {s['median_ms']:.0f}, p99 {s['p99_ms']:.0f}, max {s['max_ms']:.0f} "
          f"(targets: median < {2 * floor_ms}, max < {4 * floor_ms})")
    print(f"  baseline: one minimum election timeout = {floor_ms} ms; median is "
          f"{s['median_ms'] / floor_ms:.2f}x that")
    return 0 if s["median_ms"] < 2 * floor_ms and s["max_ms"] < 4 * floor_ms else 1


if __name__ == "__main__":
    sys.exit(main())
