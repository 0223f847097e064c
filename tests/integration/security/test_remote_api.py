"""The ``/v1`` API over TLS with personal tokens, against a real daemon of a cluster of one
(``floydd init``, then :func:`floydd.daemon.main.serve` in a thread, on 127.0.0.1 only,
discovery off): what ``floyd login`` and a laptop's ``floyd`` rely on.

And the pinning seen from the other side: a box whose certificate is from another CA gets
no byte of a request, and ``floyd login`` with a wrong fingerprint sends nothing but
``GET /v1/ca`` (a recording TLS server stands in for the box there).
"""

from __future__ import annotations

import http.client
import http.server
import json
import logging
import os
import pwd
import ssl
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from floydd.cli.floyd import cli as floyd
from floydd.cli.floydd import cli as floydd
from floydd.client import Client
from floydd.cluster.state.apitokens import parse_api_token
from floydd.errors import Forbidden, Unauthorized
from floydd.security.identity import NodeIdentity, init_cluster
from floydd.security.pinning import fingerprint_of_pem, first_contact, pinned_context
from tests.conftest import wait_until
from tests.harness.inprocess import tls_box

ME = pwd.getpwuid(os.getuid()).pw_name


THROTTLE = {"api_auth_failures": 10, "api_auth_window": 1.0}
"""The box's limit on failed tokens: 10 at once, then 10 a second (the tests below come from
127.0.0.1, well under it; the flood test from 127.0.0.2 and 127.0.0.3)."""


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    with tls_box(tmp_path_factory.mktemp("remote"), **THROTTLE) as running:
        yield running


def _raw(address: str, ca_pem: bytes, path: str, token: str | None = None, *,
         source: str | None = None) -> tuple[int, dict]:
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPSConnection(host, int(port), timeout=30, context=pinned_context(ca_pem),
                                       source_address=(source, 0) if source else None)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_a_personal_token_speaks_for_its_person_until_revoked(box):
    local, address, state = box
    contact = first_contact(*address.split(":"))
    assert contact.fingerprint == fingerprint_of_pem((state / "tls" / NodeIdentity.CA_FILE).read_bytes())
    made = local.create_api_token(label="laptop")
    remote = Client(address=address, token=made["token"], ca_pem=contact.ca_pem, timeout=30)
    who = remote.whoami()
    assert who["person"] == ME and who["api"] == address
    assert remote.where.startswith("https://")
    assert [n["name"] for n in remote.nodes()]          # a read as that person
    # a person over TLS never makes the daemon read a path of its box: code travels as a tar
    with pytest.raises(Forbidden, match="only for its own user"):
        remote.submit({"project": "p", "command": "true", "code_path": str(state)})

    token_id, _ = parse_api_token(made["token"])
    local.revoke_api_token(token_id)
    with pytest.raises(Unauthorized, match="revoked") as refused:   # at once: the next request
        remote.whoami()
    assert refused.value.code == "api_token_revoked"


def test_a_token_lets_the_box_act_for_its_person_signed_in_nowhere_until_the_person_is_removed(box, tmp_path):
    """A box acts only for people signed in on it (floydd.cluster.state.signin): carol is signed in
    on no box, yet her token presented to this box signs what it proposes for her (a token, a
    job, its stop, a dataset); removing her revokes the token, and adding her again does not
    revive it."""
    local, address, _state = box
    ca = first_contact(*address.split(":")).ca_pem
    local.add_person("carol", boxes=[])
    made = local.create_api_token(person="carol", label="carol's laptop")     # the admin's call, for her
    assert made["public_key"] and made["person"] == "carol"
    remote = Client(address=address, token=made["token"], ca_pem=ca, timeout=30)
    second = remote.create_api_token(label="her script")                       # a change, proposed for her
    assert second["person"] == "carol"
    code = tmp_path / "code"
    code.mkdir()
    (code / "data.txt").write_text("x\n")
    job = remote.submit({"project": "carols", "command": "sleep 30", "code_upload": remote.upload_code(code)["code_upload"],
                         "idem_key": "carol-job-1"})
    assert job["user"] == "carol"
    assert remote.stop(job["id"])["state"] in ("stopped", "failed")
    events = list(remote.upload_tar(code, "carols-data"))
    assert events[-1]["result"]["owner"] == "carol", events[-1]
    assert {t["id"] for t in remote.api_tokens()} >= {made["id"], second["id"]}
    local.remove_person("carol")
    local.add_person("carol", boxes=[])
    with pytest.raises(Unauthorized, match="revoked") as refused:
        remote.whoami()
    assert refused.value.code == "api_token_revoked"
    assert {t["id"]: (t["state"], t["revoked_by"]) for t in local.api_tokens() if t["person"] == "carol"} == \
        {made["id"]: ("revoked", ME), second["id"]: ("revoked", ME)}
    local.remove_person("carol")


def test_requests_without_a_good_token_are_refused_and_only_the_ca_is_open(box):
    local, address, _state = box
    ca = first_contact(*address.split(":")).ca_pem
    assert _raw(address, ca, "/v1/jobs")[1]["error"]["code"] == "api_token_missing"
    status, err = _raw(address, ca, "/v1/jobs", token="not-a-token")
    assert (status, err["error"]["code"]) == (401, "api_token_invalid")
    made = local.create_api_token()
    token_id, secret = parse_api_token(made["token"])
    forged = f"FLP1.{token_id}.{'0' * 32 if secret != '0' * 32 else '1' * 32}"
    assert _raw(address, ca, "/v1/jobs", token=forged)[1]["error"]["code"] == "api_token_invalid"
    assert _raw(address, ca, "/v1/jobs", token=made["token"])[0] == 200
    conn = http.client.HTTPSConnection(*address.split(":"), timeout=30, context=pinned_context(ca))
    conn.request("GET", "/v1/ca")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read().startswith(b"-----BEGIN CERTIFICATE-----")
    conn.close()


def test_floyd_login_saves_a_pinned_login_0600_that_floyd_then_uses(box, tmp_path, monkeypatch):
    local, address, _state = box
    token = local.create_api_token(label="cli")["token"]
    monkeypatch.setenv("FLOYD_CONFIG_DIR", str(tmp_path / "laptop"))
    monkeypatch.delenv("FLOYDD_STATE_DIR", raising=False)
    fingerprint = first_contact(*address.split(":")).fingerprint
    res = CliRunner().invoke(floyd, ["login", address, "--fingerprint", f"sha256:{fingerprint[:16]}",
                                     "--token-stdin"], input=token + "\n")
    assert res.exit_code == 0, res.output
    saved = tmp_path / "laptop" / "login.json"
    assert oct(saved.stat().st_mode & 0o777) == "0o600"
    assert json.loads(saved.read_text())["person"] == ME
    res = CliRunner().invoke(floyd, ["whoami"])
    assert res.exit_code == 0 and f"{ME} on https://{address}" in res.output, res.output
    res = CliRunner().invoke(floyd, ["logout", "--revoke"])
    assert res.exit_code == 0 and not saved.exists(), res.output
    assert {t["id"]: t["state"] for t in local.api_tokens()}[parse_api_token(token)[0]] == "revoked"


# -- failed tokens, throttled per source (floydd.api.throttle) ------------------------------------


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_flood_of_bad_tokens_is_capped_answered_429_and_logged_in_aggregate(box):
    local, address, _state = box
    ca = first_contact(*address.split(":")).ca_pem
    good = local.create_api_token(label="flood")["token"]
    lines = _Lines()
    logging.getLogger("floydd").addHandler(lines)
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPSConnection(host, int(port), timeout=30, context=pinned_context(ca),
                                       source_address=("127.0.0.2", 0))      # one keep-alive connection
    statuses, retry, good_there = [], set(), []
    try:
        started = time.monotonic()
        for i in range(400):
            conn.request("GET", "/v1/jobs", headers={"Authorization": f"Bearer FLP1.{i:016x}.{'0' * 32}"})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            statuses.append(resp.status)
            if resp.status == 429:
                retry.add(resp.getheader("Retry-After"))
                assert body["error"]["code"] == "auth_throttled" and "try again in" in body["error"]["message"]
            else:
                assert (resp.status, body["error"]["code"]) == (401, "api_token_invalid")
            if i % 40 == 39:      # a good token from the flooding source: the address is throttled, not the token
                conn.request("GET", "/v1/whoami", headers={"Authorization": f"Bearer {good}"})
                resp = conn.getresponse()
                resp.read()
                good_there.append(resp.status)
        elapsed = time.monotonic() - started
        # another source's good token is not slowed
        assert _raw(address, ca, "/v1/whoami", token=good, source="127.0.0.3")[0] == 200
    finally:
        conn.close()
    assert set(good_there) <= {200, 429} and good_there.count(429) > len(good_there) / 2, good_there
    checked = statuses.count(401)
    assert statuses.count(429) == 400 - checked and retry == {"1"}
    assert 10 <= checked <= 10 + 10 * elapsed + 1, (checked, elapsed)      # the burst, then 10 a second
    # one line at the first refusal, then one per second counting the rest (all of them); none per request
    refused = 400 + good_there.count(429)

    def counted() -> list[str]:
        return [line for line in lines.lines if line.startswith("refused ") and " from 127.0.0.2 in the last " in line]
    try:
        wait_until(lambda: sum(int(line.split()[1].replace(",", "")) for line in counted()) >= refused - 1, 10,
                   what="the aggregate lines", details=lambda: "\n".join(lines.lines))
        about = [line for line in lines.lines if "127.0.0.2" in line]
    finally:
        logging.getLogger("floydd").removeHandler(lines)
    assert about[0].startswith("refused a personal token from 127.0.0.2: API token not recognised")
    assert sum(int(line.split()[1].replace(",", "")) for line in counted()) == refused - 1, about
    assert len(about) <= 2 + elapsed + 1 and "429 unchecked" in counted()[0], about
    # the source's share comes back: its good token works again after Retry-After
    assert wait_until(lambda: _raw(address, ca, "/v1/whoami", token=good, source="127.0.0.2")[0] == 200, 5,
                      what="127.0.0.2 let in again")


# -- the other side of the pin ------------------------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None]] = []
    ca_pem = b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(("GET", self.path, self.headers.get("Authorization")))
        body = self.ca_pem if self.path == "/v1/ca" else json.dumps({"person": "mallory", "node": "x", "api": None}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def _impostor(tmp: Path) -> Iterator[tuple[str, list, bytes]]:
    """A TLS server with a certificate of another CA that records every request it reads."""
    ca, identity = init_cluster(tmp / "ca", tmp / "tls", "impostor", ["127.0.0.1"])
    handler = type("Recorder", (_Recorder,), {"seen": [], "ca_pem": ca.cert_pem})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(identity.cert_path, identity.key_path)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", handler.seen, ca.cert_pem
    finally:
        server.shutdown()
        server.server_close()


def test_a_box_of_another_ca_gets_no_request_at_all(box, tmp_path):
    local, address, _state = box
    ours = first_contact(*address.split(":")).ca_pem
    with _impostor(tmp_path) as (where, seen, _their_ca):
        token = local.create_api_token()["token"]
        with pytest.raises(Unauthorized, match="not a box of the cluster you logged in to") as refused:
            Client(address=where, token=token, ca_pem=ours, timeout=30).whoami()
        assert refused.value.code == "ca_fingerprint_mismatch"
        assert seen == []                      # the handshake failed: not even the path was sent


def test_floyd_login_with_a_wrong_fingerprint_sends_nothing_but_the_ca_request(box, tmp_path, monkeypatch):
    local, address, _state = box
    ours = first_contact(*address.split(":")).fingerprint
    monkeypatch.setenv("FLOYD_CONFIG_DIR", str(tmp_path / "laptop"))
    with _impostor(tmp_path) as (where, seen, _their_ca):
        token = local.create_api_token()["token"]
        res = CliRunner().invoke(floyd, ["login", where, "--fingerprint", ours, "--token-stdin"],
                                 input=token + "\n")
        assert res.exit_code == 1
        assert "no token was sent" in res.output and "Traceback" not in res.output
        assert seen == [("GET", "/v1/ca", None)]
        # and without a fingerprint, nobody confirming (not a terminal), it is refused too
        res = CliRunner().invoke(floyd, ["login", where, "--token-stdin"], input=token + "\n")
        assert res.exit_code == 1 and "nobody checked" in res.output
        assert all(auth is None for _m, _p, auth in seen)
    assert not (tmp_path / "laptop" / "login.json").exists()


def test_a_join_token_says_whom_it_signs_in_on_the_box_it_admits(box):
    local, _address, state = box
    runner = CliRunner()

    def token(*args):
        return runner.invoke(floydd, ["token", "create", "--state-dir", str(state), "--ttl", "10m", *args])
    made = {t: token(*args) for t, args in (("default", ()), ("nobody", ("--sign-in", "none")),
                                            ("named", ("--sign-in", ME)))}
    assert all(r.exit_code == 0 and r.output.startswith("FLD1.") for r in made.values()), made
    ids = {t: r.output.split(".")[2] for t, r in made.items()}
    listed = {t["id"]: t for t in local.tokens()}
    assert [listed[ids[t]]["sign_in"] for t in ("default", "nobody", "named")] == [[ME], [], [ME]]
    unknown = token("--sign-in", "zed")
    assert unknown.exit_code != 0 and "zed has no account in this lab" in unknown.output
    mixed = token("--sign-in", "none", "--sign-in", ME)
    assert mixed.exit_code != 0 and "--sign-in none means nobody" in mixed.output
    assert "Traceback" not in unknown.output + mixed.output
    for token_id in ids.values():
        local.revoke_token(token_id)
