"""Every benchmark in bench/ stays runnable: its ``--smoke`` mode (tiny sizes, seconds) runs in
a subprocess and must exit 0 and print the figures that prove it measured, not only that it
exited (issue 23: a bench had silently stopped working). Benches whose smoke run has its own
test elsewhere are not repeated here (store_ingest, store_reseal, exchange, place_throughput,
placement_cycle, queue_entries, job_reads, ...); :func:`test_every_bench_has_a_smoke_run`
keeps the two lists whole.

A bench that needs torch or network namespaces (root) is skipped only where this machine
truly lacks them, with the reason; CI has both.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.netns.network import netns_unavailable_reason

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

N = r"[0-9][0-9,.]*"
"""A measured number."""

SMOKES: dict[str, list[str]] = {
    "agent_latency": [rf"direct spawn: +median +{N} ms", rf"runtime \+ agent \(\w+\): median +{N} ms",
                      rf"overhead: -?{N} ms above direct spawn"],
    "agent_logging": [rf"stdout to /dev/null: +{N} s wall", rf"through the agent: +{N} s wall",
                      rf"ratio: {N}x wall"],
    "agent_tail": [rf"metric points \(watcher\): +{N} s +{N} M lines/s", rf"all lines as LogLine: +{N} s"],
    "bundle_install": [rf"bundle no-torch +{N} MiB, {N} wheels",
                       rf"install no-torch median: install.sh {N} s vs plain pip {N} s"],
    "cluster_archive": [rf"floyd status \(20 newest, 3 rounds, min/median/max\): {N}/{N}/{N} s .* vs {N}/{N}/{N} s "
                        rf"on a lone box", r"its own listing: (\d+) jobs \(expected \1\)",
                        rf"a fresh box joins after {N} jobs: up to date {N} s"],
    "cluster_failover": [rf"kill -> another node serving: median {N} ms, max {N} ms",
                         rf"baseline: simulator, same timings, 3 nodes, {N} seeds: median {N} ms"],
    "cluster_job_start": [rf"single box: +median +{N} ms", rf"placed on another box: +median +{N} ms",
                          rf"cost of the cluster path: -?{N} ms"],
    "cluster_throughput": [rf"32 clients: +{N} /s", rf"baseline, 1-node cluster, same path: 1 client {N} /s",
                           rf"bare SqliteStorage, one entry per fsynced transaction: {N} /s"],
    "daemon_idle": [rf"bare python +{N}/{N}/{N} +{N}/{N}/{N}", rf"box alone +{N}/{N}/{N} +{N}/{N}/{N}",
                    r"targets: box alone"],
    "daemon_metrics": [rf"python emit.py > log: +the job's print loop took {N}/{N}/{N} s",
                       r"points recorded: all 5000 in each of 2 runs", rf"job slowdown: [+-]{N} %"],
    "daemon_submit_latency": [rf"direct spawn: +min/median/max {N} / {N} / {N} ms",
                              rf"floydd submit: +min/median/max {N} / {N} / {N} ms",
                              rf"overhead: -?{N} ms above direct spawn"],
    "gang_start": [rf"bare torchrun, 2 processes by hand: +median +{N} s",
                   rf"floyd run --nodes 2 over two boxes: +median +{N} s"],
    "job_failover": [rf"crash -> not-yet-started job running elsewhere: median {N}s",
                     rf"baseline, submit -> running on a healthy cluster: median {N}s"],
    "netns_discovery": [rf"baseline: spawn -> multicast answered by all median +{N} ms",
                        rf"fresh node listed by all peers \(from spawn\) +median +{N} ms"],
    "raft_failover": [rf"ms: +median {N}, p99 {N}, max {N}", rf"baseline: one minimum election timeout = {N} ms"],
    "raft_sim": [r"50 runs x 2,000 steps \(5 nodes; seeds 0..49\): 0 failed", rf"{N} runs/min"],
    "raft_storage": [rf"batch +1: +{N} entries/s committed", rf"batch 100: +{N} entries/s committed"],
    "records_metrics": [rf"Records.add_metrics +1000 +{N} +{N}x", r"every point recorded: yes"],
    "replica_recovery": [rf"new copy after a holder dies: +median {N} s after the kill",
                         rf"holder's return to re-counted: median {N} s from its API answering"],
    "store_rekey": [rf"re-key \(durable, verified\) +{N}s +{N} MB/s", rf"re-key speed vs cp -r +{N}x",
                    rf"re-key in a child: wall, peak RSS +{N}s, {N} MiB"],
    "tui_refresh": [rf"draw +{N} ms +draw\+paint +{N} / +{N} / +{N} ms wall", rf"empty app +{N} %",
                    rf"jobs, sorted by time +{N} / +{N} / +{N} ms, .* {N}x the old path",
                    rf"result: worst render {N} ms \(< 100\), CPU {N} %"],
}
"""What each smoke run must print: regular expressions matched against its stdout."""

ELSEWHERE = {
    "store_ingest": "tests/integration/store/test_store_bench_smoke.py",
    "store_reseal": "tests/system/test_store_reseal_bench_smoke.py",
    "exchange": "tests/system/test_exchange_bench_smoke.py",
    "place_throughput": "tests/unit/scheduler/test_bench_smoke.py",
    "placement_cycle": "tests/unit/scheduler/test_bench_smoke.py",
    "queue_entries": "tests/unit/scheduler/test_bench_smoke.py",
    "job_reads": "tests/unit/cluster/test_job_reads_bench.py",
    "copy_placement": "tests/integration/cluster/test_cluster_copies_placed.py",
}
"""Benches whose smoke run is tested in another file (named here, checked below)."""

NEEDS_TORCH = {"gang_start"}
NEEDS_NETNS = {"job_failover", "netns_discovery"}
TIMEOUT = 240
"""Seconds a smoke run may take here before it counts as hung (they take seconds)."""


def _skip_reason(name: str) -> str | None:
    if name in NEEDS_TORCH and importlib.util.find_spec("torch") is None:
        return f"bench/{name}.py needs torch, which is not installed here (CI installs it)"
    if name in NEEDS_NETNS:
        return netns_unavailable_reason()
    return None


def test_every_bench_has_a_smoke_run():
    benches = {p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    assert benches - set(SMOKES) - set(ELSEWHERE) == set(), "a bench whose --smoke no test runs"
    assert CLUSTER <= set(SMOKES), "a cluster bench with no patterns"
    for name, test in ELSEWHERE.items():
        assert f"{name}.py" in (ROOT / test).read_text(), f"{test} no longer runs bench/{name}.py"


CLUSTER = frozenset({"cluster_archive", "cluster_failover", "cluster_job_start", "cluster_throughput", "gang_start",
                     "job_failover", "netns_discovery", "raft_failover", "replica_recovery"})
"""Benches of several boxes: run by test_bench_smokes_cluster.py, so that CI's two workers
(one test file each) share the three minutes these runs take."""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(SMOKES) - CLUSTER))
def test_bench_smoke(name: str, tmp_path: Path):
    run_smoke(name, tmp_path)


def run_smoke(name: str, tmp_path: Path) -> None:
    """``bench/NAME.py --smoke`` exits 0 and prints what :data:`SMOKES` says it must."""
    reason = _skip_reason(name)
    if reason:
        pytest.skip(reason)
    out = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--smoke"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for pattern in SMOKES[name]:
        assert re.search(pattern, out.stdout), f"bench/{name}.py --smoke printed no /{pattern}/:\n{out.stdout[-3000:]}"
