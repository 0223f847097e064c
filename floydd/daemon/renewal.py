"""TrustKeeper: one background task per member that keeps its certificate and the CA key current.

Every ``interval`` (a twentieth of the certificate's life, between 0.5 s and a minute) it:

1. on a voter without the CA key: asks the other voters for it (:mod:`floydd.daemon.joining`
   says why voters hold it), so joins and renewals survive the loss of any box; on a
   learner (a voter demoted by autopilot) or a box that sees itself removed: deletes its
   copy of the CA key;
2. makes sure the cluster records this node's current certificate (serial, expiry:
   ``node.cert``), e.g. the first box's, made by ``floydd init`` before there was a log;
3. renews the certificate when it is due (:func:`renew_due`: a third of its life left, or
   ``cert_renew_before`` seconds): a CSR with the same key, signed by this node if it holds
   the CA key, else by a voter over mutual TLS; the new serial is committed (``node.cert``)
   *before* the node presents the certificate, so the membership check on every box accepts
   it from the first handshake; then :meth:`NodeIdentity.install` swaps it into the TLS
   contexts in place (new connections use it; open ones finish; no restart) and the
   transport's pool of idle connections is retired, so that no connection made with a
   certificate older than the previous one outlives the next renewal. A failed
   attempt is retried on the next round, and logged; the old certificate stays in use until
   a new one is committed.

A legacy ``tokens.db`` is imported here too, once this node holds the CA key and the
cluster has a leader.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable

import aiohttp
from cryptography import x509

from floydd import log
from floydd.cluster.state import versions
from floydd.unreachable import cannot_reach
from floydd.errors import FloyddError, Unavailable, from_payload
from floydd.security.ca import CLOCK_SKEW
from floydd.security.identity import NodeIdentity
from floydd.security.tls import client_context

__all__ = ["TrustKeeper", "renew_due", "check_interval"]

_log = log.cluster.getChild("trust")


def renew_due(not_before: float, not_after: float, now: float, before: float = 0.0) -> bool:
    """Whether a certificate valid from ``not_before`` (which includes the CA's clock-skew
    allowance) to ``not_after`` should be renewed at ``now``: ``before`` seconds ahead of
    expiry, or with 0, once less than a third of its life is left."""
    life = max(1.0, not_after - not_before - CLOCK_SKEW.total_seconds())
    margin = before if before > 0 else life / 3
    return not_after - now < margin


def check_interval(not_before: float, not_after: float) -> float:
    """How often to look: a twentieth of the certificate's life, 0.5 s to 60 s."""
    life = not_after - not_before - CLOCK_SKEW.total_seconds()
    return min(60.0, max(0.5, life / 20))


class TrustKeeper:
    def __init__(self, trust: Any, *, renew_before: float = 0.0, interval: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.trust = trust
        self.interval = interval
        self.service = trust.service
        self.identity: NodeIdentity = trust.identity
        self.renew_before = renew_before
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._ssl = None            # made once: a renewal reloads it in place
        self._task: asyncio.Task | None = None
        self.renewals = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="floydd.trust-keeper")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except FloyddError as exc:
                _log.info("certificates and CA key: %s (trying again)", exc)
            except Exception:   # a bug must not end the upkeep of certificates for good
                _log.exception("certificates and CA key: unexpected error (trying again)")
            await asyncio.sleep(self.interval or check_interval(self.identity.not_before, self.identity.not_after))

    async def tick(self) -> None:
        if self.service.leader_id is None:
            return
        status = self.service.status()
        me = self.service.node_id
        if me in status.voters and self.trust.holder.get() is None:
            await self._fetch_ca_key([v for v in status.voters if v != me])
        elif (me in status.learners or me in self.service.state.removed) and self.trust.holder.has_key():
            why = "was removed from the cluster" if me in self.service.state.removed else "is no longer a voter"
            await asyncio.to_thread(self.trust.holder.forget_key)
            _log.warning("this box %s: it deleted its copy of the cluster CA key (only voters hold it; it asks "
                         "for it again if it is made a voter)", why)
        if self.trust.holder.get() is not None and self.trust.legacy_tokens.exists():
            await self.trust.tokens.import_legacy(self.trust.legacy_tokens)
        state = self.service.state
        if me not in state.nodes:
            return
        record = state.trust.certs.get(me)
        if record is None or record["serial"] != self.identity.serial:
            await self._record(self.identity.serial, self.identity.not_after)
        if renew_due(self.identity.not_before, self.identity.not_after, self._clock(), self.renew_before):
            await self.renew()

    async def renew(self) -> None:
        """Get a new certificate for this node's key, record it, then present it."""
        csr = self.identity.make_csr().decode()
        addresses = self.identity.addresses
        ca = self.trust.signing_ca()
        if ca is not None:
            cert_pem = (await asyncio.to_thread(ca.issue_node_cert, csr, self.identity.node_id, addresses,
                                                allow_reissue=True, validity=self.trust.validity))
            ca_pem = ca.cert_pem
        else:
            answer = await self._ask_voters("/cluster/v1/certs/renew", {"csr": csr, "addresses": addresses})
            cert_pem, ca_pem = answer["cert"].encode(), answer["ca"].encode()
        cert = x509.load_pem_x509_certificate(cert_pem)
        await self._record(f"{cert.serial_number:x}", cert.not_valid_after_utc.timestamp())
        old = self.identity.not_after
        await asyncio.to_thread(self.identity.install, cert_pem, ca_pem,
                                expect_ca_fingerprint=self.identity.cluster_fingerprint)
        self.renewals += 1
        self.service.new_connections()    # idle pooled connections still present the old one
        if self._session is not None:
            await self._session.close()
            self._session = None
        _log.info("renewed this node's certificate: it expired %s, the new one %s (serial %s)",
                  _when(old), _when(self.identity.not_after), self.identity.serial[:16])

    async def _record(self, serial: str, not_after: float) -> None:
        await self.service.commit({"op": "node.cert", "id": self.service.node_id, "serial": serial,
                                   "not_after": not_after, "ts": self._clock()})

    async def _fetch_ca_key(self, voters: list[str]) -> None:
        answer = await self._ask_voters("/cluster/v1/ca/key", {}, among=voters)
        self.trust.holder.install(answer["ca"].encode(), answer["key"].encode(), self.identity.cluster_fingerprint)
        _log.info("this voter now holds the cluster CA key: it can admit boxes and renew certificates")

    async def ask(self, path: str, body: dict, among: list[str]) -> dict:
        """POST ``body`` to the boxes ``among`` (the leader first), until one answers 200
        (store key epochs: :mod:`floydd.daemon.epochs`)."""
        return await self._ask_voters(path, body, among=among)

    async def _ask_voters(self, path: str, body: dict, *, among: list[str] | None = None) -> dict:
        """POST ``body`` to the leader, then the other voters, until one answers 200."""
        status = self.service.status()
        voters = among if among is not None else [v for v in status.voters if v != self.service.node_id]
        order = sorted(voters, key=lambda v: v != status.leader)
        last: FloyddError = Unavailable("no voter to ask", hint="wait for autopilot to make voters")
        for peer in order:
            address = self.service.address_of(peer)
            if address is None:
                continue
            try:
                return await self._post(peer, address, path, body)
            except FloyddError as exc:
                last = exc
        raise last

    async def _post(self, peer: str, address: str, path: str, body: dict) -> dict:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers={versions.HEADER: str(versions.PROTOCOL)})  # as peers say
            self._ssl = client_context(self.identity, verify_node_id=True)
        try:
            async with self._session.post(f"https://{address}{path}", json=body, server_hostname=peer,
                                          ssl=self._ssl,
                                          timeout=aiohttp.ClientTimeout(total=15)) as resp:
                raw, status = await resp.read(), resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise Unavailable(cannot_reach(f"box {peer}", address, exc)) from exc
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = None
        if status != 200 or not isinstance(payload, dict):
            raise from_payload(payload if isinstance(payload, dict) else {}, status)
        return payload


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
