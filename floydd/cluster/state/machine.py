"""The control plane's replicated state machine: nodes, jobs, the dataset catalog.

Pure (STYLE 2): no I/O, no clock, no randomness. Every command is first checked for who may
say it (:func:`floydd.cluster.state.authz.authorize`, from its stamped ``proposer`` and the state). Every node applies the same committed
commands (:mod:`floydd.cluster.state.commands`) in the same order and so holds the same state;
time comes in as each command's ``ts``, set by its proposer. ``apply`` either changes the
state and returns a result, or raises a :class:`~floydd.errors.FloyddError` having changed
nothing (the rejection is the proposal's answer, the same on every node).

What it holds::

    nodes      id -> address, ports, resources (GPU indices), labels, status, last heartbeat,
               procs (its live runs: job, attempt, GPUs)
    removed    id -> when: tombstones of nodes removed for good (their certificates refused)
    revoked    certificate serial -> {node, ts}: the certificates of removed nodes
    people     name -> role, uids per box (:mod:`floydd.cluster.state.people`; ``admins`` derived)
    jobs       "project/N" -> the job (:class:`~floydd.model.Job`: spec, state, placement, attempts, ...)
    counters   project -> last job number (numbers are never reused; project.reserve raises it)
    datasets   name -> versions (tree id, size, holders); version numbers never reused
    code       code tree -> holders, jobs (level 3: :mod:`floydd.cluster.state.code`)
    idem       idempotency key -> the job or dataset version it made (an imported job's key: its
               number, then the job; :mod:`floydd.cluster.state.imported`)
    archive    finished jobs moved out by ``job.archive`` (:mod:`floydd.cluster.state.archive`: SQLite
               beside the raft log, not in the snapshot's data); ``job``, ``job.submit``'s
               idempotency and ``job.delete`` also look there, numbers stay in ``counters``

Derived from the jobs and never serialised (rebuilt by ``restore``): the index of the active
jobs, what each node's GPUs, cores and memory are held by (:mod:`floydd.cluster.state.index`).

Leader actions are fenced: a command with a ``term`` (``job.place`` always has one) is
refused unless that is the term of the log entry that carries it.

This module is the container (what it holds, ``apply``, ``snapshot``, ``restore``, the reads,
and the lookups its command modules share); each family of commands is a module of
functions that ``apply`` calls with the state::

    nodes            node.upsert, node.health, node.remove
    jobs             job.submit, job.place, job.update, job.delete, job.archive, project.reserve
    moves            a job's state moves (index, times, history), its reruns, a gang's parts
    datasets         dataset.add_version, dataset.delete, dataset.holders
    code             code.holders, and the code table's side of job.submit and job.delete
    index            the derived index of active jobs (a part: ``active_index``)
    imported         project.allocate, job.import
    credentials      token.create, token.use, token.revoke, node.cert (a part: ``trust``)
    people           admin.grant, person.add, person.role, person.remove, person.map, person.boxes
    signin           who is signed in on which box (level 3), and what changes with it
    apitokens        apitoken.create, apitoken.revoke (a part: ``apitokens``)
    versions         cluster.protocol
    audit_guard      audit.tamper (changes nothing but the chain: its entry is the record)
    keyepochs        store.epoch (a new store key epoch: its number and fingerprint)
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import msgpack

from floydd.cluster.state import (code as state_code, datasets, imported, jobs, keyepochs, nodes, people, signin,
                                  versions)
from floydd.cluster.state.archive import MemoryArchive
from floydd.cluster.state.audit import MemoryAudit
from floydd.cluster.state.apitokens import ApiTokens
from floydd.cluster.state.authz import authorize
from floydd.cluster.state.commands import check
from floydd.cluster.state.index import ActiveIndex
from floydd.cluster.state.commands import copy_of
from floydd.cluster.state.credentials import TrustState
from floydd.errors import Conflict, InvalidSpec, NotFound
from floydd.model import ACTIVE_STATES, Job

__all__ = ["ClusterState", "StaleTerm", "SNAPSHOT_VERSION"]

SNAPSHOT_VERSION = 1


class StaleTerm(Conflict):
    """A leader action whose fencing term is not the term it was committed in."""

    code = "stale_term"


class ClusterState:
    """The replicated state (module docstring): what it holds, its commands, its reads."""

    def __init__(self, archive: Any = None, audit: Any = None, *, protocol: int = 1) -> None:
        self.archive = archive if archive is not None else MemoryArchive()
        self.audit = audit if audit is not None else MemoryAudit()   # the audit chain (floydd.cluster.state.audit)
        self.protocol = protocol
        """The cluster's level (:mod:`floydd.cluster.state.versions`): 1 for a log that starts empty
        (it may be an 0.1 cluster's), raised by ``cluster.protocol``; tests of level-2 behaviour
        alone start a state at 2."""
        self.applying = 0
        """The log index of the command being applied: the command modules read the archive as
        of it (:func:`floydd.cluster.state.archive.visible`; the archive is not in the snapshot's
        data, it is shipped beside it)."""
        self.nodes: dict[str, dict] = {}
        self.removed: dict[str, float] = {}
        self.jobs: dict[str, Job] = {}
        """Key -> the job, frozen: a command stores the job as it becomes (:mod:`floydd.cluster.state.jobs`)."""
        self.counters: dict[str, int] = {}
        self.datasets: dict[str, dict] = {}
        self.code: dict[str, dict] = {}      # code tree -> holders, jobs (level 3: floydd.cluster.state.code)
        self.idem: dict[str, list] = {}
        self.trust = TrustState()           # join tokens, members' certificates (floydd.cluster.state.credentials)
        self.apitokens = ApiTokens()        # personal API tokens (floydd.cluster.state.apitokens)
        self.revoked: dict[str, dict] = {}  # certificate serial (hex) -> {node, ts}: removed nodes' (authz)
        self.people: dict[str, dict] = {}   # the lab's people (floydd.cluster.state.people; authz reads roles)
        self.store_epochs: list[dict] = []  # store key epochs after the first (floydd.cluster.state.keyepochs)
        self.active_index = ActiveIndex()
        """Derived from the jobs, never serialised (rebuilt by restore): the active jobs and what
        they hold on each node (:mod:`floydd.cluster.state.index`)."""
        self._queued_by: dict[str, int] = {}
        """Person -> how many of their jobs are queued (derived, kept by :meth:`put_job`)."""
        self._handlers: dict[str, Callable[[dict, int], Any]] = {
            "node.upsert": lambda cmd, term: nodes.upsert(self, cmd, term),
            "node.health": lambda cmd, term: nodes.health(self, cmd, term),
            "node.remove": lambda cmd, term: nodes.remove(self, cmd, term),
            "job.submit": lambda cmd, term: jobs.submit(self, cmd, term),
            "job.place": lambda cmd, term: jobs.place(self, cmd, term),
            "job.update": lambda cmd, term: jobs.update(self, cmd, term),
            "job.delete": lambda cmd, term: jobs.delete(self, cmd, term),
            "job.archive": lambda cmd, term: jobs.archive(self, cmd, term),
            "project.reserve": lambda cmd, term: jobs.reserve(self, cmd, term),
            "project.allocate": lambda cmd, term: imported.allocate(self, cmd),
            "job.import": lambda cmd, term: imported.import_job(self, cmd),
            "dataset.add_version": lambda cmd, term: datasets.add(self, cmd, term),
            "dataset.delete": lambda cmd, term: datasets.delete(self, cmd, term),
            "dataset.holders": lambda cmd, term: datasets.holders(self, cmd, term),
            "code.holders": lambda cmd, term: state_code.set_holder(self, cmd),    # level 3: copies of job code
            "token.create": lambda cmd, term: signin.token_create(self, cmd),     # level 3: whom it signs in
            "token.use": lambda cmd, term: signin.token_use(self, cmd),
            "token.revoke": lambda cmd, term: signin.token_revoke(self, cmd),     # level 3: cancels a join
            "node.cert": lambda cmd, term: self.trust.node_cert(cmd, members=self.nodes, removed=self.removed),
            "admin.grant": lambda cmd, term: people.grant(self.people, cmd, here=signin.here(self, cmd)),
            versions.OP: lambda cmd, term: signin.raise_level(self, cmd),       # level 3 lists members' boxes
            "person.add": lambda cmd, term: people.add(self.people, cmd, here=signin.here(self, cmd)),
            "person.role": lambda cmd, term: people.set_role(self.people, cmd),
            "person.remove": lambda cmd, term: signin.remove_person(self, cmd),   # level 3: and their tokens
            "person.map": lambda cmd, term: people.map_uids(self.people, cmd),
            "person.boxes": lambda cmd, term: people.set_boxes(self.people, cmd),
            "apitoken.create": lambda cmd, term: self.apitokens.create(cmd),
            "apitoken.revoke": lambda cmd, term: self.apitokens.revoke(cmd),
            "audit.tamper": lambda cmd, term: {"box": cmd["box"], "first_seq": cmd["first_seq"]},  # its entry says it
            keyepochs.OP: lambda cmd, term: keyepochs.apply_epoch(self, cmd),
        }

    # -- the state machine ---------------------------------------------------------------

    def apply(self, command: dict, *, index: int, term: int) -> Any:
        """Apply one committed command (log ``index``, entry ``term``); its result, or a
        FloyddError with nothing changed."""
        cmd = check(command)
        self.applying = index               # the archive as of this entry (archive.visible)
        if "term" in cmd and cmd["term"] != term:
            raise StaleTerm(f"{cmd['op']} was decided by the leader of term {cmd['term']} but committed in "
                            f"term {term}: a former leader's action", hint="the current leader decides again")
        versions.check_supported(self, cmd)         # a newer level's: refused alike by every box
        authorize(self, cmd, cmd.get("proposer"))   # Forbidden: who proposed it may not say it
        return self.audit.around(self, cmd, index, lambda: self._handlers[cmd["op"]](cmd, term))

    def snapshot(self) -> bytes:
        return msgpack.packb({"v": SNAPSHOT_VERSION, "nodes": self.nodes, "removed": self.removed,
                              "jobs": {key: job.to_dict() for key, job in self.jobs.items()},
                              "counters": self.counters,
                              "datasets": self.datasets, "idem": self.idem, **self.trust.snapshot(),
                              **self.apitokens.snapshot(), "revoked": self.revoked, "people": self.people,
                              "admins": self.admins,     # what an 0.1 box reads of people
                              "protocol": self.protocol,
                              **({"code": self.code} if self.code else {}),
                              **({"store_epochs": self.store_epochs} if self.store_epochs else {})},
                             use_bin_type=True)

    def restore(self, data: bytes) -> None:
        """Replace everything by a snapshot (``b""``: the empty state of a new cluster)."""
        if not data:
            self.__init__(self.archive, self.audit)
            return
        raw = msgpack.unpackb(data, raw=False, strict_map_key=True)
        if not isinstance(raw, dict) or raw.get("v") != SNAPSHOT_VERSION:
            raise InvalidSpec(f"not a cluster state snapshot of version {SNAPSHOT_VERSION}",
                              hint="upgrade this node to the version the cluster runs")
        self.nodes, self.removed = raw["nodes"], raw["removed"]
        self.jobs = {key: Job.from_dict(job) for key, job in raw["jobs"].items()}
        self.counters, self.datasets, self.idem = raw["counters"], raw["datasets"], raw["idem"]
        self.trust.restore(raw)
        self.apitokens.restore(raw)
        self.revoked, self.people = dict(raw.get("revoked") or {}), people.migrate(raw)
        self.store_epochs = list(raw.get("store_epochs") or [])
        self.protocol = int(raw.get("protocol") or 1)        # an 0.1 box's snapshot says none
        self.code = dict(raw.get("code") or {})              # an 0.2 box's says none
        self.active_index, self._queued_by = ActiveIndex(), {}
        for job in self.jobs.values():
            if job.state in ACTIVE_STATES:
                self.active_index.activate(job)
            elif job.state == "queued":
                self._count_queued(job.user, 1)

    # -- the lookups the command modules share (the state's own, not copies) ----------------

    def live_job(self, key: str) -> Job:
        """The job in the hot state (NotFound if it is not there)."""
        job = self.jobs.get(key)
        if job is None:
            raise NotFound(f"job {key} does not exist", code="job_not_found", hint="floyd status lists jobs")
        return job

    def put_job(self, job: Job) -> Job:
        """Store ``job`` as a command made it (new, or in place of its former self): the one
        place a job is stored, which keeps the count of queued jobs per person."""
        old = self.jobs.get(job.id)
        if old is not None and old.state == "queued":
            self._count_queued(old.user, -1)
        if job.state == "queued":
            self._count_queued(job.user, 1)
        self.jobs[job.id] = job
        return job

    def drop_job(self, key: str) -> Job:
        """Take job ``key`` out of the hot state (deleted, or archived); the job it was."""
        job = self.jobs.pop(key)
        if job.state == "queued":
            self._count_queued(job.user, -1)
        return job

    def _count_queued(self, user: str, by: int) -> None:
        count = self._queued_by.get(user, 0) + by
        if count:
            self._queued_by[user] = count
        else:
            self._queued_by.pop(user, None)

    def node_record(self, nid: str) -> dict:
        """The node's record (NotFound if it is not a member)."""
        node = self.nodes.get(nid)
        if node is None:
            raise NotFound(f"node {nid} is not in the cluster", code="node_not_found",
                           hint="floydd members lists the nodes")
        return node

    def name_of(self, nid: str) -> str:
        """The node's name, for history lines and errors (its id if it is gone)."""
        node = self.nodes.get(nid)
        return node["name"] if node else (nid or "an unknown node")

    # -- reads (typed and frozen, or copies: a caller never changes the state through them) --

    @property
    def admins(self) -> list[str]:
        """The admins' names (people with role admin): none in a lab of one."""
        return people.admins(self.people)

    def job(self, key: str) -> Job:
        """The job, from the hot state or else the archive (NotFound if in neither)."""
        job = self.find_job(key)
        return job if job is not None else self.live_job(key)

    def find_job(self, key: str, before: int | None = None) -> Job | None:
        """The job from the hot state or else the archive (as of log index ``before``:
        :func:`~floydd.cluster.state.archive.visible`), None if in neither."""
        job = self.jobs.get(key)
        return self.archive.get(key, before) if job is None else job

    def list_jobs(self, project: str | None = None, states: Iterable[str] | None = None) -> list[Job]:
        """Jobs of the hot state in submission order."""
        states = frozenset(states) if states else None
        return [j for j in self.jobs.values()
                if (project is None or j.project == project) and (not states or j.state in states)]

    def stored_job(self, key: str) -> dict:
        """:meth:`job` in its stored form, a copy (a command's answer, a forwarded read)."""
        job = self.find_job(key)
        return jobs.answer(job) if job is not None else self.live_job(key)

    def list_nodes(self) -> list[dict]:
        return copy_of(list(self.nodes.values()))

    def list_datasets(self, name: str | None = None) -> list[dict]:
        """Every dataset version (``name``: that dataset's only), copies."""
        if name is not None:
            found = self.datasets.get(name)
            return copy_of(list(found["versions"].values())) if found is not None else []
        return copy_of([v for d in self.datasets.values() for v in d["versions"].values()])

    def node_health(self, now: float, stale_after: float, ages: Mapping[str, float] | None = None) -> dict[str, str]:
        """Each node's status (``suspect``: the leader lost touch with it), ``stale`` when it
        says it is up but was last heard from over ``stale_after`` seconds ago: by ``ages``
        (node id -> seconds, this box's monotonic clock: :class:`floydd.cluster.heard.Heard`)
        when given, else by its last heartbeat's ``ts`` against ``now`` (same clock only)."""
        def age(nid: str, n: dict) -> float:
            return ages[nid] if ages is not None and nid in ages else now - n["last_heartbeat"]
        return {nid: ("stale" if n["status"] == "up" and age(nid, n) > stale_after
                      else n["status"]) for nid, n in self.nodes.items()}

    def queued_of(self, user: str) -> int:
        """How many jobs of ``user`` are queued (O(1): admission asks it on every submit)."""
        return self._queued_by.get(user, 0)

    def held_gpus(self, node: str) -> dict[int, str]:
        """GPU index -> id of the active job holding it, on ``node`` (O(its GPUs)), and the GPUs
        the node last reported in use by processes of a placement the cluster gave up or
        replaced (GPU fencing: until those processes are gone, no job is placed there)."""
        held = self.active_index.held_on(node)
        for proc in (self.nodes.get(node) or {}).get("procs") or ():
            if self._given_up(proc):
                for gpu in proc["gpus"]:
                    held.setdefault(gpu, f"{proc['job']} (attempt {proc['attempt']}, ending)")
        return held

    def _given_up(self, proc: dict) -> bool:
        """Whether a run a node reported (job, attempt) is one the cluster no longer counts
        as the job's placement: the job deleted, requeued, lost, or at another attempt."""
        job = self.jobs.get(proc["job"])
        return job is None or job.attempts != proc["attempt"] or job.state in ("queued", "lost")

    def query(self, name: str, args: dict | None = None) -> Any:
        """A named read, for reads forwarded to the leader (``/cluster/v1/read``)."""
        args = args or {}
        if name == "jobs":
            return copy_of([job.to_dict() for job in self.list_jobs(args.get("project"), args.get("states"))])
        if name == "job":
            return self.stored_job(str(args.get("job")))
        if name == "nodes":
            return self.list_nodes()
        if name == "datasets":
            return self.list_datasets()
        if name == "tokens":
            return copy_of(self.trust.list_tokens())
        if name == "counts":
            return {"nodes": len(self.nodes), "jobs": len(self.jobs), "archived": self.archive.count(),
                    "datasets": sum(len(d["versions"]) for d in self.datasets.values())}
        raise InvalidSpec(f"unknown query {name!r}", hint="queries: jobs, job, nodes, datasets, counts, tokens")
