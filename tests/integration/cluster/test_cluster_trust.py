"""Trust between boxes with real services on loopback: tokens as replicated records redeemed
by any voter exactly once, the CA key on every voter, certificates renewed in place."""

from __future__ import annotations

import asyncio
import os
import ssl
import stat
import time

import aiohttp
import pytest
from cryptography import x509

from floydd.daemon.renewal import TrustKeeper
from floydd.cluster.state import versions
from floydd.daemon.joining import CA_KEY_PATH, Trust
from floydd.errors import Unauthorized
from floydd.security.identity import NodeIdentity
from floydd.cluster.net.join import join
from floydd.security.tls import client_context

SECRET = os.urandom(32)


class Trusted:
    """The harness's nodes, each serving the trust routes and running a keeper."""

    def __init__(self, cluster, validity: float | None = None) -> None:
        self.cluster, self.validity = cluster, validity
        self.trust: dict[str, Trust] = {}
        self.keepers: dict[str, TrustKeeper] = {}
        cluster.make_app = self._app

    def _app(self, node):
        state_dir = self.cluster.root if node.name == "n1" else node.folder   # n1: the CA of floydd init
        trust = Trust(node.service, node.identity, state_dir, store_secret=lambda: SECRET, validity=self.validity)
        self.trust[node.name] = trust
        app = node.service.create_app()
        app.add_routes(trust.routes())
        return app

    async def start(self, n: int):
        nodes = await self.cluster.start(n)
        for node in nodes:
            self.keepers[node.name] = TrustKeeper(self.trust[node.name], interval=0.1)
            self.keepers[node.name].start()
        await self.cluster.wait_for(lambda: all(self.trust[n.name].holder.get() for n in nodes), timeout=20,
                                    what="the CA key on every voter")
        return nodes

    async def close(self) -> None:
        for keeper in self.keepers.values():
            await keeper.close()


@pytest.fixture
async def trusted(cluster):
    t = Trusted(cluster)
    try:
        yield t
    finally:
        await t.close()


def _box(tmp_path, name: str) -> NodeIdentity:
    return NodeIdentity.load_or_create(tmp_path / "boxes" / name)


async def test_every_voter_gets_the_ca_key_and_any_voter_admits_a_box_once(trusted, cluster, tmp_path):
    n1, n2, n3 = await trusted.start(3)
    key = trusted.trust["n2"].holder.folder / "ca.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    token = await trusted.trust["n2"].tokens.create(600, made_by="ada")
    box = _box(tmp_path, "a")
    result = await join(token, n3.address, box.node_id, box.key, addresses=["127.0.0.1"])
    assert result.store_secret == SECRET
    [record] = await trusted.trust["n1"].tokens.list()
    assert (record["made_by"], record["made_on"], record["used_by"]) == ("ada", n2.id, box.node_id)
    serial = f"{x509.load_pem_x509_certificate(result.cert_pem).serial_number:x}"
    await cluster.wait_for(lambda: all(n.service.state.trust.certs.get(box.node_id, {}).get("serial") == serial
                                       for n in (n1, n2, n3)), what="the new box's certificate recorded everywhere")
    other = _box(tmp_path, "b")
    with pytest.raises(Unauthorized) as err:
        await join(token, n1.address, other.node_id, other.key)
    assert err.value.code == "join_token_used"


async def test_two_voters_given_one_token_at_once_admit_one_box(trusted, tmp_path):
    _n1, n2, n3 = await trusted.start(3)
    token = await trusted.trust["n1"].tokens.create(600)
    boxes = [_box(tmp_path, "a"), _box(tmp_path, "b")]
    results = await asyncio.gather(*(join(token, via.address, box.node_id, box.key)
                                     for via, box in zip((n2, n3), boxes)), return_exceptions=True)
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 1 and isinstance(refused[0], Unauthorized), results
    assert refused[0].code == "join_token_used"


async def test_joins_go_through_the_others_once_the_first_box_is_gone_and_revoked_tokens_are_refused(
        trusted, cluster, tmp_path):
    n1, n2, n3 = await trusted.start(3)
    await cluster.kill(n1)
    await cluster.wait_leader([n2, n3])
    revoked = await trusted.trust["n2"].tokens.create(600)
    [record] = [t for t in await trusted.trust["n3"].tokens.list()]
    await trusted.trust["n3"].tokens.revoke(record["id"], by="ada")
    box = _box(tmp_path, "a")
    with pytest.raises(Unauthorized) as err:
        await join(revoked, n2.address, box.node_id, box.key)
    assert err.value.code == "join_token_revoked"
    fresh = await trusted.trust["n3"].tokens.create(600)
    result = await join(fresh, n2.address, box.node_id, box.key)
    assert result.cluster == "test"


async def test_a_learner_is_not_handed_the_ca_key(trusted, cluster):
    n1, *_ = await trusted.start(3)
    learner = await cluster.join()
    await cluster.wait_for(lambda: learner.id in n1.service.status().learners, what="a learner")
    async with aiohttp.ClientSession(headers={versions.HEADER: str(versions.PROTOCOL)}) as session:
        async with session.post(f"https://{n1.address}{CA_KEY_PATH}", json={}, server_hostname=n1.id,
                                ssl=client_context(learner.identity, verify_node_id=True)) as resp:
            body = await resp.json()
    assert resp.status == 401 and body["error"]["code"] == "not_a_voter" and "key" not in body


async def _served_serial(node) -> str:
    ctx = ssl.create_default_context(cafile=str(node.identity.ca_path))
    ctx.check_hostname = False
    _reader, writer = await asyncio.open_connection("127.0.0.1", node.port, ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return f"{x509.load_der_x509_certificate(der).serial_number:x}"


async def test_certificates_renew_in_place_and_the_cluster_keeps_working(cluster, tmp_path):
    trusted = Trusted(cluster, validity=6.0)
    try:
        nodes = await trusted.start(3)
        n3 = nodes[2]
        old = n3.identity.serial
        trusted.trust["n3"].signing_ca = lambda: None          # renew over mTLS through another voter
        await trusted.keepers["n3"].renew()
        new = n3.identity.serial
        assert new != old and await _served_serial(n3) == new     # a fresh handshake shows the new one
        await cluster.wait_for(lambda: all(n.service.state.trust.certs[n3.id]["serial"] == new
                                           and n.service.state.trust.certs[n3.id]["previous"]["serial"] == old
                                           for n in nodes), what="the renewal recorded everywhere")
        for node in nodes[:2]:
            await trusted.keepers[node.name].renew()
        # 6-second certificates from here on: each node renews its own by itself, again and again
        first = n3.identity.not_after
        await cluster.wait_for(lambda: all(trusted.keepers[n.name].renewals >= 2 for n in nodes), timeout=30,
                               what="every node renewing by itself")
        await cluster.wait_for(lambda: n3.identity.not_after > first, what="a later certificate")
        await cluster.wait_for(lambda: time.time() > first + 0.5, what="the first short certificate to expire")
        for number, node in enumerate(nodes, start=7):   # forwarded to the leader over the renewed certificates
            assert await node.service.reserve_numbers("after-renewal", number) >= number
    finally:
        await trusted.close()


async def test_tokens_of_a_legacy_file_are_imported_and_keep_working(trusted, cluster, tmp_path):
    from floydd.security.tokens import TokenStore
    legacy = TokenStore(cluster.root / "ca" / "tokens.db", ca_fingerprint=cluster.ca.fingerprint)
    kept, spent = legacy.create(600), legacy.create(600)
    legacy.redeem(spent.split(".")[2], spent.split(".")[3])
    _n1, n2, _n3 = await trusted.start(3)
    await cluster.wait_for(lambda: (cluster.root / "ca" / "tokens.db.imported").exists(), what="the import")
    assert not (cluster.root / "ca" / "tokens.db").exists()
    listed = await trusted.trust["n2"].tokens.list()
    assert [(t["id"], t["made_by"]) for t in listed] == [(kept.split(".")[2], "imported")]
    box = _box(tmp_path, "a")
    result = await join(kept, n2.address, box.node_id, box.key)
    assert result.cluster == "test"
