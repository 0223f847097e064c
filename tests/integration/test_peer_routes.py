"""The node-to-node API is the documented list, all of it behind the peer-certificate check."""

from __future__ import annotations

import random

from floydd.cluster.config import TEST_CONFIG
from floydd.cluster.service import ClusterService
from floydd.daemon.peers import PEER_ROUTES, peer_app
from floydd.daemon.joining import TRUST_ROUTES, Trust
from floydd.security.identity import init_cluster
from floydd.store import Store


def _served(app) -> set[tuple[str, str]]:
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.method not in ("HEAD", "OPTIONS")}


def test_the_mtls_app_serves_exactly_the_listed_routes(tmp_path):
    ca, identity = init_cluster(tmp_path / "ca", tmp_path / "tls", "test", ["127.0.0.1"])
    service = ClusterService(identity, tmp_path / "cluster", advertise="127.0.0.1:1", config=TEST_CONFIG,
                             rng=random.Random(1))
    store = Store.open(tmp_path / "store")
    try:
        trust = Trust(service, identity, tmp_path, store_secret=lambda: b"")
        member = peer_app(service, store=store, jobs=lambda: None, trust=trust)
        assert _served(member) == set(PEER_ROUTES)
        alone = peer_app(service, store=store, jobs=lambda: None)
        assert _served(alone) == set(PEER_ROUTES) - TRUST_ROUTES
        assert all(path.startswith("/cluster/v1/") for _, path in PEER_ROUTES)
    finally:
        store.close()
