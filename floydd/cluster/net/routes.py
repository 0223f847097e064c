"""Every node-to-node route (``/cluster/v1``): its method, path and handler, all here.

Served with mutual TLS on ``listen`` (:func:`floydd.daemon.peers.peer_app`); each route but
the two a joining box calls needs a node certificate of this cluster whose node has not been
removed (:func:`~floydd.security.tls.require_peer_cert`). The handlers stay with their logic
and are handed in; a test checks the app serves exactly :data:`PEER_ROUTES`::

    GET  /cluster/v1/raft                          the raft stream: a WebSocket of raft messages
    POST /cluster/v1/raft                          raft messages, one batch a request (older senders)
    POST /cluster/v1/propose                       a command forwarded to the leader
    POST /cluster/v1/read                          a linearizable read forwarded to the leader
    POST /cluster/v1/snapshot                      the leader's snapshot, streamed in frames
    GET  /cluster/v1/store/objects/{hex}           a sealed object of this node's store
    GET  /cluster/v1/jobs/{project}/{number}/log   a job's log from an offset, run here
    GET  /cluster/v1/jobs/{project}/{number}/metrics|events   its series and events
    GET  /cluster/v1/ca                            the CA certificate (public: joining boxes)
    POST /cluster/v1/join                          a join with a token (voters holding the CA key)
    POST /cluster/v1/ca/key                        the CA key, to a current voter only
    POST /cluster/v1/certs/renew                   a member's renewed certificate (voters)
    POST /cluster/v1/store/epoch-key               a store key epoch's secret, to a member

Handlers: :class:`~floydd.cluster.net.transport.Transport` (the first five),
:func:`floydd.cluster.replication.peerstore.store_routes`, :func:`floydd.daemon.peers.peer_app`
(job details), :mod:`floydd.cluster.net.join` and :class:`floydd.daemon.joining.Trust` (the
last five).
"""

from __future__ import annotations

from typing import Awaitable, Callable

from aiohttp import web

__all__ = ["RAFT_PATH", "PROPOSE_PATH", "READ_PATH", "SNAPSHOT_PATH", "OBJECTS_PATH", "JOB_DETAIL_PATH", "CA_PATH",
           "JOIN_PATH", "CA_KEY_PATH", "RENEW_PATH", "EPOCH_KEY_PATH", "raft_routes", "object_routes",
           "job_detail_routes", "join_routes", "trust_routes", "RAFT_ROUTES", "TRUST_ROUTES", "PEER_ROUTES"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

RAFT_PATH = "/cluster/v1/raft"
PROPOSE_PATH = "/cluster/v1/propose"
READ_PATH = "/cluster/v1/read"
SNAPSHOT_PATH = "/cluster/v1/snapshot"
OBJECTS_PATH = "/cluster/v1/store/objects/"
"""The prefix; a sealed object's is this and its hex id."""
JOB_DETAIL_PATH = "/cluster/v1/jobs/{project}/{number}/{what}"
CA_PATH = "/cluster/v1/ca"
JOIN_PATH = "/cluster/v1/join"
CA_KEY_PATH = "/cluster/v1/ca/key"
RENEW_PATH = "/cluster/v1/certs/renew"
EPOCH_KEY_PATH = "/cluster/v1/store/epoch-key"


def raft_routes(*, raft: Handler, stream: Handler, propose: Handler, read: Handler,
                snapshot: Handler) -> list[web.RouteDef]:
    """Raft and forwarding: what every cluster's app serves (the transport's handlers)."""
    return [web.get(RAFT_PATH, stream, allow_head=False), web.post(RAFT_PATH, raft), web.post(PROPOSE_PATH, propose),
            web.post(READ_PATH, read), web.post(SNAPSHOT_PATH, snapshot)]


def object_routes(get_object: Handler) -> list[web.RouteDef]:
    return [web.get(OBJECTS_PATH + "{hex}", get_object)]


def job_detail_routes(job_detail: Handler) -> list[web.RouteDef]:
    return [web.get(JOB_DETAIL_PATH, job_detail)]


def join_routes(*, ca: Handler, join: Handler) -> list[web.RouteDef]:
    """The two routes a joining box calls, without a node certificate."""
    return [web.get(CA_PATH, ca), web.post(JOIN_PATH, join)]


def trust_routes(*, ca: Handler, join: Handler, ca_key: Handler, renew: Handler,
                 epoch_key: Handler) -> list[web.RouteDef]:
    """Joins, the CA key, renewals and store key epochs (each answers only where this node may)."""
    return join_routes(ca=ca, join=join) + [web.post(CA_KEY_PATH, ca_key), web.post(RENEW_PATH, renew),
                                            web.post(EPOCH_KEY_PATH, epoch_key)]


RAFT_ROUTES = frozenset({("GET", RAFT_PATH), ("POST", RAFT_PATH), ("POST", PROPOSE_PATH), ("POST", READ_PATH), ("POST", SNAPSHOT_PATH)})
TRUST_ROUTES = frozenset({("GET", CA_PATH), ("POST", JOIN_PATH), ("POST", CA_KEY_PATH), ("POST", RENEW_PATH),
                          ("POST", EPOCH_KEY_PATH)})
PEER_ROUTES = RAFT_ROUTES | {("GET", OBJECTS_PATH + "{hex}"), ("GET", JOB_DETAIL_PATH)} | TRUST_ROUTES
"""(method, path) of every node-to-node route."""
