"""Store objects between nodes: the object route and ``fetch_tree`` (two stores, one secret)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import aiohttp
import msgpack
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from floydd.cluster.replication.peerstore import OBJECTS_PATH, fetch_manifest, fetch_tree, store_routes
from floydd.errors import NotFound, Unavailable
from floydd.store import ObjectId, Store
from tests.unit.store.store_testlib import describe, write_tree


class Peers:
    """A fake transport: ``fetch`` serves each peer's store; some peers lie or are down."""

    node_id = "me"

    def __init__(self, stores: dict[str, Store], *, corrupt: frozenset[str] = frozenset(),
                 down: frozenset[str] = frozenset()) -> None:
        self.stores, self.corrupt, self.down = stores, corrupt, down
        self.calls: list[tuple[str, str]] = []

    async def fetch(self, peer: str, path: str) -> tuple[bytes, dict[str, str]]:
        assert path.startswith(OBJECTS_PATH)
        self.calls.append((peer, path.rsplit("/", 1)[1]))
        if peer in self.down or peer not in self.stores:
            raise Unavailable(f"node {peer} did not answer")
        data = bytearray(self.stores[peer].load_sealed(ObjectId.from_hex(path.rsplit("/", 1)[1])))
        if peer in self.corrupt:
            data[len(data) // 2] ^= 0x01
        return bytes(data), {}

    def asked(self, peer: str) -> list[str]:
        return [oid for p, oid in self.calls if p == peer]


def _open(root: Path, secret_from: Path | None = None) -> Store:
    if secret_from is not None:
        root.mkdir(mode=0o700, parents=True)
        shutil.copy(secret_from / "key", root / "key")
    return Store.open(root)


@pytest.fixture
def stores(tmp_path: Path):
    a = _open(tmp_path / "a")
    made = {"a": a, "b": _open(tmp_path / "b", a.root), "c": _open(tmp_path / "c", a.root),
            "me": _open(tmp_path / "me", a.root)}
    yield made
    for s in made.values():
        s.close()


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    files: dict[str, object] = {f"small/{i}.txt": f"file {i}\n".encode() * (i + 1) for i in range(40)}
    files["big.bin"] = os.urandom(3 << 20)      # cut into chunks
    files["mid.bin"] = (os.urandom(300 << 10), 0o600)
    files["empty/"] = 0o755
    files["link@"] = "big.bin"
    write_tree(root, files)
    return root


def _objects(store: Store) -> set[ObjectId]:
    return set(store.backend.list())


async def test_fetch_tree_copies_every_object_and_restores_identical_files(stores, src, tmp_path):
    a, me = stores["a"], stores["me"]
    tree = a.snapshot(src)
    peers = Peers(stores)
    progress: list[tuple[int, int]] = []

    fetched = await fetch_tree(me, str(tree), ["a"], peers, progress=lambda d, t: progress.append((d, t)))

    assert fetched == sum(a.backend.stat(oid) for oid in _objects(a))
    assert _objects(me) == _objects(a)
    assert progress[-1][0] == progress[-1][1] > 0
    assert any(h.startswith("upload:fetch-") for h in me.catalog.roots()[tree])   # leased: gc keeps it
    assert me.gc().removed_objects == 0
    assert me.verify().ok
    me.restore(tree, tmp_path / "out")
    assert describe(tmp_path / "out") == describe(src)
    # All here now: nothing is asked again.
    calls = len(peers.calls)
    assert await fetch_tree(me, str(tree), ["a"], peers) == 0
    assert len(peers.calls) == calls


async def test_only_missing_objects_are_fetched(stores, src, tmp_path):
    a, me = stores["a"], stores["me"]
    tree = a.snapshot(src)
    shutil.copytree(src, tmp_path / "part")
    (tmp_path / "part" / "big.bin").unlink()
    me.snapshot(tmp_path / "part")      # same secret: the same files make the same objects
    had = _objects(me)
    peers = Peers(stores)

    await fetch_tree(me, str(tree), ["a"], peers)

    asked = {ObjectId.from_hex(h) for h in peers.asked("a")}
    assert asked == _objects(a) - had and asked
    assert me.verify().ok


async def test_bad_bytes_from_a_source_are_refused_and_the_next_source_is_used(stores, src, tmp_path):
    a, b, me = stores["a"], stores["b"], stores["me"]
    tree = a.snapshot(src)
    b.snapshot(src)
    peers = Peers(stores, corrupt=frozenset({"a"}))

    await fetch_tree(me, str(tree), ["a", "b"], peers)

    wanted = {oid.hex for oid in _objects(a)}
    assert set(peers.asked("a")) == wanted         # each was asked of the liar first ...
    assert set(peers.asked("b")) == wanted         # ... refused, and taken from the next source
    assert me.verify().ok
    me.restore(tree, tmp_path / "out")
    assert describe(tmp_path / "out") == describe(src)


async def test_an_unreachable_source_is_asked_last_after_it_failed(stores, src):
    a, me = stores["a"], stores["me"]
    tree = a.snapshot(src)
    peers = Peers(stores, down=frozenset({"b"}))

    await fetch_tree(me, str(tree), ["b", "a", "me"], peers)

    assert peers.asked("b") == [tree.hex]      # the manifest; then "a" first for every object
    assert not peers.asked("me")               # this node is never a source of its own
    assert _objects(me) == _objects(a)


async def test_a_tree_nobody_has_is_unavailable_naming_the_tree_and_the_nodes(stores, src):
    a, me = stores["a"], stores["me"]
    tree = a.snapshot(src)
    peers = Peers(stores, down=frozenset({"c"}))

    with pytest.raises(Unavailable) as e:
        await fetch_tree(me, str(tree), ["b", "c"], peers)

    assert tree.short in e.value.message and "b" in e.value.message and "c" in e.value.message
    assert "holds" in e.value.hint
    assert _objects(me) == set() and me.catalog.roots() == {}
    with pytest.raises(Unavailable):
        await fetch_tree(me, str(tree), [], peers)


async def test_an_object_missing_on_every_source_stops_the_fetch_unpinned(stores, src):
    a, b, me = stores["a"], stores["b"], stores["me"]
    tree = a.snapshot(src)
    b.snapshot(src)
    lost = next(iter(a.read_tree(tree).chunk_ids()))
    a.backend.remove(lost)
    b.backend.remove(lost)

    with pytest.raises(Unavailable) as e:
        await fetch_tree(me, str(tree), ["a", "b"], Peers(stores))

    assert f"object {lost.short}" in e.value.message
    assert me.catalog.roots() == {}     # nothing leased: gc reclaims the partial copy


async def test_fetch_manifest_takes_only_the_tree_object(stores, src):
    a, me = stores["a"], stores["me"]
    tree = a.snapshot(src)
    peers = Peers(stores)

    manifest = await fetch_manifest(me, str(tree), ["a"], peers)

    assert manifest == a.read_tree(tree)
    assert peers.asked("a") == [tree.hex] and _objects(me) == {tree}


async def test_the_object_route_serves_sealed_bytes_and_refuses_bad_ids(stores, src):
    a = stores["a"]
    tree = a.snapshot(src)
    app = web.Application()
    app.add_routes(store_routes(a))
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        async def get(path: str) -> tuple[int, bytes]:
            async with session.get(server.make_url(path)) as resp:
                return resp.status, await resp.read()

        status, body = await get(OBJECTS_PATH + tree.hex)
        assert status == 200 and body == a.load_sealed(tree) and body != a.read_tree(tree).encode()
        status, body = await get(OBJECTS_PATH + "ab" * 32)
        assert status == 404 and msgpack.unpackb(body)["error"]["kind"] == NotFound.__name__
        for bad in ("xyz", "AB" * 31, "0" * 65):
            status, body = await get(OBJECTS_PATH + bad)
            assert status == 400 and "not an object id" in msgpack.unpackb(body)["error"]["message"]
