"""A laptop pins the box it logged in to, not only the CA (issue 20): in-process boxes on
loopback with real raft and mTLS, each serving the real ``/v1`` edge (middleware, ``/v1/ca``,
``/v1/whoami``, the ``Floydd-Trust`` header) over real TLS; the laptop is the real ``floyd``
CLI. A recording TLS server holding a box's key stands in for whoever answers at the login
address: it must not read a byte when it is not the pinned box or its certificate is revoked.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import ssl
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from aiohttp import web
from click.testing import CliRunner

from floydd.api import apitokens, keys
from floydd.api.boxtrust import trust_header
from floydd.api.middleware import auth_middleware, error_middleware
from floydd.api.throttle import install as install_throttle
from floydd.cli.floyd import cli as floyd
from floydd.cluster.state.apitokens import new_api_token
from floydd.config import preset_for_tests
from floydd.security.identity import NodeIdentity
from floydd.security.tls import api_server_context


def _api_app(node) -> web.Application:
    """What a box's daemon serves on its TLS API, for the parts a laptop's login meets."""
    app = web.Application(middlewares=[error_middleware, auth_middleware])
    app[keys.CONFIG] = config = preset_for_tests(node.folder)
    app[keys.CLUSTER] = node.service
    app.router.add_routes(apitokens.routes)
    install_throttle(app, config)
    app.on_response_prepare.append(trust_header)
    return app


@contextlib.asynccontextmanager
async def _serve_api(node, port: int = 0):
    runner = web.AppRunner(_api_app(node), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=api_server_context(node.identity))
    await site.start()
    try:
        yield f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = json.dumps({"person": "mallory", "node": "x", "api": None}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def _impostor(identity: NodeIdentity, port: int) -> Iterator[list]:
    """A TLS server on ``port`` with ``identity``'s certificate and key (from the lab's CA) that
    records every request it reads."""
    handler = type("Recorder", (_Recorder,), {"seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(identity.cert_path, identity.key_path)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler.seen
    finally:
        server.shutdown()
        server.server_close()


async def _record_certs(cluster, nodes) -> None:
    """What each real box's TrustKeeper commits at start (``node.cert``), so that removing a
    node revokes its certificate."""
    for node in nodes:
        await node.service.driver.propose({"op": "node.cert", "id": node.id, "serial": node.identity.serial,
                                           "not_after": node.identity.not_after, "ts": time.time()})
    await cluster.wait_for(lambda: all(len(n.service.state.trust.certs) == len(nodes) for n in nodes),
                           what="the certificates recorded everywhere")


async def _token(node, person: str = "alice") -> str:
    new = new_api_token()
    await node.service.change_account({"op": "apitoken.create", "id": new.token_id, "person": person,
                                       "secret_sha256": new.secret_sha256, "expires": None, "label": "laptop",
                                       "user": person})
    return new.text


@pytest.fixture
def laptop(tmp_path, monkeypatch):
    """``await laptop(*args, input=...)``: the real ``floyd`` CLI, run off the loop; its login in tmp."""
    monkeypatch.setenv("FLOYD_CONFIG_DIR", str(tmp_path / "laptop"))
    monkeypatch.delenv("FLOYD_HOST", raising=False)
    monkeypatch.delenv("FLOYDD_STATE_DIR", raising=False)

    async def run(*args: str, input: str | None = None):
        return await asyncio.to_thread(CliRunner().invoke, floyd, list(args), input=input)
    run.login_file = tmp_path / "laptop" / "login.json"
    return run


async def test_a_removed_box_s_certificate_at_the_login_address_is_refused_and_gets_no_token(cluster, laptop):
    box1, box3 = await cluster.start(2)
    box1.service.name, box3.service.name = "box1", "box3"
    await _record_certs(cluster, [box1, box3])
    token = await _token(box1)
    async with _serve_api(box1) as address:
        port = int(address.rsplit(":", 1)[1])
        res = await laptop("login", address, "--fingerprint", cluster.ca.fingerprint, "--token-stdin",
                           input=token + "\n")
        assert res.exit_code == 0, res.output
        assert f"logged in to {address} as alice: box" in res.output and box1.id in res.output
        saved = json.loads(laptop.login_file.read_text())
        assert saved["node_id"] == box1.id and set(saved["trust"]["members"]) == {box1.id, box3.id}
        assert saved["trust"]["revoked"] == {}

        # box3 is removed; the laptop's next command learns it from the box it is pinned to
        await box1.service.remove_node(box3.id, user="alice")
        await cluster.wait_for(lambda: box3.identity.serial in box1.service.state.revoked, what="box3 revoked")
        res = await laptop("whoami")
        assert res.exit_code == 0 and "alice on https://" in res.output, res.output
        saved = json.loads(laptop.login_file.read_text())
        assert saved["trust"]["revoked"] == {box3.identity.serial: box3.id}
        assert set(saved["trust"]["members"]) == {box1.id} and saved["trust"]["names"][box3.id]

    # box1's address now leads to whoever holds box3's key
    with _impostor(box3.identity, port) as seen:
        res = await laptop("status")
        assert res.exit_code == 1 and "Traceback" not in res.output
        name3 = json.loads(laptop.login_file.read_text())["trust"]["names"][box3.id]
        name1 = json.loads(laptop.login_file.read_text())["trust"]["names"][box1.id]
        assert (f"error: the server at {address} is not {name1} (it presented {name3}'s certificate, removed from "
                "the lab); no token was sent") in res.output
        assert "floyd login again" in res.output
        assert seen == []                       # not a byte of the request, the token least of all


async def test_another_box_of_the_lab_is_refused_and_a_renewed_certificate_of_the_pinned_box_is_not(cluster, laptop):
    box1, box2 = await cluster.start(2)
    await _record_certs(cluster, [box1, box2])
    token = await _token(box1)
    async with _serve_api(box1) as address:
        port = int(address.rsplit(":", 1)[1])
        res = await laptop("login", address, "--fingerprint", cluster.ca.fingerprint, "--token-stdin",
                           input=token + "\n")
        assert res.exit_code == 0, res.output
        # box1 renews its certificate (a new serial, same node): served at once, still box1
        old = box1.identity.serial
        box1.identity.install(cluster.ca.issue_node_cert(box1.identity.make_csr(), box1.id, ["127.0.0.1"],
                                                         allow_reissue=True), cluster.ca.cert_pem)
        assert box1.identity.serial != old
        res = await laptop("whoami")
        assert res.exit_code == 0 and "alice on https://" in res.output, res.output
    with _impostor(box2.identity, port) as seen:
        res = await laptop("whoami")
        assert res.exit_code == 1
        assert f"is not {box1.name} (it presented {box2.name}'s certificate, another box of the lab)" in res.output
        assert seen == []


async def test_a_login_of_an_older_floyd_pins_the_box_on_first_use_and_says_so(cluster, laptop):
    box1, box2 = await cluster.start(2)
    token = await _token(box1)
    async with _serve_api(box1) as address:
        port = int(address.rsplit(":", 1)[1])
        res = await laptop("login", address, "--fingerprint", cluster.ca.fingerprint, "--token-stdin",
                           input=token + "\n")
        assert res.exit_code == 0, res.output
        saved = json.loads(laptop.login_file.read_text())
        older = {k: saved[k] for k in ("address", "ca_pem", "fingerprint", "token", "person")}
        laptop.login_file.write_text(json.dumps(older))              # what floyd 0.2 wrote
        res = await laptop("whoami")
        assert res.exit_code == 0, res.output
        assert f"now pins the box that answered there" in res.output and box1.id in res.output
        assert json.loads(laptop.login_file.read_text())["node_id"] == box1.id
        res = await laptop("whoami")
        assert res.exit_code == 0 and "now pins" not in res.output     # said once
    with _impostor(box2.identity, port) as seen:
        res = await laptop("whoami")
        assert res.exit_code == 1 and "no token was sent" in res.output and seen == []


async def test_login_shows_the_box_and_a_changed_box_is_warned_about(cluster, laptop):
    box1, box2 = await cluster.start(2)
    token = await _token(box1)
    async with _serve_api(box1) as one, _serve_api(box2) as two:
        res = await laptop("login", one, "--yes", "--token-stdin", input=token + "\n")
        assert res.exit_code == 0, res.output                   # shown, as SSH shows a new host key
        assert (f"the cluster CA at {one} is sha256:{cluster.ca.fingerprint}; the box there is {box1.name} "
                f"(node {box1.id})") in res.output
        saved = json.loads(laptop.login_file.read_text())
        saved["address"] = two                   # as if box2 now answered at the address logged in to
        laptop.login_file.write_text(json.dumps(saved))
        res = await laptop("login", two, "--fingerprint", cluster.ca.fingerprint, "--token-stdin", input=token + "\n")
        assert res.exit_code == 0, res.output
        assert f"WARNING: the box at {two} changed since you last logged in (was node {box1.id}" in res.output
        assert json.loads(laptop.login_file.read_text())["node_id"] == box2.id
