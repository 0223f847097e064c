"""A small cluster on disk and an mTLS aiohttp server on 127.0.0.1, port 0."""

from __future__ import annotations

import contextlib
import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from floydd.security.ca import ClusterCA
from floydd.security.identity import NodeIdentity, init_cluster
from floydd.security.tls import server_context


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Cluster:
    ca: ClusterCA
    server: NodeIdentity   # the CA-holding node that serves
    member: NodeIdentity   # a second node with a certificate of the same CA
    foreign: NodeIdentity  # a node of ANOTHER cluster
    fresh: NodeIdentity    # a box with a key and id but no certificate yet


def _member(root: Path, ca: ClusterCA, name: str) -> NodeIdentity:
    me = NodeIdentity.load_or_create(root / name)
    me.install(ca.issue_node_cert(me.make_csr(), me.node_id, ["127.0.0.1"]), ca.cert_pem)
    return me


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cluster(tmp_path) -> Cluster:
    ca, server = init_cluster(tmp_path / "a" / "ca", tmp_path / "a" / "tls", "lab", ["127.0.0.1"])
    _, foreign = init_cluster(tmp_path / "x" / "ca", tmp_path / "x" / "tls", "elsewhere", ["127.0.0.1"])
    return Cluster(ca=ca, server=server, member=_member(tmp_path, ca, "b"), foreign=foreign,
                   fresh=NodeIdentity.load_or_create(tmp_path / "c"))


@contextlib.asynccontextmanager
async def serve(app: web.Application, ctx: ssl.SSLContext):
    """Run ``app`` with TLS on 127.0.0.1:0; yields ``host:port``."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]
        yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
def tls_server(cluster):
    """``async with tls_server(app[, identity]) as address``: the app served with that node's context."""
    return lambda app, identity=None: serve(app, server_context(identity or cluster.server))
