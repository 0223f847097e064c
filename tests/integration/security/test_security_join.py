"""The join exchange end to end on loopback: pin first, token once, secret only over the pinned channel."""

from __future__ import annotations

import base64
import logging
import os
import socket

import aiohttp
import pytest
from aiohttp import web

from floydd.errors import Conflict, InvalidSpec, Unauthorized, Unavailable
from floydd.security._x509 import new_node_id
from floydd.security.identity import NodeIdentity
from floydd.cluster.net.join_voter import ca_handler, join_routes
from floydd.cluster.net.join import join
from floydd.security.tls import client_context, peer_node_id, require_peer_cert
from floydd.security.tokens import TOKEN_SHAPE, TokenStore, parse_token

STORE_SECRET = os.urandom(32)


class JoinServer:
    """The CA node's node-to-node app; remembers every request it saw and every node that joined."""

    def __init__(self, cluster, tokens: TokenStore) -> None:
        self.seen: list[tuple[str, str]] = []
        self.joined = []

        @web.middleware
        async def record(request, handler):
            self.seen.append((request.method, request.path))
            return await handler(request)

        async def ping(request):
            return web.json_response({"peer": peer_node_id(request)})

        self.app = web.Application(middlewares=[record, require_peer_cert()])
        self.app.router.add_routes(join_routes(
            cluster.ca, tokens, store_secret_provider=lambda: STORE_SECRET, on_joined=self._on_joined,
            peers_provider=lambda: [{"node_id": cluster.server.node_id}]))
        self.app.router.add_get("/cluster/v1/ping", ping)

    async def _on_joined(self, node) -> None:
        self.joined.append(node)

    @property
    def join_posts(self) -> int:
        return self.seen.count(("POST", "/cluster/v1/join"))


@pytest.fixture
def tokens(tmp_path, cluster, clock) -> TokenStore:
    return TokenStore(tmp_path / "a" / "tokens.db", ca_fingerprint=cluster.ca.fingerprint, clock=clock)


@pytest.fixture
def server(cluster, tokens) -> JoinServer:
    return JoinServer(cluster, tokens)


def _new_box(tmp_path) -> NodeIdentity:
    return NodeIdentity.load_or_create(tmp_path / new_node_id())


async def test_a_good_token_joins_once_and_the_new_node_can_talk_mtls(cluster, tokens, server, tls_server, tmp_path):
    box = cluster.fresh
    async with tls_server(server.app) as address:
        token = tokens.create(600, address=address)
        result = await join(token, None, box.node_id, box.key, addresses=["127.0.0.1"])
        assert result.store_secret == STORE_SECRET and result.cluster == "lab"
        assert result.ca_fingerprint == cluster.ca.fingerprint
        assert result.peers == ({"node_id": cluster.server.node_id},)
        assert [n.node_id for n in server.joined] == [box.node_id]
        assert server.joined[0].addresses == ["127.0.0.1"]
        box.install(result.cert_pem, result.ca_pem, expect_ca_fingerprint=parse_token(token).ca_fingerprint)

        async with aiohttp.ClientSession() as session:
            async with session.get(f"https://{address}/cluster/v1/ping", ssl=client_context(box)) as resp:
                assert (resp.status, await resp.json()) == (200, {"peer": box.node_id})

        again = _new_box(tmp_path)
        with pytest.raises(Unauthorized, match="join token already used"):
            await join(token, address, again.node_id, again.key)
    assert server.join_posts == 2 and len(server.joined) == 1


async def test_an_expired_token_is_refused(cluster, tokens, server, tls_server, clock):
    async with tls_server(server.app) as address:
        token = tokens.create(60)
        clock.now += 61
        with pytest.raises(Unauthorized, match="join token expired") as err:
            await join(token, address, cluster.fresh.node_id, cluster.fresh.key)
    assert err.value.hint == "make a new one with floydd token create"
    assert server.joined == []


async def test_a_token_for_another_cluster_stops_before_sending_anything(cluster, server, tls_server, tmp_path):
    foreign_tokens = TokenStore(tmp_path / "x" / "tokens.db", ca_fingerprint=cluster.foreign.cluster_fingerprint)
    async with tls_server(server.app) as address:
        with pytest.raises(Unauthorized) as err:
            await join(foreign_tokens.create(600), address, cluster.fresh.node_id, cluster.fresh.key)
    assert err.value.code == "ca_fingerprint_mismatch"
    assert str(err.value) == (f"the server at {address} is not the cluster your token is for "
                              "(CA fingerprint mismatch)")
    assert server.seen == [("GET", "/cluster/v1/ca")] and server.join_posts == 0


async def test_an_impostor_serving_the_real_ca_is_caught_by_its_own_certificate(cluster, tokens, tls_server):
    """A server that hands out our CA but cannot prove it holds a certificate from it."""
    seen = []

    @web.middleware
    async def record(request, handler):
        seen.append((request.method, request.path))
        return await handler(request)

    impostor = web.Application(middlewares=[record])
    impostor.router.add_get("/cluster/v1/ca", ca_handler(cluster.ca))

    async def never(request):
        return web.json_response({})

    impostor.router.add_post("/cluster/v1/join", never)
    async with tls_server(impostor, cluster.foreign) as address:
        with pytest.raises(Unauthorized, match="CA fingerprint mismatch"):
            await join(tokens.create(600), address, cluster.fresh.node_id, cluster.fresh.key)
    assert seen == [("GET", "/cluster/v1/ca")]


async def test_a_malformed_token_is_refused_before_any_traffic(cluster, server, tls_server):
    async with tls_server(server.app) as address:
        with pytest.raises(InvalidSpec) as err:
            await join("K10abc::server:secret", address, cluster.fresh.node_id, cluster.fresh.key)
    assert TOKEN_SHAPE in err.value.hint
    assert server.seen == []


async def test_a_refused_request_does_not_use_the_token_up(cluster, tokens, server, tls_server):
    async with tls_server(server.app) as address:
        token = tokens.create(600)
        with pytest.raises(Conflict):  # that node id already has a certificate
            await join(token, address, cluster.server.node_id, cluster.fresh.key)
        with pytest.raises(InvalidSpec, match="not an IP address"):
            await join(token, address, cluster.fresh.node_id, cluster.fresh.key, addresses=["not-an-ip"])
        result = await join(token, address, cluster.fresh.node_id, cluster.fresh.key)
    assert result.node_id == cluster.fresh.node_id


async def test_wrong_addresses_say_so(cluster, tokens):
    token = tokens.create(600)
    with pytest.raises(InvalidSpec, match="no address"):
        await join(token, None, cluster.fresh.node_id, cluster.fresh.key)
    with pytest.raises(InvalidSpec, match="needs TLS"):
        await join(token, "http://127.0.0.1:1", cluster.fresh.node_id, cluster.fresh.key)
    with pytest.raises(InvalidSpec, match="not HOST:PORT"):
        await join(token, "gpu-box.lab", cluster.fresh.node_id, cluster.fresh.key)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(Unavailable, match=f"127.0.0.1:{port}"):
            await join(token, f"127.0.0.1:{port}", cluster.fresh.node_id, cluster.fresh.key, timeout=5)


async def test_no_secret_in_logs_or_reprs(cluster, tokens, server, tls_server, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    async with tls_server(server.app) as address:
        token = tokens.create(600)
        parsed = parse_token(token)
        result = await join(token, address, cluster.fresh.node_id, cluster.fresh.key)
        again = _new_box(tmp_path)
        with pytest.raises(Unauthorized) as err:
            await join(token, address, again.node_id, again.key)
    assert any(r.name == "floydd.security" for r in caplog.records)
    secrets_ = [parsed.secret, token, STORE_SECRET.hex(), base64.b64encode(STORE_SECRET).decode()]
    shown = caplog.text + repr(result) + repr(parsed) + repr(tokens) + repr(cluster.ca) + repr(cluster.fresh) \
        + str(err.value) + err.value.hint
    for secret in secrets_:
        assert secret not in shown
    assert str(STORE_SECRET) not in repr(result)


async def test_join_attempts_are_rate_limited_per_address_and_logged(cluster, tokens, tls_server, caplog):
    from floydd.security.ratelimit import RateLimiter
    app = web.Application()
    app.router.add_routes(join_routes(cluster.ca, tokens, store_secret_provider=lambda: STORE_SECRET,
                                      limiter=RateLimiter(rate=1 / 60, burst=2)))
    box = cluster.fresh
    caplog.set_level(logging.INFO, logger="floydd.security")
    async with tls_server(app) as address:
        wrong = parse_token(tokens.create(600))
        body = {"token_id": wrong.token_id, "secret": "0" * 32, "csr": box.make_csr().decode(),
                "node_id": box.node_id, "addresses": []}
        answers = []
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.post(f"https://{address}/cluster/v1/join", json=body, ssl=False) as resp:
                    answers.append((resp.status, resp.headers.get("Retry-After"), await resp.json()))
        good = tokens.create(600, address=address)
        with pytest.raises(Unavailable) as err:        # the same address, still over its share
            await join(good, None, box.node_id, box.key)
    assert [a[0] for a in answers] == [401, 401, 429]
    assert int(answers[2][1]) >= 1 and answers[2][2]["error"]["code"] == "rate_limited"
    assert err.value.code == "rate_limited" and "try again in" in err.value.message
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("join refused")]
    assert len(refusals) == 4
    assert f"token {wrong.token_id}" in refusals[0] and "127.0.0.1" in refusals[0] and "not recognised" in refusals[0]
    assert "too many attempts" in refusals[2]
    assert wrong.secret not in caplog.text
