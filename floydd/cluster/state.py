"""The control plane's replicated state machine: nodes, jobs, the dataset catalog.

Pure (STYLE 2): no I/O, no clock, no randomness. Every command is first checked for who may
say it (:func:`floydd.cluster.authz.authorize`, from its stamped ``proposer`` and the state). Every node applies the same committed
commands (:mod:`floydd.cluster.commands`) in the same order and so holds the same state;
time comes in as each command's ``ts``, set by its proposer. ``apply`` either changes the
state and returns a result, or raises a :class:`~floydd.errors.FloyddError` having changed
nothing (the rejection is the proposal's answer, the same on every node).

What it holds::

    nodes      id -> address, ports, resources (GPU indices), labels, status, last heartbeat,
               procs (its live runs: job, attempt, GPUs)
    removed    id -> when: tombstones of nodes removed for good (their certificates refused)
    revoked    certificate serial -> {node, ts}: the certificates of removed nodes
    people     name -> role, uids per box (:mod:`floydd.cluster.people`; ``admins`` derived)
    jobs       "project/N" -> spec, state, placement (node, gpus, term), attempts, reruns, summary
    counters   project -> last job number (numbers are never reused; project.reserve raises it)
    datasets   name -> versions (tree id, size, holders); version numbers never reused
    idem       idempotency key -> the job or dataset version it made (an imported job's key: its
               number, then the job; :mod:`floydd.cluster.imported`)
    archive    finished jobs moved out by ``job.archive`` (:mod:`floydd.cluster.archive`: SQLite
               beside the raft log, not in the snapshot's data); ``job``, ``job.submit``'s
               idempotency and ``job.delete`` also look there, numbers stay in ``counters``

Derived from the jobs and never serialised (rebuilt by ``restore``), so that placement reads
it in O(nodes + GPUs) every round: the active jobs and, per node id, the GPUs they hold, the
cores and memory they asked for there, and how many of them have a part there
(``held_gpus``, ``set_aside``, ``node_load``, ``busy_nodes``). Every
command that moves a job into or out of an active state keeps it up to date. Removing a node
leaves it alone: the node's jobs are still active, and should it rejoin its GPUs are still held.

Job states and their moves are the job model's (:mod:`floydd.model`), with its backward
edges (:data:`~floydd.model.REQUEUE`): a job whose box went silent before it started is
requeued by the leader, and a run that ends ``failed`` or ``lost`` is turned into ``queued``
right here when its restart policy reruns it (``reruns`` counts them; the next placement is
the next attempt, starting from the job's ``output_version``)::

    queued ──place──► starting ──► running ──► success | failed | stopped | timeout | lost
      ▲  │               │  │        │  ▲
      │  │               │  │        ▼  │  its box is back and says the run goes on
      │  │               │  └──► unknown ──► what the box says | lost (silent past lost_after)
      │  └───────────────┴──┴──► stopped | failed | lost
      └── requeue (not started) / rerun (policy, runs left, no stop asked) ──┘

``unknown``: the leader lost touch with the job's box (the node is ``suspect``); the job
keeps its GPUs and ``unknown_since`` says since when. A box's note on an older attempt
(``job.update`` with ``note`` and a past ``attempt``: e.g. it stopped a run that was replaced
while it was away) is added to the history and changes nothing else.

A gang job (``spec.resources.nodes`` > 1, :mod:`floydd.jobs.gang`) is placed whole: its
``parts`` (node, GPUs, rank, state, exit code) live on the job, ``node``/``gpus`` are rank 0's,
and ``endpoint`` is the rendezvous rank 0's box commits before any part starts. Each box
reports its own part (``rank``); the job's state follows its parts: running once all run,
success once all succeed, and the first part to fail, stop or be lost ends the job the
same way (the other boxes then stop their parts). The leader's ``unknown``/``lost`` names
the silent boxes (``silent``), whose parts take that state: while a part is unknown the job
waits for it, and a part lost with its box is named as the cause before any part that
failed meanwhile (its peers fail when it vanishes). A gang reruns whole.

Nodes report with each heartbeat the runs whose processes are alive on them (``procs``:
job, attempt, GPUs); GPUs of a run the cluster gave up or replaced count as held
(:meth:`ClusterState.held_gpus`) until the node reports them gone, so nothing new is placed
on a GPU an older placement's processes still use. The leader's ``suspect`` (it lost touch
with a node) makes the node unplaceable until its own next heartbeat, which carries them.

Leader actions are fenced: a command with a ``term`` (``job.place`` always has one) is
refused unless that is the term of the log entry that carries it. A placement is also
re-checked against the state it lands on (the job still queued, the node up and
holding those GPU indices, none of them held by an active job, and the cores and memory the
job asks for on each box not set aside for other active jobs there, where the node reported
its own; a spec without ``cpus``/``memory`` asks for none).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import msgpack

from floydd.cluster import imported, people, versions
from floydd.cluster.archive import MemoryArchive, archived_form
from floydd.cluster.audit import MemoryAudit
from floydd.cluster.apitokens import ApiTokens
from floydd.cluster.authz import authorize
from floydd.cluster.commands import check
from floydd.cluster.trust import TrustState
from floydd.errors import Conflict, InvalidSpec, NotFound
from floydd.model import (ACTIVE_STATES, FINAL_STATES, REQUEUE, TRANSITIONS, RestartPolicy, check_dataset_name,
                          asked_per_box, check_project, format_cpus, format_size, known_count)

__all__ = ["ClusterState", "StaleTerm", "SNAPSHOT_VERSION"]

SNAPSHOT_VERSION = 1
_TREE = re.compile(r"[0-9a-f]{16,128}")


class StaleTerm(Conflict):
    """A leader action whose fencing term is not the term it was committed in."""

    code = "stale_term"


class ClusterState:
    def __init__(self, archive: Any = None, audit: Any = None, *, protocol: int = 1) -> None:
        self.archive = archive if archive is not None else MemoryArchive()
        self.audit = audit if audit is not None else MemoryAudit()   # the audit chain (floydd.cluster.audit)
        self.protocol = protocol
        """The cluster's level (:mod:`floydd.cluster.versions`): 1 for a log that starts empty
        (it may be an 0.1 cluster's), raised by ``cluster.protocol``; tests of level-2 behaviour
        alone start a state at 2."""
        self._index = 0
        """Finished jobs moved out by ``job.archive`` (:mod:`floydd.cluster.archive`): not in
        the snapshot's data, shipped beside it."""
        self.nodes: dict[str, dict] = {}
        self.removed: dict[str, float] = {}
        self.jobs: dict[str, dict] = {}
        self.counters: dict[str, int] = {}
        self.datasets: dict[str, dict] = {}
        self.idem: dict[str, list] = {}
        self.trust = TrustState()           # join tokens, members' certificates (floydd.cluster.trust)
        self.apitokens = ApiTokens()        # personal API tokens (floydd.cluster.apitokens)
        self.revoked: dict[str, dict] = {}  # certificate serial (hex) -> {node, ts}: removed nodes' (authz)
        self.people: dict[str, dict] = {}   # the lab's people (floydd.cluster.people; authz reads roles)
        # derived, never serialised (rebuilt by restore): ids of the jobs in ACTIVE_STATES, and
        # per node id the GPUs they hold (index -> job id) and how many of them have a part there
        self._active: dict[str, None] = {}
        self._held: dict[str, dict[int, str]] = {}
        self._load: dict[str, int] = {}
        self._cpu: dict[str, int] = {}          # node id -> thousandths of a core asked by its active jobs
        self._memory: dict[str, int] = {}       # node id -> bytes asked by its active jobs
        self._handlers: dict[str, Callable[[dict, int], Any]] = {
            "node.upsert": self._node_upsert, "node.health": self._node_health,
            "node.remove": self._node_remove, "job.submit": self._job_submit,
            "job.place": self._job_place, "job.update": self._job_update,
            "job.delete": self._job_delete, "job.archive": self._job_archive,
            "project.reserve": self._project_reserve,
            "project.allocate": lambda cmd, term: imported.allocate(self, cmd),
            "job.import": lambda cmd, term: imported.import_job(self, cmd),
            "dataset.add_version": self._dataset_add,
            "dataset.delete": self._dataset_delete, "dataset.holders": self._dataset_holders,
            "token.create": lambda cmd, term: self.trust.token_create(cmd),
            "token.use": lambda cmd, term: self.trust.token_use(cmd, members=self.nodes, removed=self.removed),
            "token.revoke": lambda cmd, term: self.trust.token_revoke(cmd),
            "node.cert": lambda cmd, term: self.trust.node_cert(cmd, members=self.nodes, removed=self.removed),
            "admin.grant": lambda cmd, term: people.grant(self.people, cmd),
            versions.OP: lambda cmd, term: versions.apply_level(self, cmd),
            "person.add": lambda cmd, term: people.add(self.people, cmd),
            "person.role": lambda cmd, term: people.set_role(self.people, cmd),
            "person.remove": lambda cmd, term: people.remove(self.people, cmd),
            "person.map": lambda cmd, term: people.map_uids(self.people, cmd),
            "apitoken.create": lambda cmd, term: self.apitokens.create(cmd),
            "apitoken.revoke": lambda cmd, term: self.apitokens.revoke(cmd),
        }

    # -- the state machine ---------------------------------------------------------------

    def apply(self, command: dict, *, index: int, term: int) -> Any:
        """Apply one committed command (log ``index``, entry ``term``); its result, or a
        FloyddError with nothing changed."""
        cmd = check(command)
        self._index = index                 # the archive as of this entry (archive.visible)
        if "term" in cmd and cmd["term"] != term:
            raise StaleTerm(f"{cmd['op']} was decided by the leader of term {cmd['term']} but committed in "
                            f"term {term}: a former leader's action", hint="the current leader decides again")
        versions.check_supported(self, cmd)         # a newer level's: refused alike by every box
        authorize(self, cmd, cmd.get("proposer"))   # Forbidden: who proposed it may not say it
        return self.audit.around(self, cmd, index, lambda: self._handlers[cmd["op"]](cmd, term))

    def snapshot(self) -> bytes:
        return msgpack.packb({"v": SNAPSHOT_VERSION, "nodes": self.nodes, "removed": self.removed,
                              "jobs": self.jobs, "counters": self.counters,
                              "datasets": self.datasets, "idem": self.idem, **self.trust.snapshot(),
                              **self.apitokens.snapshot(), "revoked": self.revoked, "people": self.people,
                              "admins": self.admins,     # what an 0.1 box reads of people
                              "protocol": self.protocol},
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
        self.nodes, self.removed, self.jobs = raw["nodes"], raw["removed"], raw["jobs"]
        self.counters, self.datasets, self.idem = raw["counters"], raw["datasets"], raw["idem"]
        self.trust.restore(raw)
        self.apitokens.restore(raw)
        self.revoked, self.people = dict(raw.get("revoked") or {}), people.migrate(raw)
        self.protocol = int(raw.get("protocol") or 1)        # an 0.1 box's snapshot says none
        self._active, self._held, self._load, self._cpu, self._memory = {}, {}, {}, {}, {}
        for job in self.jobs.values():
            if job["state"] in ACTIVE_STATES:
                self._activate(job)

    # -- reads (copies; the state itself is only changed by apply) -------------------------

    @property
    def admins(self) -> list[str]:
        """The admins' names (people with role admin): none in a lab of one."""
        return people.admins(self.people)

    def job(self, key: str) -> dict:
        """The job, from the hot state or else the archive (NotFound if in neither)."""
        job = self.jobs.get(key)
        if job is None:
            job = self.archive.get(key)
        return _copy(job if job is not None else self._job(key))

    def list_jobs(self, project: str | None = None, states=None) -> list[dict]:
        """Jobs in submission order."""
        return _copy([j for j in self.jobs.values()
                      if (project is None or j["project"] == project) and (not states or j["state"] in states)])

    def list_nodes(self) -> list[dict]:
        return _copy(list(self.nodes.values()))

    def list_datasets(self) -> list[dict]:
        return _copy([v for d in self.datasets.values() for v in d["versions"].values()])

    def held_gpus(self, node: str) -> dict[int, str]:
        """GPU index -> id of the active job holding it, on ``node`` (O(its GPUs)), and the GPUs
        the node last reported in use by processes of a placement the cluster gave up or
        replaced (GPU fencing: until those processes are gone, no job is placed there)."""
        held = dict(self._held.get(node) or {})
        for proc in (self.nodes.get(node) or {}).get("procs") or ():
            if self._given_up(proc):
                for gpu in proc["gpus"]:
                    held.setdefault(gpu, f"{proc['job']} (attempt {proc['attempt']}, ending)")
        return held

    def _given_up(self, proc: dict) -> bool:
        """Whether a run a node reported (job, attempt) is one the cluster no longer counts
        as the job's placement: the job deleted, requeued, lost, or at another attempt."""
        job = self.jobs.get(proc["job"])
        return job is None or job["attempts"] != proc["attempt"] or job["state"] in ("queued", "lost")

    def set_aside(self, node: str) -> tuple[int, int]:
        """(thousandths of a core, bytes of memory) the active jobs with a part on ``node``
        asked for there."""
        return self._cpu.get(node, 0), self._memory.get(node, 0)

    def node_load(self, node: str) -> int:
        """How many active jobs have a part on ``node``."""
        return self._load.get(node, 0)

    def busy_nodes(self) -> list[str]:
        """Ids of the nodes where active jobs have a part (removed nodes among them)."""
        return list(self._load)

    def node_health(self, now: float, stale_after: float) -> dict[str, str]:
        """Each node's status (``suspect``: the leader lost touch with it), ``stale`` when it
        says it is up but its last heartbeat is older than ``stale_after``."""
        return {nid: ("stale" if n["status"] == "up" and now - n["last_heartbeat"] > stale_after
                      else n["status"]) for nid, n in self.nodes.items()}

    def query(self, name: str, args: dict | None = None) -> Any:
        """A named read, for reads forwarded to the leader (``/cluster/v1/read``)."""
        args = args or {}
        if name == "jobs":
            return self.list_jobs(args.get("project"), args.get("states"))
        if name == "job":
            return self.job(str(args.get("job")))
        if name == "nodes":
            return self.list_nodes()
        if name == "datasets":
            return self.list_datasets()
        if name == "tokens":
            return _copy(self.trust.list_tokens())
        if name == "counts":
            return {"nodes": len(self.nodes), "jobs": len(self.jobs), "archived": self.archive.count(),
                    "datasets": sum(len(d["versions"]) for d in self.datasets.values())}
        raise InvalidSpec(f"unknown query {name!r}", hint="queries: jobs, job, nodes, datasets, counts, tokens")

    # -- nodes -----------------------------------------------------------------------------

    def _node_upsert(self, cmd: dict, term: int) -> dict:
        nid = cmd["id"]
        if nid in self.removed and not cmd.get("rejoin"):
            raise Conflict(f"node {nid} was removed from the cluster", code="node_removed",
                           hint="join again with a new token (floydd token, then floydd join)")
        _gpu_indices(cmd.get("resources") or {})
        self.removed.pop(nid, None)
        node = self.nodes.get(nid)
        if node is None:
            node = self.nodes[nid] = {"id": nid, "joined": cmd["ts"], "usage": {}}
        node.update(name=cmd["name"], address=cmd["address"], cluster_port=cmd["cluster_port"],
                    api_port=cmd.get("api_port"), resources=cmd.get("resources") or {},
                    labels=cmd.get("labels") or {}, status="up", updated=cmd["ts"],
                    last_heartbeat=cmd["ts"])
        if "procs" in cmd:
            node["procs"] = cmd["procs"]
        if "config" in cmd:                  # what its operator set (audited when it changes)
            node["config"] = cmd["config"]
        return _copy(node)

    def _node_health(self, cmd: dict, term: int) -> None:
        """A node's heartbeat (its status, usage and live job processes, ``procs``), or the
        leader's ``suspect``: it lost touch with the node (the node's next heartbeat, which
        reports its processes, makes it ``up`` again; until then nothing is placed there)."""
        node = self._node(cmd["id"])
        if cmd["status"] == "suspect":
            if node["status"] in ("up", "draining"):
                node.update(status="suspect", suspect_since=cmd["ts"])
            return
        node.update(status=cmd["status"], last_heartbeat=cmd["ts"])
        if "usage" in cmd:
            node["usage"] = cmd["usage"]
        if "procs" in cmd:
            node["procs"] = cmd["procs"]

    def _node_remove(self, cmd: dict, term: int) -> None:
        """Tombstone the node and revoke the certificates recorded for it (its current and
        previous one): whoever holds them is refused from now on, whatever node id they claim."""
        nid = cmd["id"]
        self.nodes.pop(nid, None)
        self.removed[nid] = cmd["ts"]
        record = self.trust.certs.get(nid) or {}
        for serial in (record.get("serial"), (record.get("previous") or {}).get("serial")):
            if serial:
                self.revoked[serial] = {"node": nid, "ts": cmd["ts"]}

    def _node(self, nid: str) -> dict:
        node = self.nodes.get(nid)
        if node is None:
            raise NotFound(f"node {nid} is not in the cluster", code="node_not_found",
                           hint="floydd members lists the nodes")
        return node

    # -- jobs ------------------------------------------------------------------------------

    def _job_submit(self, cmd: dict, term: int) -> dict:
        seen = self.idem.get(cmd["idem_key"])
        if seen is not None:
            if seen[0] != "job" or seen[1] not in self.jobs:
                raise Conflict(f"idempotency key {cmd['idem_key']!r} was used for something else",
                               code="idempotency_key_reused", hint="use a fresh key for a new submission")
            return _copy(self.jobs[seen[1]])
        archived = self.archive.by_idem(cmd["idem_key"], self._index)
        if archived is not None:                  # a retry long after: the same job, archived since
            return _copy(archived)
        project = check_project(cmd["project"])
        number = cmd.get("number", self.counters.get(project, 0) + 1)
        if not 1 <= number < 10**18:
            raise InvalidSpec(f"job.submit: number {number} is not a job number")
        key = f"{project}/{number}"
        if key in self.jobs or self.archive.get(key, self._index) is not None:
            raise Conflict(f"job {key} exists", code="job_exists", hint="adopt it under another number")
        ts = cmd["ts"]
        job = {"id": key, "project": project, "number": number, "idem_key": cmd["idem_key"],
               "spec": cmd["spec"], "state": "queued", "reason": "", "waiting_for": "",
               "created": ts, "updated": ts, "started": None, "ended": None, "node": None,
               "gpus": [], "attempts": 0, "placed_term": None, "exit_code": None,
               "output_version": None, "summary": {}, "stop_requested": "", "origin": cmd.get("origin", ""),
               "user": cmd.get("user", "")}
        job["history"] = [[ts, f"submitted on {self._name(cmd.get('origin', ''))}"]]
        self.counters[project] = max(self.counters.get(project, 0), number)
        self.jobs[key] = job
        self.idem[cmd["idem_key"]] = ["job", key]
        return _copy(job)

    def _job_place(self, cmd: dict, term: int) -> dict:
        key = cmd["job"]
        parts = list(cmd.get("parts") or [{"node": cmd["node"], "gpus": cmd["gpus"]}])
        job = self._job(key)
        if job["state"] != "queued":
            raise Conflict(f"job {key} is {job['state']}, not queued: it cannot be placed",
                           code="job_not_queued")
        if (parts[0]["node"], list(parts[0]["gpus"])) != (cmd["node"], list(cmd["gpus"])):
            raise InvalidSpec(f"placement of {key}: node and gpus must be those of rank 0")
        wanted_nodes = _wanted_nodes(job["spec"])
        if len(parts) != wanted_nodes:
            raise InvalidSpec(f"job {key} spans {wanted_nodes} nodes, the placement gives {len(parts)}")
        if len({p["node"] for p in parts}) != len(parts):
            raise InvalidSpec(f"placement of {key} names a node twice")
        wanted = _wanted_gpus(job["spec"])
        for part in parts:
            nid, gpus = part["node"], list(part["gpus"])
            node = self._node(nid)
            if node["status"] != "up":
                raise Conflict(f"node {nid} is {node['status']}: no new jobs go there", code="node_not_up")
            if len(set(gpus)) != len(gpus):
                raise InvalidSpec(f"placement of {key} names a GPU twice: {gpus}")
            if wanted is not None and wanted != len(gpus):
                raise InvalidSpec(f"job {key} wants {wanted} GPUs, the placement gives {len(gpus)}")
            missing = sorted(set(gpus) - set(_gpu_indices(node["resources"])))
            if missing:
                raise Conflict(f"node {nid} has no GPU {missing}", code="no_such_gpu")
            held = self.held_gpus(nid)
            busy = sorted(g for g in gpus if g in held)
            if busy:
                raise Conflict(f"GPU {busy} of node {nid} held by {held[busy[0]]}", code="gpu_busy",
                               hint="the leader plans again from the current state")
            self._check_room(key, nid, node, job["spec"])
        job.update(state="starting", node=parts[0]["node"], gpus=list(parts[0]["gpus"]),
                   attempts=job["attempts"] + 1, placed_term=term, waiting_for="", reason="",
                   updated=cmd["ts"], endpoint=None,
                   parts=[] if len(parts) == 1 else [
                       {"rank": rank, "node": p["node"], "gpus": list(p["gpus"]), "state": "starting",
                        "exit_code": None, "reason": ""} for rank, p in enumerate(parts)])
        self._activate(job)
        where = ", ".join(f"{self._name(p['node'])} ({_where(p['gpus'])})" for p in parts)
        _remember(job, cmd["ts"], f"placed on {where} by the leader of term {term}, attempt {job['attempts']}")
        return _copy(job)

    def _job_update(self, cmd: dict, term: int) -> dict:
        key = cmd["job"]
        job = self._job(key)
        if "note" in cmd and set(cmd) <= _NOTE_FIELDS and cmd.get("attempt", 0) <= job["attempts"]:
            return self._note(job, cmd)         # a box's word, e.g. on a run the cluster replaced
        if "attempt" in cmd and cmd["attempt"] != job["attempts"]:
            raise Conflict(f"update for attempt {cmd['attempt']} of {key}, which is at attempt "
                           f"{job['attempts']}", code="stale_attempt")
        if "note" in cmd:
            raise InvalidSpec("job.update: a note goes alone (with job, attempt and node)")
        if "rank" in cmd:
            return self._part_update(job, cmd)
        if "node" in cmd and cmd["node"] != job["node"]:
            raise Conflict(f"job {key} is placed on {job['node']}, not {cmd['node']}", code="wrong_node")
        if "endpoint" in cmd:
            raise InvalidSpec("job.update: endpoint is set by rank 0 of a gang (with rank)")
        new, old = cmd.get("state"), job["state"]
        if new is not None and new != old:
            if new not in TRANSITIONS:
                raise InvalidSpec(f"{new!r} is not a job state")
            if new not in TRANSITIONS[old] and (old, new) not in REQUEUE:
                raise Conflict(f"job {key} is {old}; it cannot become {new}", code="bad_transition")
        if "output_version" in cmd:                  # before a rerun, which starts from it
            job["output_version"] = cmd["output_version"]
        if "summary" in cmd:
            job["summary"].update(cmd["summary"])
        rerun = False
        if new is not None and new != old:
            why = cmd.get("reason") or ""
            if new in ("unknown", "lost"):           # the leader names the silent boxes of a gang
                for part in job.get("parts") or ():
                    if part["node"] in (cmd.get("silent") or ()) and part["state"] in ACTIVE_STATES:
                        part.update(state=new, reason=why)
            rerun = self._rerun(job, new, why, cmd["ts"])
            if not rerun:
                self._move(job, new, why, cmd["ts"])
        if cmd.get("stop_requested") and not job.get("stop_requested"):
            _remember(job, cmd["ts"], f"stop requested: {cmd['stop_requested']}")
        for name in ("waiting_for", "stop_requested") + (() if rerun else ("reason", "exit_code")):
            if name in cmd:
                job[name] = cmd[name]
        job["updated"] = cmd["ts"]
        return _copy(job)

    def _move(self, job: dict, new: str, why: str, ts: float) -> None:
        """Set the job's state (a move already checked) and what goes with it: the index of
        active jobs, start and end times, the placement a requeue forgets, the history."""
        old = job["state"]
        job["state"] = new
        if new in ACTIVE_STATES:
            self._activate(job)
        else:
            self._deactivate(job)           # before a requeue forgets where the job was placed
        if new == "running" and (old != "unknown" or job["started"] is None):
            job["started"] = ts
        elif new in FINAL_STATES:
            job["ended"] = ts
        elif new == "queued":
            job.update(node=None, gpus=[], parts=[], endpoint=None)
        job["unknown_since"] = ts if new == "unknown" else None
        _remember(job, ts, f"{old} → {new}" + (f": {why}" if why else ""))

    def _rerun(self, job: dict, new: str, why: str, ts: float) -> bool:
        """Run the job again (queued, a new attempt to come) if its restart policy says so for a
        run that ended ``new``, it has runs left and no stop was asked; True if it does. A gang
        reruns whole; the rerun starts from the job's last ``/output`` (``output_version``)."""
        if new not in FINAL_STATES or job["state"] not in ACTIVE_STATES or job.get("stop_requested"):
            return False
        try:
            policy = RestartPolicy.from_dict(job["spec"].get("restart"))
        except InvalidSpec:                  # not a spec this version can read: never rerun
            return False
        reruns = job.get("reruns", 0)
        if not policy.reruns(new) or reruns + 1 >= policy.max_attempts:
            return False
        old, attempt = job["state"], job["attempts"]
        self._deactivate(job)
        job.update(state="queued", node=None, gpus=[], parts=[], endpoint=None, started=None, ended=None,
                   exit_code=None, unknown_since=None, reruns=reruns + 1, waiting_for="",
                   reason=f"attempt {attempt} {new}" + (f": {why}" if why else "") + "; it runs again")
        start = f", from the /output of {job['output_version']}" if job.get("output_version") else ""
        _remember(job, ts, f"{old} → {new}" + (f": {why}" if why else "") +
                  f"; run {reruns + 2} of at most {policy.max_attempts} follows (--restart {policy.policy}){start}")
        return True

    def _note(self, job: dict, cmd: dict) -> dict:
        """A line from a box in the job's history (e.g. it stopped a run the cluster replaced)."""
        who = self._name(cmd["node"]) if cmd.get("node") else "a box"
        _remember(job, cmd["ts"], f"{who}: {cmd['note']}")
        job["updated"] = cmd["ts"]
        return _copy(job)

    def _part_update(self, job: dict, cmd: dict) -> dict:
        """A box's report on its part of a gang; the job's state follows its parts."""
        key, rank, parts = job["id"], cmd["rank"], job.get("parts") or []
        if not 0 <= rank < len(parts):
            raise Conflict(f"job {key} has no part of rank {rank}", code="no_such_part")
        part = parts[rank]
        if "node" in cmd and cmd["node"] != part["node"]:
            raise Conflict(f"rank {rank} of {key} is placed on {part['node']}, not {cmd['node']}",
                           code="wrong_node")
        new, old = cmd.get("state"), part["state"]
        if new is not None and new != old:
            if new not in TRANSITIONS:
                raise InvalidSpec(f"{new!r} is not a job state")
            if new not in TRANSITIONS[old]:
                raise Conflict(f"rank {rank} of {key} is {old}; it cannot become {new}", code="bad_transition")
            part["state"] = new
            why = cmd.get("reason") or ""
            _remember(job, cmd["ts"], f"rank {rank} on {self._name(part['node'])}: {old} → {new}"
                                      + (f": {why}" if why else ""))
        for name in ("reason", "exit_code"):
            if name in cmd:
                part[name] = cmd[name]
        if "endpoint" in cmd:
            if rank != 0:
                raise InvalidSpec(f"job.update: only rank 0 sets the rendezvous of {key}")
            job["endpoint"] = cmd["endpoint"]
        if rank == 0:
            for name in ("exit_code", "output_version"):
                if name in cmd:
                    job[name] = cmd[name]
            if "summary" in cmd:
                job["summary"].update(cmd["summary"])
        job["updated"] = cmd["ts"]
        if job["state"] in ACTIVE_STATES:
            self._follow_parts(job, cmd["ts"])
        return _copy(job)

    def _follow_parts(self, job: dict, ts: float) -> None:
        """The job's state from its parts'. While a part is ``unknown`` (its box out of touch)
        the job waits for it; a part lost with its box names that box."""
        parts, old = job["parts"], job["state"]
        if any(p["state"] == "unknown" for p in parts):
            return
        ended = [p for p in parts if p["state"] == "lost"] or \
            [p for p in parts if p["state"] in FINAL_STATES and p["state"] != "success"]
        if ended:
            first = ended[0]
            new = first["state"]
            why = f"rank {first['rank']} on {self._name(first['node'])} {new}" + \
                  (f": {first['reason']}" if first["reason"] else "")
        elif all(p["state"] == "success" for p in parts):
            new, why = "success", ""
        elif old in ("starting", "unknown") and all(p["state"] in ("running", "success") for p in parts):
            new, why = "running", ""
        elif old == "unknown":
            new, why = "starting", ""       # every box is back; some part has yet to start
        else:
            return
        if new != "running" and new != "starting":
            job["reason"] = why
            if self._rerun(job, new, why, ts):
                return
        job["state"] = new              # derived, so starting -> success is fine: no part skipped running
        job["unknown_since"] = None
        if job["started"] is None and new in ("running", "success", "timeout"):
            job["started"] = ts
        if new not in ("running", "starting"):
            job["ended"] = ts
            self._deactivate(job)
        _remember(job, ts, f"{old} → {new}" + (f": {why}" if why else ""))

    def _job_delete(self, cmd: dict, term: int) -> None:
        key = cmd["job"]
        if key not in self.jobs and self.archive.drop(key, self._index) is not None:
            return                                # an archived job: its row goes
        job = self._job(key)
        if job["state"] in ACTIVE_STATES:
            raise Conflict(f"job {key} is {job['state']}", code="job_active",
                           hint=f"stop it first: floyd stop {key}")
        del self.jobs[key]
        self.idem.pop(job["idem_key"], None)

    def _job_archive(self, cmd: dict, term: int) -> dict:
        """Move finished jobs (every part final) to the archive; any other named job stays
        (decided again here: the leader chose from an older state). Their idempotency keys
        move with them, so a retried submission still finds its job."""
        moved = []
        for key in cmd["jobs"]:
            job = self.jobs.get(key)
            if job is None or key in self._active or job["state"] not in FINAL_STATES \
                    or any(p["state"] not in FINAL_STATES for p in job.get("parts") or ()):
                continue
            del self.jobs[key]
            if self.idem.get(job["idem_key"]) == ["job", key]:
                del self.idem[job["idem_key"]]
            self.archive.put(archived_form(job, self._index))
            moved.append(key)
        return {"archived": moved}

    def _project_reserve(self, cmd: dict, term: int) -> int:
        """Number later jobs of a project above ``number`` (a node's own history from before
        it joined uses the numbers up to it)."""
        project, number = check_project(cmd["project"]), cmd["number"]
        if number < 0:
            raise InvalidSpec(f"project.reserve: number {number} is negative")
        self.counters[project] = max(self.counters.get(project, 0), number)
        return self.counters[project]

    def _check_room(self, key: str, nid: str, node: dict, spec: dict) -> None:
        """Conflict unless ``node`` has the cores and memory job ``key`` asks for on each box
        beside what its active jobs asked (a node that reported neither is never short)."""
        cpu, memory = asked_per_box(spec)
        resources = node["resources"]
        for asked, held, have, say in (
                (cpu, self._cpu.get(nid, 0), known_count(resources.get("cpus"), 1000), format_cpus),
                (memory, self._memory.get(nid, 0), known_count(resources.get("memory"), 1), format_size)):
            if asked and have is not None and held + asked > have:
                raise Conflict(f"node {nid} has {say(max(0, have - held))} of {say(have)} free; job {key} asks for "
                               f"{say(asked)}", code="no_room", hint="the leader plans again from the current state")

    def _activate(self, job: dict) -> None:
        """Count an active job in the derived index: a gang holds every part's GPUs, cores and
        memory while active."""
        key = job["id"]
        if key in self._active:
            return
        self._active[key] = None
        cpu, memory = asked_per_box(job["spec"])
        for part in job.get("parts") or (job,):
            nid = part["node"]
            self._load[nid] = self._load.get(nid, 0) + 1
            if part["gpus"]:
                self._held.setdefault(nid, {}).update((g, key) for g in part["gpus"])
            if cpu:
                self._cpu[nid] = self._cpu.get(nid, 0) + cpu
            if memory:
                self._memory[nid] = self._memory.get(nid, 0) + memory

    def _deactivate(self, job: dict) -> None:
        """Take a job that stops being active out of the derived index (its placement is the
        one it was counted with: a job is placed only while queued)."""
        key = job["id"]
        if key not in self._active:
            return
        del self._active[key]
        cpu, memory = asked_per_box(job["spec"])
        for part in job.get("parts") or (job,):
            nid = part["node"]
            self._load[nid] -= 1
            if not self._load[nid]:
                del self._load[nid]
            for index, asked in ((self._cpu, cpu), (self._memory, memory)):
                if asked:
                    index[nid] -= asked
                    if not index[nid]:
                        del index[nid]
            held = self._held.get(nid, {})
            for g in part["gpus"]:
                if held.get(g) == key:
                    del held[g]
            if not held:
                self._held.pop(nid, None)

    def _name(self, nid: str) -> str:
        node = self.nodes.get(nid)
        return node["name"] if node else (nid or "an unknown node")

    def _job(self, key: str) -> dict:
        job = self.jobs.get(key)
        if job is None:
            raise NotFound(f"job {key} does not exist", code="job_not_found", hint="floyd status lists jobs")
        return job

    # -- datasets --------------------------------------------------------------------------

    def _dataset_add(self, cmd: dict, term: int) -> dict:
        name, tree, idem_key = cmd["name"], cmd["tree"], cmd.get("idem_key")
        if idem_key is not None and idem_key not in self.idem and self.archive.by_idem(idem_key, self._index) is not None:
            raise Conflict(f"idempotency key {idem_key!r} was used for a job", code="idempotency_key_reused")
        if idem_key is not None and idem_key in self.idem:
            seen = self.idem[idem_key]
            version = self.datasets.get(seen[1], {}).get("versions", {}).get(str(seen[2]))
            if seen[0] != "dataset" or version is None:
                raise Conflict(f"idempotency key {idem_key!r} was used for something else",
                               code="idempotency_key_reused")
            return _copy(version)
        check_dataset_name(name)
        if not _TREE.fullmatch(tree):
            raise InvalidSpec(f"{tree!r:.80} is not a tree id (hex)")
        dataset = self.datasets.setdefault(name, {"next": 1, "versions": {}})
        if versions.at_least(self, 2):      # owners came with level 2: every box writes them from then
            people.own_dataset(dataset, cmd)  # owner, visibility (authz checked who may change them)
        number = dataset["next"]
        dataset["next"] = number + 1
        version = {"name": name, "version": number, "ref": f"{name}:{number}", "tree": tree,
                   "created": cmd["ts"], "size": cmd.get("size", 0), "files": cmd.get("files", 0),
                   "message": cmd.get("message", ""), "holders": [cmd["node"]] if "node" in cmd else [],
                   "idem_key": idem_key, "user": cmd.get("user", "")}
        if "owner" in dataset:
            version.update(owner=dataset["owner"], visibility=dataset["visibility"])
        dataset["versions"][str(number)] = version
        if idem_key is not None:
            self.idem[idem_key] = ["dataset", name, number]
        return _copy(version)

    def _dataset_delete(self, cmd: dict, term: int) -> None:
        name, number = cmd["name"], cmd.get("version")
        versions = self.datasets.get(name, {}).get("versions", {})
        doomed = list(versions) if number is None else [str(number)]
        if not doomed or doomed[0] not in versions:
            raise NotFound(f"dataset {name}{'' if number is None else f':{number}'} does not exist",
                           code="dataset_not_found", hint="floyd data list shows the datasets")
        for n in doomed:
            idem_key = versions.pop(n)["idem_key"]
            if idem_key is not None:
                self.idem.pop(idem_key, None)

    def _dataset_holders(self, cmd: dict, term: int) -> dict:
        name, number = cmd["name"], cmd["version"]
        version = self.datasets.get(name, {}).get("versions", {}).get(str(number))
        if version is None:
            raise NotFound(f"dataset {name}:{number} does not exist", code="dataset_not_found")
        holders = set(version["holders"])
        (holders.add if cmd["holds"] else holders.discard)(cmd["node"])
        version["holders"] = sorted(holders)
        return _copy(version)


_HISTORY = 32
"""Entries of a job's cluster history kept (the first one, submission, always stays)."""
_NOTE_FIELDS = frozenset({"op", "ts", "job", "attempt", "node", "note", "proposer", "v"})
"""What a box's note on an older attempt may carry (nothing that changes the job)."""


def _remember(job: dict, ts: float, text: str) -> None:
    """Add a line to the job's history (what the cluster decided: placements, requeues, stops)."""
    history = job.setdefault("history", [])
    history.append([ts, text])
    if len(history) > _HISTORY:
        del history[1:len(history) - _HISTORY + 1]


def _copy(value: Any) -> Any:
    """A deep copy of plain data (dicts, lists, scalars): callers never hold the state's own."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)


def _gpu_indices(resources: dict) -> tuple[int, ...]:
    """GPU indices of a node's resources: ``{"gpus": [0, 1]}`` or ``[{"index": 0, ...}]``."""
    out = []
    for gpu in resources.get("gpus") or ():
        index = gpu.get("index") if isinstance(gpu, dict) else gpu
        if type(index) is not int or index < 0:
            raise InvalidSpec(f"a GPU must have a non-negative index, got {gpu!r:.80}")
        out.append(index)
    return tuple(out)


def _where(gpus: list) -> str:
    return f"GPU {', '.join(map(str, gpus))}" if gpus else "CPU"


def _wanted_nodes(spec: dict) -> int:
    resources = spec.get("resources")
    nodes = resources.get("nodes") if isinstance(resources, dict) else None
    return nodes if type(nodes) is int and nodes >= 1 else 1


def _wanted_gpus(spec: dict) -> int | None:
    resources = spec.get("resources")
    wanted = resources.get("gpus") if isinstance(resources, dict) else spec.get("gpus")
    return wanted if type(wanted) is int else None
