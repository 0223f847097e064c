"""Node-to-node mutual TLS on loopback: who gets in to /cluster/v1/ and who does not."""

from __future__ import annotations

import asyncio
import ssl

import aiohttp
import pytest
from aiohttp import web

from floydd.errors import Unauthorized
from floydd.security.tls import check_peer, client_context, peer_node_id, require_peer_cert, server_context


def _app(**guard) -> web.Application:
    async def ping(request: web.Request) -> web.Response:
        return web.json_response({"peer": peer_node_id(request)})

    async def join(request: web.Request) -> web.Response:
        return web.json_response({"peer": peer_node_id(request)})

    async def public(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application(middlewares=[require_peer_cert(**guard)])
    app.router.add_get("/cluster/v1/ping", ping)
    app.router.add_get("/cluster/v1/join", join)
    app.router.add_get("/v1/health", public)
    return app


def _no_cert_context(cluster) -> ssl.SSLContext:
    """Trusts the cluster CA but has no certificate of its own (a box that has not joined)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(cadata=cluster.ca.cert_pem.decode())
    return ctx


async def _get(address: str, path: str, ctx: ssl.SSLContext, **kw):
    async with aiohttp.ClientSession() as session:
        async with session.get(f"https://{address}{path}", ssl=ctx, **kw) as resp:
            return resp.status, await resp.json()


async def _connect(address: str, ctx: ssl.SSLContext):
    host, port = address.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port), ssl=ctx)


async def test_a_member_with_a_node_certificate_gets_in(cluster, tls_server):
    async with tls_server(_app()) as address:
        status, body = await _get(address, "/cluster/v1/ping", client_context(cluster.member))
    assert status == 200
    assert body == {"peer": cluster.member.node_id}  # the server read our id from our certificate


async def test_a_client_without_a_certificate_is_refused_with_json(cluster, tls_server):
    async with tls_server(_app()) as address:
        status, body = await _get(address, "/cluster/v1/ping", _no_cert_context(cluster))
        open_status, open_body = await _get(address, "/cluster/v1/join", _no_cert_context(cluster))
        other_status, _ = await _get(address, "/v1/health", _no_cert_context(cluster))
    assert status == 403
    assert body["error"]["code"] == "peer_certificate_required"
    assert "floydd join" in body["error"]["hint"]
    assert (open_status, open_body) == (200, {"peer": None})  # the join route stays open
    assert other_status == 200  # routes outside /cluster/v1/ are not this guard's business


async def test_a_client_with_a_certificate_of_another_cluster_is_refused(cluster, tls_server):
    ctx = client_context(cluster.foreign)
    ctx.load_verify_locations(cadata=cluster.ca.cert_pem.decode())  # it even trusts our server
    async with tls_server(_app()) as address:
        for path in ("/cluster/v1/ping", "/cluster/v1/join"):
            with pytest.raises(aiohttp.ClientError):
                await _get(address, path, ctx)


async def test_a_member_refuses_a_server_of_another_cluster(cluster, tls_server):
    async with tls_server(_app(), cluster.foreign) as address:
        with pytest.raises(aiohttp.ClientSSLError):
            await _get(address, "/cluster/v1/ping", client_context(cluster.member))


async def test_the_handshake_checks_the_expected_node_id(cluster, tls_server):
    ctx = client_context(cluster.member, verify_node_id=True)
    async with tls_server(_app()) as address:
        status, _ = await _get(address, "/cluster/v1/ping", ctx, server_hostname=cluster.server.node_id)
        assert status == 200
        with pytest.raises(aiohttp.ClientSSLError):
            await _get(address, "/cluster/v1/ping", ctx, server_hostname=cluster.member.node_id)


async def test_check_peer_after_connecting(cluster, tls_server):
    async with tls_server(_app()) as address:
        _, writer = await _connect(address, client_context(cluster.member))
        try:
            assert peer_node_id(writer) == cluster.server.node_id
            assert check_peer(writer.transport, cluster.server.node_id) == cluster.server.node_id
            with pytest.raises(Unauthorized, match="not node"):
                check_peer(writer, cluster.member.node_id)
        finally:
            writer.close()
            await writer.wait_closed()


async def test_removed_nodes_are_refused(cluster, tls_server):
    app = _app(is_member=lambda node_id: node_id != cluster.member.node_id)
    async with tls_server(app) as address:
        status, body = await _get(address, "/cluster/v1/ping", client_context(cluster.member))
    assert status == 403 and body["error"]["code"] == "not_a_member"


async def test_tls_is_at_least_1_2_and_prefers_1_3(cluster, tls_server):
    assert server_context(cluster.server).minimum_version == ssl.TLSVersion.TLSv1_2
    assert client_context(cluster.member).minimum_version == ssl.TLSVersion.TLSv1_2
    only_12 = client_context(cluster.member)
    only_12.maximum_version = ssl.TLSVersion.TLSv1_2
    async with tls_server(_app()) as address:
        for ctx, version in ((client_context(cluster.member), "TLSv1.3"), (only_12, "TLSv1.2")):
            _, writer = await _connect(address, ctx)
            assert writer.get_extra_info("ssl_object").version() == version
            assert peer_node_id(writer) == cluster.server.node_id
            writer.close()
            await writer.wait_closed()


async def test_a_path_trick_does_not_skip_the_guard(cluster, tls_server):
    async with tls_server(_app()) as address:
        status, _ = await _get(address, "/cluster/v1/%70ing", _no_cert_context(cluster))
    assert status == 403
