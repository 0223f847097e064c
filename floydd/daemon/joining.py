"""Trust between boxes, as the daemon runs it: join tokens, the CA key on every voter, renewals.

Why every voter holds the CA key (what k3s does for its servers): joins and renewals must
keep working when any one box is gone, the first one included, and a box can only sign with
a key it has. An intermediate CA per voter would bound what one stolen voter can sign, but a
stolen voter also holds the store secret and a raft vote, so it would not change what an
operator must do (``floydd remove`` it; see docs/operations.md), while it would add a chain
to every handshake and a second lifecycle to renew. So: a node that is a voter and lacks
the key asks a voter that has it, over mutual TLS (``POST /cluster/v1/ca/key``; the answering
voter checks that the caller's verified certificate names a current voter), and writes it
0600 in ``STATE/ca/`` like ``floydd init`` did. Learners never get it, and a voter demoted
to a learner (or a box that sees itself removed) deletes its copy
(:class:`floydd.daemon.renewal.TrustKeeper`).

The routes (mounted on the mTLS listener of every member, :func:`floydd.daemon.peers.peer_app`)::

    GET  /cluster/v1/ca            the CA certificate (public; joining boxes check their pin)
    POST /cluster/v1/join          a join with a token (a voter holding the CA key; rate-limited)
    POST /cluster/v1/ca/key        the CA key, to a current voter only
    POST /cluster/v1/certs/renew   {csr, addresses} -> a new certificate for the calling member
    POST /cluster/v1/store/epoch-key  {epoch} -> that store key epoch's secret, to a current
                                   member only (:mod:`floydd.daemon.epochs`)

Tokens are replicated records (:mod:`floydd.cluster.state.credentials`): :class:`ClusterTokens` makes,
lists, revokes, checks and redeems them through raft. From cluster level 3 a token signs in
people on the box it admits (its maker by default), and revoking one that was used cancels
the join it made while that box is not a member yet (also out of the raft configuration). A legacy ``STATE/ca/tokens.db`` (tokens
made before they were replicated) is imported once by the node holding it: every token in it
that could still be used becomes a record with the same id, digest and expiry (so a token
already printed still works), and the file is renamed ``tokens.db.imported``.

Renewal and the CA key are looked after by :class:`floydd.daemon.renewal.TrustKeeper`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from aiohttp import web
from cryptography.x509.oid import NameOID

from floydd import log
from floydd.cluster.state import keyepochs
from floydd.cluster.state.versions import at_least, check_joiner
from floydd.errors import Conflict, FloyddError, InvalidSpec, NotFound, Unauthorized, UserError
from floydd.security.ca import ClusterCA
from floydd.security.identity import NodeIdentity
from floydd.cluster.net.join_voter import ca_handler, join_handler
from floydd.cluster.net.routes import CA_KEY_PATH, EPOCH_KEY_PATH, RENEW_PATH, TRUST_ROUTES, trust_routes
from floydd.security.ratelimit import RateLimiter
from floydd.security.tls import peer_node_id
from floydd.security.tokens import TokenStore, new_token, secret_digest

__all__ = ["Trust", "CAHolder", "ClusterTokens", "CA_KEY_PATH", "RENEW_PATH", "EPOCH_KEY_PATH", "TRUST_ROUTES"]

_log = log.cluster.getChild("trust")

_MAX_BODY = 64 * 1024


class CAHolder:
    """The cluster CA where this node holds its key (``STATE/ca``), else None."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._ca: ClusterCA | None = None

    def get(self) -> ClusterCA | None:
        if self._ca is None and (self.folder / ClusterCA.KEY_FILE).exists():
            self._ca = ClusterCA.load(self.folder)
        return self._ca

    def has_key(self) -> bool:
        return (self.folder / ClusterCA.KEY_FILE).exists()

    def forget_key(self) -> None:
        """Delete the CA key (a voter demoted to a learner, or a removed box: only voters hold
        it); the CA certificate stays (it is public). Durable: the folder is fsynced."""
        self._ca = None
        path = self.folder / ClusterCA.KEY_FILE
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def install(self, cert_pem: bytes, key_pem: bytes, fingerprint: str) -> ClusterCA:
        self._ca = ClusterCA.install(self.folder, cert_pem, key_pem, expect_fingerprint=fingerprint)
        return self._ca


class ClusterTokens:
    """Join tokens as replicated records; also what the join handler redeems against."""

    checks_node_ids = True

    def __init__(self, service: Any, identity: NodeIdentity, *, validity: float | None,
                 clock: Callable[[], float] = time.time) -> None:
        self.service, self.identity, self.validity = service, identity, validity
        self._clock = clock

    def is_voter(self) -> bool:
        return self.service.node_id in self.service.status().voters

    async def create(self, ttl: float, *, made_by: str = "", sign_in: list[str] | None = None) -> str:
        """A new token (printed once), made on this voter; its address hint is this node.
        ``sign_in``: the people signed in on the box it admits (None: its maker, from cluster
        level 3; naming them needs level 3)."""
        if not self.is_voter():
            raise Conflict(f"node {self.service.node_id} is not a voter: it cannot admit boxes",
                           code="not_a_voter", hint="make the token on a voter (floydd members lists them)")
        token = new_token(self.identity.cluster_fingerprint, ttl, self._clock(),
                          address=self.service.advertise)
        cmd = {"op": "token.create", "id": token.token_id, "secret_sha256": token.secret_sha256,
               "expires": token.expires_at, "made_by": made_by, "made_on": self.service.node_id}
        if sign_in is not None:
            cmd["sign_in"] = sorted(set(sign_in))
        await self._propose(cmd)
        _log.info("join token %s made on this node by %s, valid until %s", token.token_id, made_by or "?",
                  time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(token.expires_at)))
        return token.text

    async def list(self) -> list[dict]:
        return await self.service.read(lambda s: s.query("tokens"))

    async def revoke(self, token_id: str, *, by: str = "") -> dict:
        token_id = str(token_id).strip()
        if len(token_id) != 16 or not all(c in "0123456789abcdef" for c in token_id):
            raise UserError(f"{token_id[:40]!r} is not a token id", code="invalid_token_id",
                            hint="a token id is 16 hex digits, the third part of the token (floydd token list)")
        record = await self._propose({"op": "token.revoke", "id": token_id, "by": by})
        _log.info("join token %s revoked by %s", token_id, by or "?")
        cancelled = record.get("cancelled_join")
        if cancelled:                   # the join it made is cancelled: no seat either, if it got one
            _log.warning("join token %s revoked after it was used: the join of node %s is cancelled", token_id,
                         cancelled)
            if self.service.in_configuration(cancelled):
                await self.service.change_membership("remove", cancelled, user=by)
        return record

    async def check(self, token_id: str, secret: str) -> None:
        """Refuse early, from this node's copy of the records (the commit checks again)."""
        self.service.state.trust.check_token(token_id, secret_digest(token_id, secret), self._clock())

    async def redeem(self, token_id: str, secret: str, *, node_id: str, serial: str, not_after: float) -> None:
        await self._propose({"op": "token.use", "id": token_id, "secret_sha256": secret_digest(token_id, secret),
                             "node": node_id, "serial": serial, "not_after": not_after})

    async def import_legacy(self, path: Path) -> int:
        """Copy the usable tokens of an old ``tokens.db`` into the cluster; rename the file."""
        state = self.service.state
        if at_least(state, 3) and state.people:     # made by nobody the cluster knows: no box may act for them
            await asyncio.to_thread(os.replace, path, path.with_name(path.name + ".not-imported"))
            _log.warning("join tokens of %s (made before floydd 0.2) are not carried into this cluster: an admin "
                         "makes new ones (floydd token create); the file is kept as %s.not-imported", path, path.name)
            return 0
        store = TokenStore(path, ca_fingerprint=self.identity.cluster_fingerprint, clock=self._clock)
        usable = await asyncio.to_thread(store.usable)
        for info, digest in usable:
            try:
                await self._propose({"op": "token.create", "id": info.token_id, "secret_sha256": digest,
                                     "expires": info.expires_at, "made_by": "imported",
                                     "made_on": self.service.node_id})
            except Conflict as exc:
                if exc.code != "token_exists":     # imported before a crash: already there
                    raise
        await asyncio.to_thread(os.replace, path, path.with_name(path.name + ".imported"))
        _log.info("imported %d usable join token(s) from %s into the cluster", len(usable), path)
        return len(usable)

    async def _propose(self, cmd: dict) -> Any:
        return await self.service.commit({**cmd, "ts": self._clock()})


class Trust:
    """What the daemon wires: the CA holder, the tokens, the join limiter and the routes."""

    def __init__(self, service: Any, identity: NodeIdentity, state_dir: Path, *, store_secret: Callable[[], bytes],
                 validity: float | None = None, joins_per_minute: float = 10.0,
                 epoch_secret: Callable[[int, str], bytes | None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.service, self.identity, self.state_dir = service, identity, Path(state_dir)
        self.holder = CAHolder(self.state_dir / "ca")
        self.tokens = ClusterTokens(service, identity, validity=validity, clock=clock)
        self.validity = validity
        self.limiter = RateLimiter(rate=joins_per_minute / 60.0, burst=max(1, int(joins_per_minute)))
        self._store_secret = store_secret
        self._epoch_secret = epoch_secret      # (epoch, fingerprint) -> its secret where held here

    @property
    def legacy_tokens(self) -> Path:
        return self.state_dir / "ca" / "tokens.db"

    def routes(self) -> list[web.RouteDef]:
        return trust_routes(ca=ca_handler(self._ca_info),
                            join=join_handler(self.signing_ca, self.tokens, limiter=self.limiter,
                                              store_secret_provider=self._store_secret,
                                              admit=lambda protocol: check_joiner(self.service.state, protocol)),
                            ca_key=self._hand_over_key, renew=self._renew, epoch_key=self._hand_over_epoch_key)

    def _ca_info(self) -> tuple[bytes, str, str]:
        ca = self.holder.get()
        if ca is not None:
            return ca.cert_pem, ca.fingerprint, ca.cluster_name
        cluster = (self.identity.ca_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME) or [None])[0]
        return self.identity.ca_pem, self.identity.cluster_fingerprint, str(cluster.value) if cluster else ""

    def signing_ca(self) -> ClusterCA | None:
        """The CA, where this node may admit boxes: it holds the key and is a voter now."""
        return self.holder.get() if self.tokens.is_voter() else None

    async def _hand_over_key(self, request: web.Request) -> web.Response:
        """``POST /cluster/v1/ca/key``: the CA key, to a current voter (checked by its certificate)."""
        try:
            peer = peer_node_id(request)
            if peer is None or peer not in self.service.status().voters:
                _log.warning("refused the CA key to %s (node %s): not a voter", request.remote, peer)
                raise Unauthorized(f"node {peer} is not a voter: only voters hold the CA key", code="not_a_voter",
                                   hint="autopilot makes voters; a learner asks again once it is one")
            ca = self.holder.get()
            if ca is None:
                raise NotFound(f"node {self.service.node_id} does not hold the CA key yet", code="no_ca_key",
                               hint="ask another voter")
        except FloyddError as exc:
            return web.json_response(exc.to_payload(), status=exc.status)
        _log.info("handed the CA key to voter %s (%s)", peer, request.remote)
        return web.json_response({"ca": ca.cert_pem.decode(), "key": ca.key_pem().decode()})

    async def _hand_over_epoch_key(self, request: web.Request) -> web.Response:
        """``POST /cluster/v1/store/epoch-key``: a store key epoch's secret, to a box that is a
        member now (a removed box never gets one made after its removal)."""
        peer = peer_node_id(request)
        try:
            state = self.service.state
            if peer is None or peer not in state.nodes or peer in state.removed:
                _log.warning("refused a store key epoch to %s (node %s): not a member", request.remote, peer)
                raise Unauthorized(f"node {peer} is not a member: it gets no store key", code="not_a_member",
                                   hint="join again with a new token")
            body = await _json(request)
            n = body.get("epoch")
            if isinstance(n, bool) or not isinstance(n, int):
                raise InvalidSpec("epoch is a whole number")
            rec = keyepochs.record(state, n)
            if rec is None:
                raise NotFound(f"the cluster has no store key epoch {n}", code="no_such_epoch",
                               hint="ask again once this box has applied it")
            secret = None if self._epoch_secret is None else await asyncio.to_thread(
                self._epoch_secret, n, rec["fingerprint"])
            if secret is None:
                raise NotFound(f"node {self.service.node_id} does not hold store key epoch {n}", code="no_epoch_key",
                               hint="ask another member")
        except FloyddError as exc:
            return web.json_response(exc.to_payload(), status=exc.status)
        _log.info("handed store key epoch %d to member %s", n, peer)
        return web.json_response({"epoch": n, "secret": secret.hex()})

    async def _renew(self, request: web.Request) -> web.Response:
        """``POST /cluster/v1/certs/renew``: sign a member's new certificate (same node id)."""
        try:
            peer = peer_node_id(request)
            if peer is None or peer not in self.service.state.nodes or peer in self.service.state.removed:
                raise Unauthorized(f"node {peer} is not a member: its certificate is not renewed",
                                   code="not_a_member", hint="join again with a new token")
            ca = self.signing_ca()
            if ca is None:
                raise Conflict(f"node {self.service.node_id} does not hold the CA key", code="not_a_voter",
                               hint="ask a voter")
            body = await _json(request)
            csr, addresses = body.get("csr"), body.get("addresses", [])
            if not isinstance(csr, str) or not isinstance(addresses, list):
                raise InvalidSpec("a renewal needs csr (a string) and addresses (a list)")
            cert = await asyncio.to_thread(ca.issue_node_cert, csr, peer, addresses, allow_reissue=True,
                                           validity=self.validity)
        except FloyddError as exc:
            _log.warning("refused to renew the certificate of node %s: %s", peer_node_id(request), exc)
            return web.json_response(exc.to_payload(), status=exc.status)
        _log.info("renewed the certificate of node %s", peer)
        return web.json_response({"cert": cert.decode(), "ca": ca.cert_pem.decode()})


async def _json(request: web.Request) -> dict:
    if request.content_length is not None and request.content_length > _MAX_BODY:
        raise UserError("the request is too large")
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise UserError("the request is not a JSON object")
    return body
