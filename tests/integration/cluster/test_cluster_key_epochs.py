"""Store key epochs with real services, stores and mutual TLS on loopback: a rotation after a
removal reaches the members only, the members re-seal their older objects in the background,
and what is sealed afterwards does not open with the removed box's keys."""

from __future__ import annotations

import os
from functools import partial

import aiohttp
import pytest

from floydd.cluster.state import versions
from floydd.daemon.epochs import StoreEpochs
from floydd.daemon.renewal import TrustKeeper
from floydd.daemon.joining import EPOCH_KEY_PATH, Trust
from floydd.errors import IntegrityError
from floydd.security.tls import client_context
from floydd.store import Store
from floydd.store.keys.crypto import Keys, write_secret
from floydd.store.keys.epochs import epoch_secret

SECRET = os.urandom(32)


class Boxes:
    """The harness's nodes, each with a store (the cluster's secret), the trust routes, a keeper
    and the store key epochs."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.stores: dict[str, Store] = {}
        self.epochs: dict[str, StoreEpochs] = {}
        self.keepers: list[TrustKeeper] = []
        cluster.make_app = self._app

    def _app(self, node):
        root = node.folder / "store"
        root.mkdir(parents=True, exist_ok=True)
        if not (root / "key").exists():
            write_secret(root / "key", SECRET)
        self.stores[node.name] = Store.open(root)
        trust = Trust(node.service, node.identity, node.folder, store_secret=lambda: SECRET,
                      epoch_secret=partial(epoch_secret, root))
        keeper = TrustKeeper(trust, interval=0.1)
        self.keepers.append(keeper)
        self.epochs[node.name] = StoreEpochs(node.service, self.stores[node.name], root, rate=50e6,
                                             check_every=0.1, ask=keeper.ask)
        app = node.service.create_app()
        app.add_routes(trust.routes())
        return app

    async def start(self, n: int):
        nodes = await self.cluster.start(n)
        for node in nodes:
            self.epochs[node.name].start()
        return nodes

    async def close(self) -> None:
        for part in [*self.epochs.values(), *self.keepers]:
            await part.close()
        for store in self.stores.values():
            store.close()


@pytest.fixture
async def boxes(cluster):
    b = Boxes(cluster)
    try:
        yield b
    finally:
        await b.close()


def _upload(store: Store, folder, name: str, size: int = 300_000):
    folder.mkdir(parents=True)
    for i in range(3):
        (folder / f"f{i}").write_bytes(os.urandom(size))
    return store.upload(folder, name)


async def test_a_rotation_after_a_removal_reaches_members_only_and_old_data_is_resealed(boxes, cluster, tmp_path):
    n1, n2, n3 = await boxes.start(3)
    s1, s2 = boxes.stores["n1"], boxes.stores["n2"]
    old = _upload(s2, tmp_path / "old", "before")
    assert s2.epochs_of(old.tree) == {0: 4}                 # the tree and its chunks, under the secret's epoch
    await n1.service.remove_node(n3.id, user="root")
    rec = await boxes.epochs["n1"].rotate(user="root", reason=f"remove {n3.id}")
    assert rec["epoch"] == 1 and s1.seal_epoch == 1
    # n2 fetches the new key from a member and re-seals what it had, in the background
    await cluster.wait_for(lambda: s2.seal_epoch == 1, timeout=15, what="n2 holding epoch 1")
    await cluster.wait_for(lambda: boxes.epochs["n2"].report()["resealed"], timeout=15, what="n2 re-sealed")
    assert s2.epochs_of(old.tree) == {1: 4} and s2.epoch_counts() == {1: 4}
    report = boxes.epochs["n2"].report()
    assert report["resealed_objects"] == 4 and report["reseal_seconds"] is not None
    # data sealed afterwards, and the re-sealed old data, do not open with the removed box's keys
    new = _upload(s2, tmp_path / "new", "after")
    removed_keys = Keys(SECRET)                              # what n3 holds: the store secret, no epoch 1
    for version in (old, new):
        sealed = s2.load_sealed(version.tree)
        with pytest.raises(IntegrityError, match="key epoch 1"):
            removed_keys.open(version.tree, sealed)
        assert s2.read_tree(version.tree).files == 3     # while the members read it
    # the removed box asks for the key itself: refused, and it never gets it
    async with aiohttp.ClientSession(headers={versions.HEADER: str(versions.PROTOCOL)}) as session:
        async with session.post(f"https://{n2.address}{EPOCH_KEY_PATH}", json={"epoch": 1}, server_hostname=n2.id,
                                ssl=client_context(n3.identity, verify_node_id=True)) as resp:
            body = await resp.read()
    assert resp.status in (401, 403) and b"secret" not in body
    assert boxes.stores["n3"].seal_epoch == 0 and boxes.stores["n3"].key_epochs() == [0]
    # a second rotation: numbered next, fetched again, re-sealed again
    await boxes.epochs["n2"].rotate(user="root")
    await cluster.wait_for(lambda: s1.seal_epoch == 2 and s2.seal_epoch == 2, timeout=15, what="epoch 2")
    await cluster.wait_for(lambda: boxes.epochs["n2"].report()["resealed"], timeout=15, what="n2 re-sealed again")
    assert set(s2.epoch_counts()) == {2}
