"""Copies go where they can live (issue 21): a box whose copy fails for lack of space says so
in a heartbeat and the next box in the order takes the copy at once; extra copies beyond R
are trimmed once the set is healthy (real ClusterService nodes on 127.0.0.1, one store
secret; the full disk is a store whose writes fail with ENOSPC)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from floydd.scheduler import storehealth
from floydd.cluster.replication.replicas import choose_replicas
from floydd.errors import StoreFull, Unavailable
from floydd.runtime.disk import StoreWatch
from tests.integration.cluster.test_cluster_datasets import _holders, data_cluster, src  # noqa: F401

GRACE = 1.5
BENCH = Path(__file__).resolve().parents[3] / "bench"


async def _watched(c, node, **kw):
    """Attach ``node``'s datasets with a store watch whose report its heartbeats carry."""
    watch = StoreWatch([c.store(node).root], recheck_after=kw.pop("recheck_after", 600.0))
    node.service.upkeep.usage = lambda: {"store": watch.report()}
    await c.attach(node, store_watch=watch, **kw)
    return watch


def _no_space(store):
    def save_sealed(oid, data):
        raise StoreFull(f"no space left on the device of {store.root} while writing object {oid.short}; "
                        "nothing half-written was kept")
    return save_sealed


async def test_a_copy_that_fails_for_space_goes_to_the_next_box_at_once(data_cluster, src):
    c = data_cluster
    c.config = replace(c.config, stale_after=60.0)      # a loaded test box: the chosen one never goes stale
    nodes = await c.start(3)
    watches = {n.name: await _watched(c, n) for n in nodes}
    a = nodes[0]
    snap = await asyncio.to_thread(c.store(a).snapshot_report, src)
    tree = str(snap.tree)
    live = c.datasets[a.name].liveness()
    chosen = next(n for n in nodes if n.id in choose_replicas(a.service.state.nodes, {"holders": [a.id], "tree": tree},
                                                              2, live))
    other = next(n for n in nodes if n not in (a, chosen))
    full_store = c.store(chosen)
    full_store.save_sealed = _no_space(full_store)          # its disk is full: every write fails so

    began = time.monotonic()
    await c.datasets[a.name].register("mnist", tree, size=snap.size, files=snap.files, idem_key="u1")
    await c.wait_for(lambda: sorted(_holders(a, "mnist")) == sorted([a.id, other.id]), timeout=20,
                     what="the second copy on the box that has room")
    took = time.monotonic() - began
    record = a.service.state.nodes[chosen.id]
    assert storehealth.trouble(record) == "disk full", (record.get("usage"), watches[chosen.name].report())
    assert "no space left" in storehealth.why(record)
    assert watches[chosen.name].report()["state"] == "full"
    assert chosen.id not in _holders(a, "mnist")
    # the box that took the copy counts both once it has applied the leader's entry (it may lag a)
    seen = c.datasets[other.name]
    await c.wait_for(lambda: seen.describe(seen._version("mnist", 1))["copies"] == 2, timeout=10,
                     what="the box that took the copy counting two copies")
    print(f"second copy placed elsewhere {took:.2f}s after the upload whose copy failed for space")


async def test_a_box_that_cannot_fetch_a_copy_passes_it_to_the_next_box(data_cluster, src):
    c = data_cluster
    c.config = replace(c.config, stale_after=60.0)
    nodes = await c.start(3)
    for n in nodes:
        await _watched(c, n)
    a = nodes[0]
    snap = await asyncio.to_thread(c.store(a).snapshot_report, src)
    tree = str(snap.tree)
    chosen = next(n for n in nodes if n.id in choose_replicas(a.service.state.nodes, {"holders": [a.id], "tree": tree},
                                                              2, c.datasets[a.name].liveness()))
    other = next(n for n in nodes if n not in (a, chosen))

    async def cut_off(*_args, **_kw):                  # it cannot reach the holders; its store is fine
        raise Unavailable(f"no node could send tree {tree[:12]} (nodes tried: {a.id})")
    c.datasets[chosen.name].ensure_local = cut_off
    await c.datasets[a.name].register("mnist", tree, size=snap.size, files=snap.files, idem_key="u1")
    await c.wait_for(lambda: sorted(_holders(a, "mnist")) == sorted([a.id, other.id]), timeout=20,
                     what="the copy passed to the box that can fetch it")
    version = a.service.state.datasets["mnist"]["versions"]["1"]
    assert list(version["refused"]) == [chosen.id] and "no node could send" in version["refused"][chosen.id]["why"]
    assert not storehealth.trouble(a.service.state.nodes[chosen.id])      # not its store: it takes other copies


async def test_a_returning_holder_makes_one_copy_too_many_and_the_leader_trims_it(data_cluster, src):
    c = data_cluster
    nodes = await c.start(3)
    for n in nodes:
        await _watched(c, n, grace=GRACE)
    a = nodes[0]
    snap = await asyncio.to_thread(c.store(a).snapshot_report, src)
    await c.datasets[a.name].register("mnist", str(snap.tree), size=snap.size, files=snap.files, idem_key="u1")
    await c.wait_for(lambda: len(_holders(a, "mnist")) == 2, timeout=20, what="two holders")
    second = next(n for n in nodes if n is not a and n.id in _holders(a, "mnist"))
    third = next(n for n in nodes if n not in (a, second))

    await c.detach(second)
    await c.kill(second)
    await c.wait_for(lambda: third.id in _holders(a, "mnist"), timeout=20, what="a new copy after the grace")
    assert len(_holders(a, "mnist")) == 3            # the silent holder is listed; nothing is trimmed yet

    await c.restart(second)
    await _watched(c, second, grace=GRACE)
    leader = next(n for n in c.nodes if n.service.is_leader)
    await c.wait_for(lambda: len(_holders(leader, "mnist")) == 2 and all(
        c.datasets[leader.name].liveness().holds(leader.service.state.nodes.get(h)) for h in _holders(leader, "mnist")),
        timeout=20, what="the extra copy trimmed once the returning holder counted again")
    kept = _holders(leader, "mnist")
    dropped = next(n for n in (a, second, third) if n.id not in kept)
    await c.wait_for(lambda: not c.store(dropped).catalog.list("mnist"), timeout=10,
                     what="the trimmed box's mirror dropped (gc frees the space)")
    for n in (a, second, third):
        if n.id in kept:
            assert [v.ref for v in c.store(n).catalog.list("mnist")] == ["mnist:1"]


@pytest.mark.slow
def test_copy_placement_bench_smoke():
    """bench/copy_placement.py stays runnable and within its target (one round, ~6 s)."""
    out = subprocess.run([sys.executable, str(BENCH / "copy_placement.py"), "--smoke"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "second copy elsewhere < 30 s after the failed write: yes" in out.stdout
