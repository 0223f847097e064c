"""The in-process cluster behind the one cluster fixture (STYLE 17): N cluster services in one event loop on 127.0.0.1.

Every node is a real :class:`ClusterService` (raft driver, SQLite log, transport) with a
real mTLS identity signed by a CA made in the test's tmp dir, listening on port 0. Timings
are :data:`TEST_CONFIG` (20 ms ticks, 0.2-0.4 s election timeout). Partitions are made with
the transport's drop hook; a kill stops a node abruptly (no leave). Tests wait with
``await cluster.wait_for(cond)``, never with fixed sleeps.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from floydd.cluster.state import versions
from floydd.cluster.config import TEST_CONFIG, ClusterConfig
from floydd.cluster.state.people import signed_in
from floydd.cluster.service import ClusterService
from floydd.cluster.state.versions import PROTOCOL
from floydd.security.identity import NodeIdentity, init_cluster
from tests.harness.wait import wait_until, wait_until_async

PEER_HEADERS = {versions.HEADER: str(versions.PROTOCOL)}
"""What a box of this release says on node-to-node requests (a request without it is an 0.1 box's)."""


@dataclass
class Node:
    name: str
    identity: NodeIdentity
    folder: Path
    service: ClusterService
    port: int = 0
    alive: bool = False

    @property
    def id(self) -> str:
        return self.identity.node_id

    @property
    def driver(self):
        return self.service.driver

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __repr__(self) -> str:
        return f"Node({self.name}={self.id[:6]}, {'up' if self.alive else 'down'})"


class Cluster:
    def __init__(self, root: Path, config: ClusterConfig = TEST_CONFIG) -> None:
        self.root = root
        self.config = config
        self.nodes: list[Node] = []
        self.blocked: set[tuple[str, str]] = set()
        self.ca, first = init_cluster(root / "ca", root / "n1" / "tls", "test", ["127.0.0.1"])
        self._first_identity: NodeIdentity | None = first
        self._seq = itertools.count(1)
        self._rng = random.Random(1234)
        self.make_app: Callable[[Node], object] | None = None
        """When set, what each node serves instead of the bare raft app (e.g. with the trust routes)."""

    # -- building --------------------------------------------------------------------------------

    def _identity(self, name: str) -> NodeIdentity:
        if name == "n1" and self._first_identity is not None:
            identity, self._first_identity = self._first_identity, None
            return identity
        identity = NodeIdentity.load_or_create(self.root / name / "tls")
        identity.install(self.ca.issue_node_cert(identity.make_csr(), identity.node_id, ["127.0.0.1"]),
                         self.ca.cert_pem)
        return identity

    async def new_node(self, **service_kw) -> Node:
        """A node listening on loopback, not started yet."""
        name = f"n{next(self._seq)}"
        identity = self._identity(name)
        node = Node(name=name, identity=identity, folder=self.root / name, service=None)  # type: ignore[arg-type]
        node.service = self._service(node, **service_kw)
        await self._listen(node)
        self.nodes.append(node)
        return node

    def _service(self, node: Node, **kw) -> ClusterService:
        kw.setdefault("resources", {"gpus": [0, 1]})
        service = ClusterService(node.identity, node.folder / "cluster", name=node.name, config=self.config,
                                 rng=random.Random(self._rng.random()), **kw)
        service.transport.drop = lambda frm, to: (frm, to) in self.blocked
        return service

    async def _listen(self, node: Node) -> None:
        app = self.make_app(node) if self.make_app is not None else None
        address = await node.service.listen("127.0.0.1", node.port, app=app)
        node.port = int(address.rsplit(":", 1)[1])

    async def start(self, n: int) -> list[Node]:
        """``n`` founding voters; returns them once one leads and all are announced."""
        nodes = [await self.new_node() for _ in range(n)]
        founders = {node.id: node.address for node in nodes}
        for node in nodes:
            await node.service.start(founders=founders)
            node.alive = True
        await self.wait_for(lambda: len(self.leader().service.state.nodes) == n if self.leader() else False,
                            what=f"a leader and {n} announced nodes")
        await self.wait_for(lambda: all(node.service.state.protocol == PROTOCOL for node in nodes),
                            what=f"cluster level {PROTOCOL} everywhere")    # what it switches on is not racy
        return nodes

    async def sign_in(self, name: str, *, every_box: bool = True) -> None:
        """Sign person ``name`` in on every box (level 3: a box acts only for people signed in
        on it, floydd.cluster.state.signin), through the leader, as the admin it signed in first."""
        lead = self.leader()
        admin = next(a for a in lead.service.state.admins if signed_in(lead.service.state.people, lead.id, a))
        await lead.service.change_account({"op": "person.boxes", "name": name, "every_box": every_box, "on": True,
                                           "user": admin})
        await self.wait_for(lambda: all(signed_in(n.service.state.people, n.id, name) for n in self.live()),
                            what=f"{name} signed in everywhere")

    async def join(self, via: Node | None = None) -> Node:
        """A new node that joins through ``via`` (default: any live node) as a learner."""
        via = via or self.live()[0]
        node = await self.new_node()
        await node.service.start(join=[via.address], rejoin=True)
        node.alive = True
        return node

    async def kill(self, node: Node) -> None:
        """Abrupt stop: transport closed, driver cancelled, listener gone; no leave."""
        node.alive = False
        await node.service.crash()

    async def stop(self, node: Node) -> None:
        """Clean shutdown: hand over leadership, leave the voters."""
        node.alive = False
        await node.service.close()

    async def restart(self, node: Node, **start_kw) -> Node:
        """Start a killed/stopped node again from its state dir, on the same port."""
        node.service = self._service(node)
        await self._listen(node)
        await node.service.start(**start_kw)
        node.alive = True
        return node

    async def close(self) -> None:
        for node in self.nodes:
            if node.alive:
                node.alive = False
                await node.service.crash()

    # -- network faults --------------------------------------------------------------------------

    def isolate(self, node: Node) -> None:
        for other in self.nodes:
            if other is not node:
                self.blocked |= {(node.id, other.id), (other.id, node.id)}

    def heal(self) -> None:
        self.blocked.clear()

    # -- looking ---------------------------------------------------------------------------------

    def live(self) -> list[Node]:
        return [n for n in self.nodes if n.alive]

    def leader(self, among: list[Node] | None = None) -> Node | None:
        """The live node leading the highest term (a deposed leader may not know it yet)."""
        leaders = [n for n in (among or self.live()) if n.alive and n.service.is_leader]
        return max(leaders, key=lambda n: n.driver.status().term) if leaders else None

    async def wait_leader(self, among: list[Node] | None = None, timeout: float = 10.0,
                          exclude: Node | None = None) -> Node:
        def found():
            lead = self.leader(among)
            return lead if lead is not None and lead is not exclude else None
        return await self.wait_for(found, timeout=timeout, what="a leader")

    async def wait_for(self, cond: Callable[[], object], timeout: float = 10.0, what: str = "condition"):
        return await wait_until_async(cond, timeout, what=what, details=lambda: f"nodes: {self.describe()}")

    def describe(self) -> str:
        parts = []
        for n in self.nodes:
            if n.alive:
                st = n.driver.status()
                parts.append(f"{n.name}:{st.role}/t{st.term}/c{st.commit}/a{st.applied} v={len(st.voters)} "
                             f"l={len(st.learners)}")
            else:
                parts.append(f"{n.name}:down")
        return "; ".join(parts)

    def leaders_by_term(self) -> dict[int, set[str]]:
        """Every leader any node (dead or alive) saw, per term."""
        seen: dict[int, set[str]] = {}
        for n in self.nodes:
            for term, ids in n.driver.leaders_seen.items():
                seen.setdefault(term, set()).update(ids)
        return seen


def fast(**changes) -> ClusterConfig:
    return dataclasses.replace(TEST_CONFIG, **changes)


@pytest.fixture
def no_leaked_threads():
    """The test ends with no raft thread of its own still running (autouse where imported)."""
    before = set(threading.enumerate())
    yield

    def leaked() -> list:
        return [t for t in set(threading.enumerate()) - before if t.is_alive() and t.name.startswith("raft-")]
    wait_until(lambda: not leaked(), 5, what="raft threads to end", details=lambda: f"threads left running: {leaked()}")
