"""The node-to-node API is the documented list, all of it behind the peer-certificate check,
and every route of it is made in one module: floydd/cluster/net/routes.py."""

from __future__ import annotations

import random
import re
from pathlib import Path

from floydd.cluster.config import TEST_CONFIG
from floydd.cluster.net import routes
from floydd.cluster.net.routes import PEER_ROUTES, TRUST_ROUTES
from floydd.cluster.service import ClusterService
from floydd.daemon.joining import Trust
from floydd.daemon.peers import peer_app
from floydd.security import tls
from floydd.security.identity import init_cluster
from floydd.store import Store

ROOT = Path(__file__).resolve().parents[2]


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


def test_every_route_is_made_in_routes_py_and_documented_there():
    """No other module outside the public API (floydd/api/) makes an aiohttp route, and
    routes.py's docstring lists each of PEER_ROUTES."""
    making = re.compile(r"\bweb\.(get|post|put|patch|delete|route|view)\(|\badd_(get|post|put|patch|delete|route)\(")
    elsewhere = [str(p.relative_to(ROOT)) for folder in ("floydd", "tui", "agent") for p in (ROOT / folder).rglob("*.py")
                 if making.search(p.read_text()) and p.name != "routes.py" and "floydd/api/" not in str(p)]
    assert elsewhere == []
    documented = {(m, p) for m, p in re.findall(r"^\s+(GET|POST)\s+(/cluster/v1/\S+)", routes.__doc__, flags=re.M)}
    said = {(m, p.replace("/log", "/{what}")) for m, p in documented if "|" not in p}
    assert said == set(PEER_ROUTES)


def test_the_peer_certificate_checks_exemptions_name_listed_routes():
    paths = {path for _, path in PEER_ROUTES}
    assert set(tls.OPEN_ROUTES) | set(tls.JOINING_ROUTES) | set(tls.UNHEARD_ROUTES) <= paths
    assert tls.CLUSTER_PREFIX == "/cluster/v1/"
