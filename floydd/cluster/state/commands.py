"""The replicated log's commands: validated dicts, msgpack on the wire and on disk.

A command is a small dict with an ``op`` and the fields its schema names, nothing else;
every one carries ``ts`` (unix seconds) set by the node that proposed it, because the
state machine reads no clock. A leader action also carries ``term``, the leader's term
stamped as it entered the log (a fencing token: the state machine refuses it unless it is
the term of its entry); ``job.place`` always does, and such commands are never forwarded.
:func:`check` validates a command before it is proposed (and again when applied, so a
malformed entry is rejected the same way on every node); :func:`encode` / :func:`decode`
turn it into the bytes of a raft entry. Nothing is pickled. What comes back, a command's
answer or a read of the state, is a deep copy (:func:`copy_of`): a caller can never change the
state by changing what it was given.

    op                    fields (besides op, ts)                          idempotent by
    node.upsert           id, name, address, cluster_port, api_port?,       being an upsert
                          resources?, labels?, rejoin?, procs?
    node.health           id, status (up|draining|off|down), usage?,        being a set
                          procs? (its live runs: [{job, attempt, gpus}]);
                          or the leader's status suspect (lost touch);
                          audit_head? ({seq, hash}: its audit chain's newest
                          entry, level 3: floydd.cluster.audit_evidence);
                          clock? ({offset, rtt}: its clock against the
                          leader's, level 3: floydd.cluster.clockskew)
    node.remove           id, user? (an operator's floydd remove)           tombstone
    job.submit            idem_key, project, spec, origin?, user?, number?  idem_key
                          (number: a box's queued job from before it had a
                          control plane keeps its own; else the next one)
    job.place             job, node, gpus, parts? (and term: fenced)        job must be queued
    job.update            job, state?, reason?, exit_code?, output_version?, same state = no-op
                          summary?, waiting_for?, stop_requested?, attempt?,
                          node?, rank?, endpoint?, silent? (the leader: the
                          boxes out of touch), note? (a box's line for the
                          history, also about an older attempt), user? (who
                          asked for a stop)
    job.delete            job, user?                                        NotFound on retry
    job.archive           jobs (keys of finished jobs, at most 1,000)       moving what is there
    project.reserve       project, number (later jobs are numbered above)   being a max
    project.allocate      project, keys (one import key per job)            the keys (a number each)
    job.import            idem_key, project, number, node, spec, state,     idem_key
                          reason?, exit_code?, created, started?, ended?,
                          output_version?, summary?, history?, imported,
                          user? (floydd.cluster.state.imported: a finished job
                          brought from another site, held by node)
    dataset.add_version   name, tree, size?, files?, message?, node?,       idem_key
                          idem_key?, user?, visibility? (lab|private: set
                          by the dataset's first version, or its owner)
    dataset.delete        name, version? (None: every version), user?       NotFound on retry
    dataset.holders       name, version, node, holds, failed? (level 3: a   being a set
                          box could not keep a copy, why: passed over for
                          it a while, floydd.cluster.replication.replicas)
    code.holders          tree, node, holds (a job's code tree: level 3,    being a set
                          floydd.cluster.state.code)
    token.create          id, secret_sha256, expires, made_by?, made_on?,   Conflict on retry
                          sign_in? (level 3: whom it signs in on the box)
    token.use             id, secret_sha256, node, serial, not_after        used once (join)
    token.revoke          id, by?                                           being a set
    node.cert             id, serial, not_after (a renewed certificate)     being a set
    (floydd.cluster.state.credentials: join tokens and members' certificates)
    admin.grant           user (the person who made the cluster)            being a set
    cluster.protocol      level (every box speaks it: floydd.cluster.state.versions)  being a max
    person.add            name, role (admin|user), uids?, user?             Conflict on retry
    person.role           name, role, user?                                 being a set
    person.remove         name, user?                                       NotFound on retry
    person.map            name, node, uids (the uids acting as name there), being a set
                          user?
    person.boxes          name, on, node? | every_box? (where their login   being a set
                          name acts as them), user?
    (floydd.cluster.state.people: the lab's people; ``user``: the admin who asked; person.add
    also takes boxes?, every_box? from level 3)
    apitoken.create       id, person, secret_sha256, expires?, label?,      Conflict on retry
                          user? (who asked: the person, or an admin),
                          public_key? (level 3: the token's signing key)
    apitoken.revoke       id, user?                                         being a set
    (floydd.cluster.state.apitokens: personal API tokens, checked by every box)
    audit.tamper          box, first_seq, what (a box found its stored        an entry each
                          audit chain edited at start: floydd.cluster.audit_guard)
    store.epoch           epoch, fingerprint, made_on, reason?, user? (a     Conflict on retry
                          new store key epoch: floydd.cluster.state.keyepochs)

Every command the leader appends also carries ``proposer``: the node id of the box that
proposed it, taken from its verified certificate when the leader accepted it (never from
the body), or the leader's own id. :mod:`floydd.cluster.state.authz` decides on apply, from it
and the state, whether that box (and the ``user`` it speaks for) may say the command.

From cluster level 3 a command made for a person (a ``user``, ``made_by`` or ``by``:
:data:`PERSON_OPS`) may carry ``auth = {token, sig}``: the signature of that person's
personal token presented to the proposing box (:mod:`floydd.cluster.state.signin`).

From cluster level 2 on every command also carries ``v``, the protocol of the box that
proposed it (:mod:`floydd.cluster.state.versions`: what a command needs, and why older levels carry
none).

Membership changes are not commands of the state machine: they travel as raft conf
changes; :data:`CONF_OP` (``raft.conf``) names them when forwarded to the leader.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import msgpack

from floydd.errors import InvalidSpec

__all__ = ["OPS", "FENCED_OPS", "CONF_OP", "CONF_CHANGES", "NODE_STATUSES", "MAX_ARCHIVE", "PERSON_OPS", "check",
           "encode", "decode", "copy_of"]

CONF_OP = "raft.conf"
"""A membership change forwarded to the leader: ``{"op": "raft.conf", "change", "node"}``."""
CONF_CHANGES = ("add_learner", "promote", "remove")
NODE_STATUSES = ("up", "draining", "off", "down", "suspect")

_STR = (str,)
_OPT_STR = (str, type(None))
_INT = (int,)
_OPT_INT = (int, type(None))
_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_DICT = (dict,)
_LIST = (list, tuple)
_BOOL = (bool,)

# op -> field -> (accepted types, required). ``op``, ``ts`` (and ``term``, ``proposer``, ``v``) are implied for every op.
_SCHEMAS: Mapping[str, Mapping[str, tuple[tuple[type, ...], bool]]] = {
    "node.upsert": {"id": (_STR, True), "name": (_STR, True), "address": (_STR, True),
                    "cluster_port": (_INT, True), "api_port": (_OPT_INT, False),
                    "resources": (_DICT, False), "labels": (_DICT, False), "rejoin": (_BOOL, False),
                    "procs": (_LIST, False), "config": (_STR, False)},
    "node.health": {"id": (_STR, True), "status": (_STR, True), "usage": (_DICT, False), "procs": (_LIST, False),
                    "audit_head": (_DICT, False), "clock": (_DICT, False)},
    "node.remove": {"id": (_STR, True), "user": (_STR, False)},
    "job.submit": {"idem_key": (_STR, True), "project": (_STR, True), "spec": (_DICT, True),
                   "origin": (_STR, False), "user": (_STR, False), "number": (_INT, False)},
    "job.place": {"job": (_STR, True), "node": (_STR, True), "gpus": (_LIST, True), "parts": (_LIST, False)},
    "job.update": {"job": (_STR, True), "state": (_STR, False), "reason": (_STR, False),
                   "exit_code": (_OPT_INT, False), "output_version": (_OPT_STR, False),
                   "summary": (_DICT, False), "waiting_for": (_STR, False), "stop_requested": (_STR, False),
                   "attempt": (_INT, False), "node": (_STR, False), "rank": (_INT, False),
                   "endpoint": (_STR, False), "silent": (_LIST, False), "note": (_STR, False),
                   "user": (_STR, False)},
    "job.delete": {"job": (_STR, True), "user": (_STR, False)},
    "job.archive": {"jobs": (_LIST, True)},
    "project.reserve": {"project": (_STR, True), "number": (_INT, True)},
    "project.allocate": {"project": (_STR, True), "keys": (_LIST, True)},
    "job.import": {"idem_key": (_STR, True), "project": (_STR, True), "number": (_INT, True), "node": (_STR, True),
                   "spec": (_DICT, True), "state": (_STR, True), "reason": (_STR, False),
                   "exit_code": (_OPT_INT, False), "created": (_NUM, True), "started": (_OPT_NUM, False),
                   "ended": (_OPT_NUM, False), "output_version": (_OPT_STR, False), "summary": (_DICT, False),
                   "history": (_LIST, False), "imported": (_DICT, True), "user": (_STR, False)},
    "dataset.add_version": {"name": (_STR, True), "tree": (_STR, True), "size": (_INT, False),
                            "files": (_INT, False), "message": (_STR, False), "node": (_STR, False),
                            "idem_key": (_STR, False), "user": (_STR, False), "visibility": (_STR, False)},
    "dataset.delete": {"name": (_STR, True), "version": (_OPT_INT, False), "user": (_STR, False)},
    "dataset.holders": {"name": (_STR, True), "version": (_INT, True), "node": (_STR, True),
                        "holds": (_BOOL, True), "failed": (_STR, False)},
    "code.holders": {"tree": (_STR, True), "node": (_STR, True), "holds": (_BOOL, True)},   # issue 21
    "token.create": {"id": (_STR, True), "secret_sha256": (_STR, True), "expires": (_NUM, True),
                     "made_by": (_STR, False), "made_on": (_STR, False)},
    "token.use": {"id": (_STR, True), "secret_sha256": (_STR, True), "node": (_STR, True),
                  "serial": (_STR, True), "not_after": (_NUM, True)},
    "token.revoke": {"id": (_STR, True), "by": (_STR, False)},
    "node.cert": {"id": (_STR, True), "serial": (_STR, True), "not_after": (_NUM, True)},
    "admin.grant": {"user": (_STR, True)},
    "cluster.protocol": {"level": (_INT, True)},
    "person.add": {"name": (_STR, True), "role": (_STR, True), "uids": (_DICT, False), "user": (_STR, False)},
    "person.role": {"name": (_STR, True), "role": (_STR, True), "user": (_STR, False)},
    "person.remove": {"name": (_STR, True), "user": (_STR, False)},
    "person.map": {"name": (_STR, True), "node": (_STR, True), "uids": (_LIST, True), "user": (_STR, False)},
    "person.boxes": {"name": (_STR, True), "on": (_BOOL, True), "node": (_STR, False), "every_box": (_BOOL, False),
                     "user": (_STR, False)},
    "apitoken.create": {"id": (_STR, True), "person": (_STR, True), "secret_sha256": (_STR, True),
                        "expires": ((int, float, type(None)), False), "label": (_STR, False), "user": (_STR, False)},
    "apitoken.revoke": {"id": (_STR, True), "user": (_STR, False)},
    "audit.tamper": {"box": (_STR, True), "first_seq": (_INT, True), "what": (_STR, True)},
    "store.epoch": {"epoch": (_INT, True), "fingerprint": (_STR, True), "made_on": (_STR, True),
                    "reason": (_STR, False), "user": (_STR, False)},
}
# issue 20 (sign-in, level 3): new fields of older ops, and the signature a command made for a
# person carries when that person's personal token was presented to the proposing box
_SCHEMAS["person.add"].update({"boxes": (_LIST, False), "every_box": (_BOOL, False)})
_SCHEMAS["token.create"].update({"sign_in": (_LIST, False)})
_SCHEMAS["apitoken.create"].update({"public_key": (_STR, False)})
# issue 21 (level 3): the submitting box holds the job's whole code tree (floydd.cluster.state.code)
_SCHEMAS["job.submit"].update({"code_held": (_BOOL, False)})
PERSON_OPS = frozenset(op for op, fields in _SCHEMAS.items()
                       if {"user", "made_by", "by"} & set(fields) and op != "admin.grant")
"""Ops made for a person (floydd.cluster.state.signin): they may carry ``auth``."""
for _op in PERSON_OPS:
    _SCHEMAS[_op]["auth"] = (_DICT, False)
OPS = frozenset(_SCHEMAS)
FENCED_OPS = frozenset({"job.place"})
"""Leader actions that must carry the leader's term (the driver's ``fenced=True``)."""

MAX_ARCHIVE = 1000
"""The most jobs one ``job.archive`` moves (the leader archives in bounded batches)."""
_MAX_STR = 4096
_HEX64 = re.compile(r"[0-9a-f]{64}")
_MAX_ENTRY = 256 * 1024
"""A command is small, critical state; bulky data never goes through Raft."""


def check(command: object) -> dict[str, Any]:
    """Return ``command`` if it is a well-formed command, else raise :class:`InvalidSpec`."""
    if not isinstance(command, dict):
        raise InvalidSpec("a cluster command is a dict", hint="this is a bug in the caller")
    op = command.get("op")
    schema = _SCHEMAS.get(op) if isinstance(op, str) else None
    if schema is None:
        raise InvalidSpec(f"unknown cluster command {op!r}", hint=f"commands are: {', '.join(sorted(OPS))}")
    ts = command.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, _NUM):
        raise InvalidSpec(f"{op}: ts (the proposer's clock) must be a number")
    term = command.get("term")
    if (term is not None or op in FENCED_OPS) and (type(term) is not int or term < 0):
        raise InvalidSpec(f"{op}: term (the leader's fencing token) must be a non-negative int")
    if "proposer" in command and not isinstance(command["proposer"], str):
        raise InvalidSpec(f"{op}: proposer (the proposing node's id) must be a string")
    if "v" in command and (type(command["v"]) is not int or command["v"] < 1):
        raise InvalidSpec(f"{op}: v (the proposer's protocol) must be a positive int")
    extra = set(command) - set(schema) - {"op", "ts", "term", "proposer", "v"}
    if extra:
        raise InvalidSpec(f"{op}: unknown fields {', '.join(sorted(extra))}")
    for name, (types, required) in schema.items():
        if name not in command:
            if required:
                raise InvalidSpec(f"{op}: {name} is required")
            continue
        value = command[name]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise InvalidSpec(f"{op}: {name} must be {' or '.join(t.__name__ for t in types)}, "
                              f"not {type(value).__name__}")
        if isinstance(value, str) and len(value) > _MAX_STR:
            raise InvalidSpec(f"{op}: {name} is longer than {_MAX_STR} characters")
        if isinstance(value, str):
            _check_text(value, f"{op}: {name}")
    for name in schema:
        if name in command and isinstance(command[name], (dict, list, tuple)):
            _check_plain(command[name], f"{op}: {name}", 0)
    if op == "job.place":
        for part in [command] + list(command.get("parts") or ()):
            if not isinstance(part, dict) or not isinstance(part.get("node"), str) \
                    or not isinstance(part.get("gpus"), _LIST):
                raise InvalidSpec("job.place: each part is {node: id, gpus: [index, ...]}")
            if not all(type(g) is int and g >= 0 for g in part["gpus"]):
                raise InvalidSpec("job.place: gpus must be GPU indices (non-negative ints)")
    if op == "job.archive" and (len(command["jobs"]) > MAX_ARCHIVE
                                or not all(isinstance(k, str) for k in command["jobs"])):
        raise InvalidSpec(f"job.archive: jobs lists at most {MAX_ARCHIVE} job keys")
    if op == "dataset.add_version" and command.get("visibility", "lab") not in ("lab", "private"):
        raise InvalidSpec(f"dataset.add_version: {command['visibility']!r:.40} is not a visibility",
                          hint="a dataset is lab (the default) or private")
    if op == "dataset.holders" and "failed" in command and (command["holds"] or len(command["failed"]) > 300):
        raise InvalidSpec("dataset.holders: failed says why a box holds no copy (holds false, 300 characters at most)")
    if "auth" in command and (set(command["auth"]) != {"token", "sig"}
                              or not all(isinstance(v, str) and len(v) <= 256 for v in command["auth"].values())):
        raise InvalidSpec(f"{op}: auth is {{token: id, sig: hex}} (a personal token's signature)")
    if op == "node.health" and command["status"] not in NODE_STATUSES:
        raise InvalidSpec(f"node.health: status must be one of {', '.join(NODE_STATUSES)}")
    for proc in command.get("procs") or () if op in ("node.health", "node.upsert") else ():
        if not isinstance(proc, dict) or set(proc) != {"job", "attempt", "gpus"} or not isinstance(proc["job"], str) \
                or type(proc["attempt"]) is not int or not isinstance(proc["gpus"], _LIST) \
                or not all(type(g) is int and g >= 0 for g in proc["gpus"]):
            raise InvalidSpec(f"{op}: procs are {{job, attempt, gpus: [index, ...]}}")
    if op == "job.update" and not all(isinstance(n, str) for n in command.get("silent") or ()):
        raise InvalidSpec("job.update: silent lists node ids")
    head = command.get("audit_head") if op == "node.health" else None
    if head is not None and (set(head) != {"seq", "hash"} or type(head["seq"]) is not int or head["seq"] < 0
                             or not isinstance(head["hash"], str) or not _HEX64.fullmatch(head["hash"])):
        raise InvalidSpec("node.health: audit_head is {seq: n >= 0, hash: 64 hex digits}")
    clock = command.get("clock") if op == "node.health" else None
    if clock is not None and (set(clock) != {"offset", "rtt"} or not all(
            type(v) in (int, float) and abs(v) < 1e10 for v in clock.values()) or clock["rtt"] < 0):
        raise InvalidSpec("node.health: clock is {offset: seconds, rtt: seconds >= 0}")
    return command


def _check_plain(value: object, where: str, depth: int) -> None:
    """Only what msgpack and JSON both carry: str-keyed dicts, lists, scalars; 16 levels."""
    if depth > 16:
        raise InvalidSpec(f"{where} is nested too deeply")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidSpec(f"{where}: keys must be strings, not {type(key).__name__}")
            _check_plain(item, where, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_plain(item, where, depth + 1)
    elif isinstance(value, str):
        _check_text(value, where)
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        raise InvalidSpec(f"{where}: {type(value).__name__} values cannot be replicated")


def _check_text(value: str, where: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSpec(f"{where} is not valid UTF-8 text (a lone surrogate)", hint="send plain UTF-8 text") from None


def encode(command: Mapping[str, Any]) -> bytes:
    try:
        data = msgpack.packb(command, use_bin_type=True)
    except (ValueError, TypeError, OverflowError) as exc:   # e.g. a lone surrogate, an int past 64 bits
        raise InvalidSpec(f"{command.get('op')}: cannot be written to the replicated log: {exc}",
                          hint="send plain UTF-8 text and numbers that fit in 64 bits") from None
    if len(data) > _MAX_ENTRY:
        raise InvalidSpec(f"{command.get('op')}: {len(data)} bytes is too big for the replicated log",
                          hint="keep bulky data (logs, metric series, files) out of the control plane")
    return data


def decode(data: bytes) -> dict[str, Any]:
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise InvalidSpec(f"a log entry is not msgpack: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidSpec("a log entry is not a command")
    return value


def copy_of(value: Any) -> Any:
    """A deep copy of plain data (dicts, lists, scalars): callers never hold the state's own."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)
