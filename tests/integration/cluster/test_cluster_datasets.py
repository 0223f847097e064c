"""The cluster's data plane: datasets registered on one node, listed, replicated and fetched
on the others over mTLS (real ClusterService nodes on 127.0.0.1, one store secret)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from floydd.api import keys
from floydd.api.datasets import routes as dataset_routes
from floydd.cluster.state import versions
from floydd.cluster.replication.datasets import ClusterDatasets
from floydd.cluster.replication.peerstore import OBJECTS_PATH, store_routes
from floydd.cluster.replication.storecare import StoreCare
from floydd.errors import NotFound
from floydd.store import ObjectId, Store
from tests.harness.cluster import Cluster, Node
from tests.unit.store.store_testlib import describe, write_tree


class DataCluster(Cluster):
    """The harness's nodes, each with its own store (same secret, as after a join), its
    object route on the node-to-node app, and a ClusterDatasets (``attach``)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stores: dict[str, Store] = {}
        self.datasets: dict[str, ClusterDatasets] = {}
        self.cares: dict[str, StoreCare] = {}

    def store(self, node: Node) -> Store:
        if node.name not in self.stores:
            folder = node.folder / "store"
            if self.stores:
                folder.mkdir(mode=0o700, parents=True)
                shutil.copy(next(iter(self.stores.values())).root / "key", folder / "key")
            self.stores[node.name] = Store.open(folder)
        return self.stores[node.name]

    async def _listen(self, node: Node) -> None:
        store, plain = self.store(node), node.service.create_app

        def create_app():
            app = plain()
            app.add_routes(store_routes(store))
            return app
        node.service.create_app = create_app
        await super()._listen(node)

    async def attach(self, node: Node, **kw) -> ClusterDatasets:
        """Its ClusterDatasets (``kw``: grace, copy_wait...) and the care of its store
        (``scrub_rate``, ``scrub_every``), replacing those it had."""
        care_kw = {k: kw.pop(k) for k in ("scrub_rate", "scrub_every") if k in kw}
        await self.detach(node)
        ds = self.datasets[node.name] = ClusterDatasets(node.service, self.store(node), state=node.service.state,
                                                        retry=(0.05, 0.2), **kw)
        ds.start()
        care = self.cares[node.name] = StoreCare(ds, **care_kw)
        care.start()
        return ds

    async def detach(self, node: Node) -> None:
        care, ds = self.cares.pop(node.name, None), self.datasets.pop(node.name, None)
        if care is not None:
            await care.close()
        if ds is not None:
            await ds.close()

    async def close(self) -> None:
        for care in self.cares.values():
            await care.close()
        for ds in self.datasets.values():
            await ds.close()
        await super().close()
        for store in self.stores.values():
            store.close()


@pytest.fixture
async def data_cluster(tmp_path):
    c = DataCluster(tmp_path / "cluster")
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def src(tmp_path: Path) -> Path:
    files: dict[str, object] = {f"train/{i:03d}.csv": f"{i},{i * i}\n".encode() * 50 for i in range(60)}
    files["weights.bin"] = os.urandom(2 << 20)
    files["README"] = (b"digits\n", 0o600)
    write_tree(tmp_path / "src", files)
    return tmp_path / "src"


async def _upload(c: DataCluster, node: Node, src: Path, name: str, idem_key: str) -> dict:
    result = await asyncio.to_thread(c.store(node).snapshot_report, src)
    return await c.datasets[node.name].register(name, str(result.tree), size=result.size, files=result.files,
                                                message="digits", idem_key=idem_key)


def _holders(node: Node, name: str, number: int = 1) -> list[str]:
    version = node.service.state.datasets.get(name, {}).get("versions", {}).get(str(number))
    return version["holders"] if version else []


async def test_a_version_uploaded_on_one_node_is_listed_replicated_and_fetched_everywhere(data_cluster, src,
                                                                                          tmp_path):
    c = data_cluster
    a, b, n3 = await c.start(3)
    for node in (a, b, n3):
        await c.attach(node)

    v = await _upload(c, a, src, "mnist", "upload-1")
    assert (v["ref"], v["holders"], v["size"], v["message"]) == ("mnist:1", [a.id], c.store(a).read_tree(
        ObjectId.from_hex(v["tree"])).size, "digits")
    assert c.store(a).catalog.resolve("mnist:1").tree.hex == v["tree"]       # mirrored under the same number

    # Listed on the others, then kept on a second node chosen by the committed state.
    await c.wait_for(lambda: all(_holders(n, "mnist") for n in (a, b, n3)), what="the version everywhere")
    for node in (b, n3):
        listed = await c.datasets[node.name].list()
        assert [(x["ref"], x["tree"]) for x in listed] == [("mnist:1", v["tree"])]
        assert (await c.datasets[node.name].resolve("mnist:latest"))["tree"] == v["tree"]
    await c.wait_for(lambda: all(len(_holders(n, "mnist")) == 2 for n in (a, b, n3)), what="two holders")
    second = next(n for n in (b, n3) if n.id in _holders(a, "mnist"))
    other = n3 if second is b else b
    copy = c.store(second)
    assert copy.catalog.resolve("mnist:1").tree.hex == v["tree"]
    report = await asyncio.to_thread(copy.verify, "mnist")
    assert report.ok and report.checked_objects == len(list(c.store(a).backend.list()))

    # The third node fetches it on demand and restores the same files.
    assert not c.store(other).backend.has(ObjectId.from_hex(v["tree"]))
    fetched = await c.datasets[other.name].ensure_local(v["tree"], _holders(other, "mnist"))
    assert fetched > 0
    await asyncio.to_thread(c.store(other).restore, ObjectId.from_hex(v["tree"]), tmp_path / "out")
    assert describe(tmp_path / "out") == describe(src)
    assert await c.datasets[other.name].ensure_local(v["tree"], []) == 0

    # A retried registration is the same version; unknown versions say what exists.
    assert (await _upload(c, a, src, "mnist", "upload-1"))["version"] == 1
    with pytest.raises(NotFound) as e:
        await c.datasets[b.name].resolve("mnist:7")
    assert "mnist:1" in e.value.hint

    # Deleting through any node drops every local mirror.
    assert await c.datasets[other.name].delete("mnist", 1) == 1
    await c.wait_for(lambda: not c.store(a).catalog.list() and not copy.catalog.list(), what="mirrors dropped")
    assert await c.datasets[a.name].list() == []


async def test_a_node_that_joins_later_takes_the_second_copy_and_a_restart_fetches_nothing(data_cluster, src):
    c = data_cluster
    (a,) = await c.start(1)
    await c.attach(a)
    v = await _upload(c, a, src, "cifar", "upload-2")
    assert v["holders"] == [a.id]

    b = await c.join(a)
    await c.attach(b)
    await c.wait_for(lambda: _holders(a, "cifar") == sorted([a.id, b.id]), what="the joiner holding a copy")
    assert c.store(b).catalog.resolve("cifar:1").tree.hex == v["tree"]
    assert (await asyncio.to_thread(c.store(b).verify, "cifar")).ok

    # Restarted, it replays the log: nothing is fetched again.
    await c.kill(b)
    await c.restart(b)
    calls: list[str] = []
    fetch = b.service.transport.fetch

    async def counting(peer, path, **kw):
        calls.append(path)
        return await fetch(peer, path, **kw)
    b.service.transport.fetch = counting
    ds = await c.attach(b)
    await c.wait_for(lambda: b.driver.status().applied >= a.driver.status().commit and not ds._replicating,
                     what="the restarted node caught up")
    assert calls == []
    assert c.store(b).catalog.resolve("cifar:1").tree.hex == v["tree"]


async def test_the_object_route_needs_a_cluster_certificate(data_cluster, src):
    c = data_cluster
    a, b = await c.start(2)
    tree = await asyncio.to_thread(c.store(a).snapshot, src)
    url = f"https://{a.address}{OBJECTS_PATH}{tree.hex}"

    no_cert = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    no_cert.check_hostname = False
    no_cert.load_verify_locations(cadata=c.ca.cert_pem.decode())     # trusts the cluster, has no cert
    async with aiohttp.ClientSession(headers={versions.HEADER: str(versions.PROTOCOL)}) as session, \
            session.get(url, ssl=no_cert) as resp:
        status, body = resp.status, await resp.json()
    assert status == 403 and body["error"]["code"] == "peer_certificate_required"

    data, _ = await b.service.transport.fetch(a.id, f"{OBJECTS_PATH}{tree.hex}")   # a member gets it
    assert data == c.store(a).load_sealed(tree)
    with pytest.raises(NotFound):
        await b.service.transport.fetch(a.id, f"{OBJECTS_PATH}{'ef' * 32}")


async def test_the_datasets_api_in_cluster_mode_registers_lists_holders_and_clones_by_fetching(data_cluster, src,
                                                                                             tmp_path):
    c = data_cluster
    nodes = await c.start(3)
    servers = []
    for node in nodes:
        app = web.Application()
        app[keys.STORE], app[keys.DATASETS] = c.store(node), await c.attach(node)
        app.add_routes(dataset_routes)
        servers.append(await TestServer(app).__aenter__())
    try:
        async with aiohttp.ClientSession() as http:
            async def call(i: int, method: str, path: str, **kw):
                async with http.request(method, servers[i].make_url(path), **kw) as resp:
                    assert resp.status == 200, await resp.text()
                    if resp.content_type == "application/x-ndjson":
                        events = [json.loads(line) for line in (await resp.text()).splitlines()]
                        assert "error" not in events[-1], events[-1]
                        return events
                    return await resp.json()

            events = await call(0, "POST", "/v1/datasets", json={"name": "mnist", "path": str(src), "message": "m"})
            version = events[-1]["result"]        # answered once the second copy is stored
            assert (version["ref"], nodes[0].id in version["holders"], len(version["holders"])) == ("mnist:1", True, 2)
            assert (version["copies"], version["replicas"], version["copies_note"]) == (2, 2, "stored on 2 of 2 boxes")
            assert c.store(nodes[0]).catalog.resolve("mnist").tree.hex == version["tree"]
            await c.wait_for(lambda: all(len(_holders(n, "mnist")) == 2 for n in nodes), what="two holders")
            listed = await call(2, "GET", "/v1/datasets")
            assert [(v["ref"], len(v["holders"]), v["copies"], v["silent_holders"]) for v in listed] == \
                [("mnist:1", 2, 2, [])]
            lacking = next(i for i, n in enumerate(nodes) if n.id not in _holders(n, "mnist"))
            assert not c.store(nodes[lacking]).backend.has(ObjectId.from_hex(version["tree"]))
            info = await call(lacking, "GET", "/v1/datasets/info", params={"ref": "mnist:1"})
            assert {e["path"] for e in info["entries"]} >= {"README", "weights.bin", "train/000.csv"}
            assert (info["copies"], info["replicas"], sorted(info["held_by"])) == (2, 2, sorted(listed[0]["held_by"]))
            events = await call(lacking, "POST", "/v1/datasets/clone",
                                json={"ref": "mnist:latest", "dest": str(tmp_path / "out")})
            assert events[-1]["result"]["ref"] == "mnist:1" and any("progress" in e for e in events)
            assert describe(tmp_path / "out") == describe(src)
            assert await call(lacking, "POST", "/v1/datasets/delete", json={"ref": "mnist:latest"}) == \
                {"deleted": "mnist:latest"}
            await c.wait_for(lambda: not any(_holders(n, "mnist") for n in nodes), what="the delete everywhere")
    finally:
        for server in servers:
            await server.close()


async def test_a_holder_that_leaves_for_good_is_dropped_and_a_new_copy_made(data_cluster, src):
    c = data_cluster
    nodes = await c.start(3)
    for node in nodes:
        await c.attach(node)
    a = nodes[0]
    await _upload(c, a, src, "imagenet", "upload-leave")
    await c.wait_for(lambda: len(_holders(a, "imagenet")) == 2, what="two holders")
    gone = next(n for n in nodes if n.id in _holders(a, "imagenet") and n is not a)
    third = next(n for n in nodes if n is not a and n is not gone)
    await c.detach(gone)
    await gone.service.leave()
    await c.wait_for(lambda: _holders(a, "imagenet") == sorted([a.id, third.id]), timeout=20,
                     what="the leaver dropped and the third node holding a copy")
    assert (await asyncio.to_thread(c.store(third).verify, "imagenet")).ok
