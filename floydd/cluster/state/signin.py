"""A box acts only for the people who use it (NodeRestriction for people, DESIGN 5c).

Kubernetes' NodeRestriction lets a kubelet change only its own node and the pods bound to
it. Here, from cluster level 3 (:func:`floydd.cluster.state.versions.at_least`), a box may propose
a command in a person's name (its ``user``, ``made_by`` or ``by``: :data:`PERSON_FIELDS`)
only if that person is *signed in* on it:

- an account: a uid mapped to them on that box, or their login name listed for that box
  (:func:`floydd.cluster.state.people.signed_in`; ``floydd user add`` lists the box it ran through,
  ``floydd init`` signs its admin in on the init box, a join token its maker on the new box);
- or a personal token of theirs presented to that box: the box signs the command with the
  key the token's secret derives (:mod:`floydd.security.token_keys`; it rides as ``auth =
  {token, sig}``), and every box checks the signature against the public key the cluster
  recorded with the token, over the command *and the stamped proposer*, so a signature made
  for one box cannot be replayed through another. The token must be the person's and valid
  at the command's ``ts`` (not revoked, not expired); a token made before level 3 has no
  key and backs nothing here (the refusal says to make a new one).

:func:`check_acting` is asked by :func:`floydd.cluster.state.authz.authorize` on apply, by every
box alike (pure: the state, the command, its stamped proposer), and by the proposing box
itself before it proposes (:func:`floydd.cluster.net.presented.signed`), so the person gets the
same words at once. A box's own work goes on: a box running a job may add (and drop the
superseded checkpoints of) that job's output versions in the job owner's name
(:func:`own_work`); reports carry no person. A lab of one (no people) is unrestricted.

What else changes with sign-in on apply lives here too, since it spans families:
:func:`raise_level` (level 3 switching on lists every member box for everyone, revokes the
tokens of people removed before, and has pending join tokens sign in their makers),
:func:`remove_person` (their personal tokens are revoked with them) and the join token
handlers (:func:`token_create`, :func:`token_use`, :func:`token_revoke`).
"""

from __future__ import annotations

from typing import Any

from floydd.cluster.state import people, versions
from floydd.cluster.state.apitokens import api_token_state
from floydd.errors import Forbidden
from floydd.security.token_keys import verify_command

__all__ = ["PERSON_FIELDS", "acting_names", "check_acting", "check_conf_acting", "why_not", "own_work", "here",
           "raise_level", "remove_person", "token_create", "token_use", "token_revoke", "LEVEL"]

LEVEL = 3
"""The cluster level from which boxes act only for people signed in on them."""
PERSON_FIELDS = ("user", "made_by", "by")
"""The fields of a command that name the person it is made for."""
_NOT_ACTING = frozenset({"admin.grant"})
"""Ops whose ``user`` is not someone acted for: ``admin.grant`` names the first admin (the
leader, while the cluster has none: :mod:`floydd.cluster.state.authz`)."""


def acting_names(cmd: dict) -> list[str]:
    """The people ``cmd`` is made for (its non-empty person fields)."""
    if cmd.get("op") in _NOT_ACTING:
        return []
    return sorted({cmd[f] for f in PERSON_FIELDS if isinstance(cmd.get(f), str) and cmd[f]})


def check_acting(state: Any, cmd: dict, proposer: str, *, accounts_only: bool = False) -> None:
    """Forbidden unless ``proposer`` may act for everyone ``cmd`` is made for (module docstring).
    Only from cluster level 3, and only in a lab with people. ``accounts_only``: the proposing
    box's early check, which leaves a name without an account to the op's own rule on apply
    (it says better what that name may not do; this box's copy may also be behind)."""
    if not versions.at_least(state, LEVEL) or not state.people:
        return
    for name in acting_names(cmd):
        if accounts_only and name not in state.people:
            continue
        why = why_not(state, cmd, proposer, name)
        if why is not None:
            raise _refusal(state, proposer, name, why, cmd)


def check_conf_acting(state: Any, cmd: dict, proposer: str, *, accounts_only: bool = False) -> None:
    """An operator's membership change (``raft.conf`` with ``user``), checked by the leader."""
    check_acting(state, cmd, proposer, accounts_only=accounts_only)


def why_not(state: Any, cmd: dict, proposer: str, name: str) -> str | None:
    """Why ``proposer`` may not act for ``name`` in ``cmd`` (None: it may)."""
    if people.signed_in(state.people, proposer, name) or own_work(state, cmd, proposer, name):
        return None
    if name not in state.people:
        return f"{name} has no account in this lab"
    auth = cmd.get("auth")
    if not isinstance(auth, dict) or not isinstance(auth.get("token"), str):
        return f"{name} is not signed in on {_box(state, proposer)}"
    token_id = auth["token"]
    record = state.apitokens.tokens.get(token_id)
    if record is None or record.get("person") != name:
        return f"the personal token it names ({token_id[:16]}) is not {name}'s"
    if not record.get("public_key"):
        return (f"{name} is not signed in on {_box(state, proposer)}, and {name}'s personal token {token_id} was made "
                "before floydd 0.3: it cannot back a change there")
    token_state = api_token_state(record, cmd.get("ts", 0.0))
    if token_state != "valid":
        return f"{name}'s personal token {token_id} was {token_state}"
    if not verify_command(record["public_key"], cmd, proposer, str(auth.get("sig", ""))):
        return f"the signature of {name}'s personal token {token_id} does not match this command from this box"
    return None


def own_work(state: Any, cmd: dict, proposer: str, name: str) -> bool:
    """A box's own work for a job's owner ``name``: a version of the output of a job placed on
    it (its checkpoints and its final output), or dropping a superseded checkpoint version."""
    op, dataset = cmd.get("op"), cmd.get("name")
    if op not in ("dataset.add_version", "dataset.delete") or not isinstance(dataset, str) \
            or not dataset.endswith("/output"):
        return False
    if op == "dataset.delete" and cmd.get("version") is None:
        return False                                # the whole output: a person's command
    if op == "dataset.add_version" and cmd.get("node", proposer) != proposer:
        return False
    job = state.jobs.get(dataset[:-len("/output")])
    if job is None or job.user != name:
        return False
    return proposer in {job.node} | {p.node for p in job.parts}


def here(state: Any, cmd: dict) -> str | None:
    """The proposing box, for the people handlers, from level 3 (None below: records list no
    boxes then); ``""`` for an entry without a stamped proposer."""
    return (cmd.get("proposer") or "") if versions.at_least(state, LEVEL) else None


# -- what changes with sign-in on apply (ClusterState's handlers call these) ------------------------


def raise_level(state: Any, cmd: dict) -> int:
    """``cluster.protocol``; when it switches level 3 on: every person's login name acts as
    them on the boxes that are members now (nobody loses access on the upgrade), tokens of
    people removed before are revoked (re-adding them must not revive those), and join
    tokens still pending sign in their maker on the box they admit."""
    before = state.protocol
    level = versions.apply_level(state, cmd)
    if before < LEVEL <= level:
        people.list_members(state.people, sorted(n for n in state.nodes if n not in state.removed))
        if state.people:
            state.apitokens.revoke_orphans(state.people, cmd["ts"])
        for token in state.trust.tokens.values():
            if "sign_in" not in token and token["used"] is None and token["revoked"] is None:
                token["sign_in"] = [token["made_by"]] if token.get("made_by") in state.people else []
    return level


def remove_person(state: Any, cmd: dict) -> None:
    """``person.remove``; from level 3 their personal tokens are revoked with them."""
    people.remove(state.people, cmd)
    if versions.at_least(state, LEVEL):
        state.apitokens.revoke_person(cmd["name"], cmd["ts"], cmd.get("user") or "")


def token_create(state: Any, cmd: dict) -> dict:
    """``token.create``; from level 3 the token records whom it signs in (:mod:`floydd.cluster.state.credentials`)."""
    return state.trust.token_create(cmd, people=state.people if versions.at_least(state, LEVEL) else None)


def token_use(state: Any, cmd: dict) -> dict:
    """``token.use``; from level 3 the people the token names are signed in on the new box."""
    return state.trust.token_use(cmd, members=state.nodes, removed=state.removed,
                                 people=state.people if versions.at_least(state, LEVEL) else None)


def token_revoke(state: Any, cmd: dict) -> dict:
    """``token.revoke``; from level 3 revoking a used token cancels the join it made."""
    if not versions.at_least(state, LEVEL):
        return state.trust.token_revoke(cmd)
    return state.trust.token_revoke(cmd, members=state.nodes, removed=state.removed, revoked=state.revoked)


# -- helpers ------------------------------------------------------------------------------------------


def _refusal(state: Any, proposer: str, name: str, why: str, cmd: dict) -> Forbidden:
    box = _box(state, proposer)
    if "before floydd 0.3" in why:
        hint = "make a new personal token (floyd token create), floyd login with it, and try again"
    elif name not in state.people:
        hint = f"an admin gives them an account: floydd user add {name} --box {box}"
    else:
        hint = (f"a box acts only for people signed in on it: an admin runs floydd user map {name} {box}, "
                f"or {name} uses a personal token through {box} (floyd login)")
    return Forbidden(f"{box} may not act for {name} ({cmd.get('op')}): {why}", code="not_signed_in", hint=hint)


def _box(state: Any, node_id: str) -> str:
    node = state.nodes.get(node_id)
    return node["name"] if node and node.get("name") else f"box {node_id}"
