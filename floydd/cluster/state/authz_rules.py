"""The rule for each op: who may say it, the table of :mod:`floydd.cluster.state.authz`'s
docstring as code (``RULES``), and the words every refusal uses for boxes and people.

Each rule is ``rule(state, cmd, proposer, leader)`` and raises
:class:`~floydd.errors.Forbidden` or returns; :func:`floydd.cluster.state.authz.authorize`
looks up the command's op here and calls it on apply. :func:`is_admin`,
:func:`may_act_for` and :func:`check_job_owner` (who may act on what someone owns) are the
rules' vocabulary; the API edge asks them too, through :mod:`floydd.cluster.state.authz`.
"""

from __future__ import annotations

from typing import Any

from floydd.cluster.state import access
from floydd.cluster.state.versions import at_least, behind, cluster_level
from floydd.errors import Forbidden
from floydd.model import Job

__all__ = ["RULES", "is_admin", "may_act_for", "check_job_owner"]

_USER_STOP_FIELDS = frozenset({"op", "ts", "proposer", "v", "job", "stop_requested", "state", "reason", "user",
                               "auth"})
"""What a user's stop may carry (``state`` only ``stopped``, for a job still queued; ``auth``:
the signature of the user's personal token, :mod:`floydd.cluster.state.signin`)."""
_NOT_FROM_A_BOX = frozenset({"silent", "stop_requested", "user"})
"""job.update fields a box reporting on its own run may not set (the leader's, a user's)."""


def is_admin(state: Any, user: str | None) -> bool:
    """Whether ``user`` is an admin; everyone is in a cluster that has none (see
    :mod:`floydd.cluster.state.authz`)."""
    return not state.admins or (bool(user) and user in state.admins)


def may_act_for(state: Any, user: str | None, owner: str | None) -> bool:
    """Whether ``user`` may change something ``owner`` owns (a job): the owner, or an admin."""
    return is_admin(state, user) or (user or "") == (owner or "")


def check_job_owner(state: Any, user: str | None, key: str, owner: str | None, verb: str) -> None:
    """Refuse ``user`` who may not ``verb`` (stop, delete, restart) job ``key`` of ``owner``,
    naming whose it is: the words of every such refusal, on apply and at the API edge."""
    if not may_act_for(state, user, owner):
        raise Forbidden(f"{_who(user)} may not {verb} {key}, which is {owner or 'nobody'}'s", code="not_the_owner",
                        hint=f"only the job's owner or an admin {verb}s it")


# -- the rules, one per op ---------------------------------------------------------------------


def _itself(state, cmd, proposer, leader) -> None:
    if cmd["id"] != proposer:
        what = "certificate" if cmd["op"] == "node.cert" else "resources"
        raise Forbidden(f"{_box(state, proposer)} may not report {_box(state, cmd['id'])}'s {what}",
                        code="not_its_own", hint="a box speaks only for itself")
    if cmd["op"] == "node.upsert" and at_least(state, 3) and state.trust.join_cancelled(proposer, state.revoked):
        raise Forbidden(f"box {proposer} may not become a member: its join was cancelled (or it was removed) and "
                        "its certificate revoked", code="join_cancelled",
                        hint="an admin makes a new join token (floydd token create); join again with it")


def _node_health(state, cmd, proposer, leader) -> None:
    if cmd["status"] == "suspect":
        if not leader:
            raise Forbidden(f"{_box(state, proposer)} may not mark {_box(state, cmd['id'])} suspect: only the leader "
                            "judges who is out of touch", code="leader_only")
        return
    if cmd["id"] != proposer and not leader:
        raise Forbidden(f"{_box(state, proposer)} may not report {_box(state, cmd['id'])}'s health",
                        code="not_its_own", hint="a box speaks only for itself")
    if "audit_head" in cmd and cmd["id"] != proposer:
        raise Forbidden(f"{_box(state, proposer)} may not say {_box(state, cmd['id'])}'s audit chain head",
                        code="not_its_own", hint="a box says only its own chain's head")
    if "clock" in cmd and cmd["id"] != proposer:
        raise Forbidden(f"{_box(state, proposer)} may not say how {_box(state, cmd['id'])}'s clock stands",
                        code="not_its_own", hint="a box measures only its own clock")


def _node_remove(state, cmd, proposer, leader) -> None:
    if "user" in cmd:                                # an operator's floydd remove
        if is_admin(state, cmd["user"]):
            return
    elif cmd["id"] == proposer or leader:
        return
    raise Forbidden(f"{_box(state, proposer)} may not remove {_box(state, cmd['id'])}"
                    + (f" for {cmd['user']!r}, who is not an admin" if cmd.get("user") else ""),
                    code="membership_refused", hint="floydd remove NODE, run by an admin")


def _job_submit(state, cmd, proposer, leader) -> None:
    origin = cmd.get("origin")
    if origin is not None and origin != proposer:
        raise Forbidden(f"{_box(state, proposer)} may not submit a job as if from {_box(state, origin)}",
                        code="not_its_own", hint="a job's origin is the box that took it")


def _leader_only(state, cmd, proposer, leader) -> None:
    if not leader:
        raise Forbidden(f"{_box(state, proposer)} may not say {cmd['op']}: only the leader decides it",
                        code="leader_only")


def _job_update(state, cmd, proposer, leader) -> None:
    if leader:
        return
    key = cmd["job"]
    job = state.jobs.get(key)
    if "node" in cmd:                               # a box reporting on its run (or part)
        if cmd["node"] != proposer:
            raise Forbidden(f"{_box(state, proposer)} may not report on {_box(state, cmd['node'])}'s run of {key}",
                            code="not_its_own", hint="a box reports only the runs placed on it")
        extra = sorted(_NOT_FROM_A_BOX & set(cmd))
        if extra:
            raise Forbidden(f"{_box(state, proposer)} may not set {', '.join(extra)} of {key}",
                            code="not_its_own", hint="those are the leader's or a user's to say")
        if job is not None and "note" not in cmd and proposer not in _placed_on(job, cmd.get("rank")):
            raise Forbidden(f"{_box(state, proposer)} may not report on {key}: it is not placed there",
                            code="not_its_own")
        return
    if set(cmd) <= _USER_STOP_FIELDS and cmd.get("state", "stopped") == "stopped" \
            and ("stop_requested" in cmd or "state" in cmd):
        if job is not None:
            check_job_owner(state, cmd.get("user", ""), key, job.user, "stop")
        return
    raise Forbidden(f"{_box(state, proposer)} may not change {key} that way: a box reports its own runs "
                    "(with node), a user stops a job, the leader does the rest", code="leader_only")


def _job_import(state, cmd, proposer, leader) -> None:
    if cmd["node"] != proposer:
        raise Forbidden(f"{_box(state, proposer)} may not import a job as if held by {_box(state, cmd['node'])}",
                        code="not_its_own", hint="a box imports the jobs whose records it keeps")


def _job_delete(state, cmd, proposer, leader) -> None:
    key = cmd["job"]
    job = state.find_job(key)
    if job is not None:
        check_job_owner(state, cmd.get("user", ""), key, job.user, "delete")


def _dataset_add(state, cmd, proposer, leader) -> None:
    if "node" in cmd and cmd["node"] != proposer:
        raise Forbidden(f"{_box(state, proposer)} may not add a version held by {_box(state, cmd['node'])}",
                        code="not_its_own", hint="a box adds the versions it holds")
    if at_least(state, 3):          # a dataset's owner or an admin (a job's output: its job's owner)
        at = state.applying                        # the archive as of this entry: every box alike
        access.check(state, cmd.get("user", ""), access.dataset_target(state, cmd["name"], before=at), "add")
        return
    dataset = state.datasets.get(cmd["name"])
    if dataset is None or not dataset.get("versions") and "owner" not in dataset:
        return                                      # a new dataset: whoever adds it owns it
    user, owner = cmd.get("user", ""), dataset.get("owner")
    if dataset.get("visibility") == "private" and not may_act_for(state, user, owner):
        raise Forbidden(f"{_who(user)} may not add to {cmd['name']}: it is {owner or 'nobody'}'s private dataset",
                        code="private_dataset", hint="only its owner or an admin adds versions to it")
    if cmd.get("visibility", dataset.get("visibility", "lab")) != dataset.get("visibility", "lab") \
            and not may_act_for(state, user, owner):
        raise Forbidden(f"{_who(user)} may not make {cmd['name']} {cmd['visibility']}: it is {owner or 'nobody'}'s",
                        code="not_the_owner", hint="only a dataset's owner or an admin changes its visibility")


def _dataset_delete(state, cmd, proposer, leader) -> None:
    user = cmd.get("user", "")
    if at_least(state, 3):          # the dataset's owner or an admin (a job's output: its job's owner)
        at = state.applying                        # the archive as of this entry: every box alike
        access.check(state, user, access.dataset_target(state, cmd["name"], before=at), "delete")
        return
    if is_admin(state, user):
        return
    versions = state.datasets.get(cmd["name"], {}).get("versions", {})
    number = cmd.get("version")
    doomed = list(versions.values()) if number is None else [versions[str(number)]] if str(number) in versions else []
    others = sorted({v.get("user") or "nobody" for v in doomed if not user or v.get("user") != user})
    if others:
        raise Forbidden(f"{_who(user)} may not delete {cmd['name']}: it holds versions of {', '.join(others)}",
                        code="not_the_owner", hint="only the user who added a version or an admin deletes it")


def _dataset_holders(state, cmd, proposer, leader) -> None:
    if cmd["node"] != proposer and not leader:
        raise Forbidden(f"{_box(state, proposer)} may not say what {_box(state, cmd['node'])} holds",
                        code="not_its_own", hint="a box reports its own copies")


def _any_member(state, cmd, proposer, leader) -> None:
    return None


def _join_token(state, cmd, proposer, leader) -> None:
    """A join token lets a box in: only an admin makes or revokes one."""
    who = cmd.get("made_by") if cmd["op"] == "token.create" else cmd.get("by")
    if not at_least(state, 2) or who == "imported" and cmd["op"] == "token.create" and not at_least(state, 3):
        return                                      # an 0.1 box lets any member: so do all, until level 2
    if not is_admin(state, who):
        verb = "make" if cmd["op"] == "token.create" else "revoke"
        raise Forbidden(f"{_who(who)} may not {verb} join tokens: not an admin", code="not_an_admin",
                        hint="an admin runs floydd token create (floydd user list shows the admins)")


def _cluster_level(state, cmd, proposer, leader) -> None:
    """Any member may ask; the level is raised only when every box speaks it (the state says)."""
    if cmd["level"] > cluster_level(state):
        raise Forbidden(f"cluster level {cmd['level']} is not spoken by every box: {', '.join(behind(state, cmd['level']))}",
                        code="cluster_too_old", hint="upgrade those boxes first")


def _admin_grant(state, cmd, proposer, leader) -> None:
    if leader and not state.admins:
        return
    raise Forbidden(f"{_box(state, proposer)} may not make {cmd['user']!r} an admin",
                    code="not_an_admin", hint="the first admin is whoever ran floydd init")


def _apitoken_create(state, cmd, proposer, leader) -> None:
    if not may_act_for(state, cmd.get("user"), cmd["person"]):
        raise Forbidden(f"{_who(cmd.get('user'))} may not make an API token for {cmd['person']}",
                        code="not_your_token", hint="make your own token (floyd token create), or ask an admin")


def _apitoken_revoke(state, cmd, proposer, leader) -> None:
    owner = state.apitokens.owner(cmd["id"])
    if owner is not None and not may_act_for(state, cmd.get("user"), owner):
        raise Forbidden(f"{_who(cmd.get('user'))} may not revoke {owner}'s API token {cmd['id']}",
                        code="not_your_token", hint="revoke your own tokens (floyd token list), or ask an admin")


def _audit_tamper(state, cmd, proposer, leader) -> None:
    if cmd["box"] != proposer:
        raise Forbidden(f"{_box(state, proposer)} may not report {_box(state, cmd['box'])}'s audit chain as edited",
                        code="not_its_own", hint="a box reports only its own stored copy")


def _store_epoch(state, cmd, proposer, leader) -> None:
    """A new store key epoch: an admin's, made on the box that holds its secret."""
    if cmd["made_on"] != proposer:
        raise Forbidden(f"{_box(state, proposer)} may not start a key epoch made on {_box(state, cmd['made_on'])}",
                        code="not_its_own", hint="the box that made the epoch's secret records it")
    if not is_admin(state, cmd.get("user")):
        raise Forbidden(f"{_who(cmd.get('user'))} may not rotate the store key: not an admin", code="not_an_admin",
                        hint="an admin runs floydd rotate-store-key")


def _people_admin(state, cmd, proposer, leader) -> None:
    user = cmd.get("user")
    if not is_admin(state, user):
        verb = {"person.add": "add", "person.role": "change the role of", "person.remove": "remove",
                "person.map": "map uids to", "person.boxes": "sign in or out"}[cmd["op"]]
        raise Forbidden(f"{_who(user)} may not {verb} {cmd['name']}: not an admin", code="not_an_admin",
                        hint="an admin runs floydd user ... (floydd user list shows the admins)")


RULES = {
    "node.upsert": _itself, "node.cert": _itself, "node.health": _node_health, "node.remove": _node_remove,
    "job.submit": _job_submit, "job.place": _leader_only, "job.archive": _leader_only, "job.update": _job_update,
    "job.delete": _job_delete, "project.reserve": _any_member, "dataset.add_version": _dataset_add,
    "project.allocate": _any_member, "job.import": _job_import,
    "dataset.delete": _dataset_delete, "dataset.holders": _dataset_holders, "code.holders": _dataset_holders,
    "token.create": _join_token, "token.use": _any_member, "token.revoke": _join_token,
    "admin.grant": _admin_grant, "cluster.protocol": _cluster_level,
    "person.add": _people_admin, "person.role": _people_admin,
    "person.remove": _people_admin, "person.map": _people_admin, "person.boxes": _people_admin,
    "apitoken.create": _apitoken_create, "apitoken.revoke": _apitoken_revoke,
    "audit.tamper": _audit_tamper,
    "store.epoch": _store_epoch,
}


def _placed_on(job: Job, rank: int | None) -> set[str]:
    parts = job.parts
    if rank is not None and 0 <= rank < len(parts):
        return {parts[rank].node}
    return {job.node} | {p.node for p in parts}


def _box(state: Any, node_id: str) -> str:
    node = state.nodes.get(node_id)
    return node["name"] if node and node.get("name") else f"box {node_id}"


def _who(user: str | None) -> str:
    return f"user {user}" if user else "an unnamed user"
