"""``verify --repair`` in a cluster: damaged or missing objects come back, verified, from other holders."""

from __future__ import annotations

import asyncio
import os

from floydd.cluster.replication.storecare import repair_damaged
from tests.integration.cluster.test_cluster_datasets import _holders, _upload, data_cluster, src  # noqa: F401
from tests.unit.store.store_testlib import describe, flip_byte


async def test_damaged_and_missing_objects_are_fetched_again_from_another_holder(data_cluster, src, tmp_path):
    c = data_cluster
    a, b = await c.start(2)
    for node in (a, b):
        await c.attach(node)
    v = await _upload(c, a, src, "mnist", "upload-repair")
    await c.wait_for(lambda: len(_holders(a, "mnist")) == 2, what="two holders")
    store = c.store(a)
    tree = await asyncio.to_thread(store.read_tree, store.catalog.resolve("mnist:1").tree)
    damaged, missing = sorted(tree.chunk_ids())[:2]
    flip_byte(store.root / "objects" / damaged.hex[:2] / damaged.hex)
    os.unlink(store.root / "objects" / missing.hex[:2] / missing.hex)

    report = await asyncio.to_thread(store.verify)
    assert {d.object for d in report.damaged} == {damaged, missing}
    answer = await repair_damaged(report, c.datasets[a.name])
    assert answer["ok"] and answer["damaged"] == []
    assert {r["object"] for r in answer["repaired"]} == {str(damaged), str(missing)}
    assert all(r["versions"] == ["mnist:1"] for r in answer["repaired"])
    assert (await asyncio.to_thread(store.verify)).ok
    await asyncio.to_thread(store.restore, store.catalog.resolve(v["ref"]).tree, tmp_path / "out")
    assert describe(tmp_path / "out") == describe(src)
