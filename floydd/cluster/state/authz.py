"""Who may say what between boxes: the check every box makes on every replicated command.

Membership is the trust boundary (DESIGN 5b): a box that is a member may speak for itself
(its resources, its health, the parts of jobs placed on it) and for the people its API edge
authenticated, never for another box. :func:`authorize` is applied to each command *on apply*
(:meth:`ClusterState.apply <floydd.cluster.state.machine.ClusterState.apply>`), from the state and
the command alone, so every box reaches the same verdict; a refused command changes nothing
and its proposer gets the :class:`~floydd.errors.Forbidden` as its answer.

What it reads of a command::

    proposer   the box that proposed it: the node id of its verified certificate, stamped by
               the leader that appended the entry (never taken from the body), or the
               leader's own id. An entry without one was written by a leader of an older
               version, before proposers were stamped: it is allowed, as it was when first
               applied (a leader of this version always stamps).
    term       a leader action: the state refuses a term that is not its entry's, and
               forwarded commands with a term never reach the log, so only the leader of
               that term, on its own box, proposed it.
    user       the person the proposing box authenticated at its API edge (also ``made_by``,
               ``by``). From cluster level 3 a box may name only people signed in on it (a uid
               or their login name mapped there, or their personal token presented to it, which
               signs the command): :mod:`floydd.cluster.state.signin`, asked after the op's own rule.
               Below level 3 a box can claim any user; what it cannot do is act for a user on
               someone else's job.

    op                   who may say it
    node.upsert, .cert   the node itself (from level 3, not one whose recorded certificate is
                         revoked: a cancelled join or a removed box, until a new join)
    node.health          the node itself; the leader: suspect (it lost touch with the box);
                         audit_head, clock: the node itself only
    node.remove          an admin's command (floydd remove, with user); else the node itself
                         (floydd leave) or the leader
    job.submit           any member, as the job's origin box
    job.place, .archive  the leader
    job.update           the leader (requeue, unknown, lost ...); a box about its own run or
                         part (node = proposer and placed there); a user: stop a job they own
                         (any job: an admin)
    job.delete           the job's owner or an admin
    project.reserve      any member
    project.allocate     any member (numbers for the jobs it imports)
    job.import           a box, as the box that holds the imported job (node = proposer)
    dataset.add_version  any member, as the version's holder; to a private dataset (or
                         changing its visibility): its owner or an admin. From level 3, to
                         any existing dataset: its owner or an admin (a job's output, its
                         job's owner: floydd.cluster.state.access)
    dataset.delete       an admin, or the user who added every version deleted; from level
                         3, the dataset's owner or an admin (floydd.cluster.state.access)
    dataset.holders      a box about itself; the leader about any box
    code.holders         a box about itself; the leader about any box
    token.create/.revoke an admin (``made_by``/``by``; ``imported``: a box's old tokens.db
                         carried over on upgrade, below level 3 only), made on a voter
    token.use            any member (redeemed through a voter)
    apitoken.create      the person the token is for (``user`` = ``person``), or an admin
    apitoken.revoke      the token's person, or an admin
    admin.grant          the leader while the cluster has no admin (floydd init)
    cluster.protocol     any member, for a level every box speaks (floydd.cluster.state.versions)
    person.add/.role/.remove/.map/.boxes   an admin (floydd user ...); in a lab of one, its user
    audit.tamper         the box itself, about its own stored chain (box = proposer)
    store.epoch          an admin (floydd rotate-store-key, floydd remove), made on the proposer

Admins are the people with role ``admin`` (:mod:`floydd.cluster.state.people`; ``admin.grant``
records the user who ran ``floydd init``, the first). A cluster with no people (a lab of one:
a box used alone, whose socket only its own user reaches) lets every user act on everything,
as its admin. A dataset has an owner (who added its first version) and a visibility: a
``private`` one is mounted, cloned, added to and deleted by its owner and admins only
(:func:`may_read_dataset` is the API edge's check for mounts and clones).

Membership changes (raft conf changes) are not state-machine commands; the leader checks
them when it accepts one (:func:`authorize_conf`). The rule for each op, and who may act on
what someone owns (:func:`is_admin`, :func:`may_act_for`, :func:`check_job_owner`, offered
here too), are :mod:`floydd.cluster.state.authz_rules`; this module holds the checks.
"""

from __future__ import annotations

from typing import Any, Container

from floydd.cluster.state.signin import check_acting, check_conf_acting
from floydd.cluster.state import access
from floydd.cluster.state.authz_rules import RULES, _box, _who, check_job_owner, is_admin, may_act_for
from floydd.errors import Forbidden

__all__ = ["authorize", "authorize_conf", "joining_may_propose", "is_admin", "may_act_for", "check_job_owner",
           "may_read_dataset",
           "standing"]


def authorize(state: Any, cmd: dict, proposer: str | None) -> None:
    """Raise :class:`Forbidden` unless ``proposer`` (and the user it names) may say ``cmd``."""
    if proposer is None:
        return                      # written before proposers were stamped (see the docstring)
    rule = RULES.get(cmd["op"])
    if rule is None:
        raise Forbidden(f"no box may say {cmd['op']}: it has no authorisation rule",
                        code="no_rule", hint="this is a bug: every command needs a rule in floydd.cluster.state.authz")
    rule(state, cmd, proposer, "term" in cmd)
    check_acting(state, cmd, proposer)      # level 3: only for people signed in on the proposer


def authorize_conf(state: Any, cmd: dict, proposer: str, leader: str) -> None:
    """A membership change (``raft.conf``) the leader ``leader`` was asked for by ``proposer``.

    An operator's command names its ``user``, who must be an admin (on any box, the leader's
    too). Otherwise the leader's own changes go through (autopilot, its own leaving); a box may
    ask for its own learner seat (a join completes, a dropped learner comes back; it must be
    in the node table already) and may remove itself (a clean leave); nothing else."""
    change, node, user = cmd.get("change"), cmd.get("node"), cmd.get("user")
    if "user" in cmd:
        if is_admin(state, user):
            check_conf_acting(state, cmd, proposer)     # level 3: the admin is signed in on the proposer
            return
        raise Forbidden(f"{_who(user)} may not change the cluster's membership: not an admin",
                        code="not_an_admin", hint="an admin runs floydd remove NODE")
    if proposer == leader:
        return
    if node == proposer and change == "add_learner" and node in state.nodes and node not in state.removed:
        return
    if node == proposer and change == "remove":
        return
    raise Forbidden(f"{_box(state, proposer)} may not {change.replace('_', ' ') if change else 'change'} "
                    f"{'itself' if node == proposer else _box(state, node)}: membership changes come from the "
                    "leader's autopilot or an admin's command", code="membership_refused",
                    hint="an operator runs floydd remove NODE (an admin); a box asks only for its own seat")


def joining_may_propose(cmd: Any, peer: str) -> bool:
    """What a box whose join has not completed may propose: its own record (``node.upsert``,
    which makes it a member) and nothing else."""
    return isinstance(cmd, dict) and cmd.get("op") == "node.upsert" and cmd.get("id") == peer


def standing(state: Any, members: Container[str], node_id: str, serial: str | None) -> str | None:
    """What a verified node certificate may do here: ``"member"``, ``"joining"`` (its join has
    not completed: it may only announce itself), ``"unheard"`` or None (refused).

    ``"unheard"``: this state knows nothing of the node at all (no record of its certificate,
    not a member, never removed), which means this box is behind: a box that has just joined
    and holds only an old snapshot, or one that was off while the node joined (and perhaps
    became leader). It may announce itself, and send raft messages and snapshots, so that a
    leader this box has not heard of yet can bring it up to date; it may not read or propose
    anything else. A certificate whose join the state recorded but never completed is
    ``"joining"``, not ``"unheard"``: on an up-to-date box it cannot speak raft.

    Refused: a revoked serial (a removed node's), a serial that is not the one recorded for
    the node (an older certificate of a node that joined again), a removed node unless a join
    recorded a new certificate for it since. ``members``: the node ids in the raft
    configuration (voters and learners), members even before they announced themselves."""
    if serial is not None and serial in state.revoked:
        return None
    recorded = state.trust.cert_accepted(node_id, serial) if serial is not None else None
    if recorded is False:
        return None
    if node_id in state.removed:
        return "joining" if recorded else None
    if node_id in state.nodes or node_id in members:
        return "member"
    return "joining" if recorded else "unheard"


def may_read_dataset(state: Any, user: str | None, dataset: dict) -> bool:
    """Whether ``user`` may mount or clone ``dataset`` (a ``state.datasets`` entry, or one of
    its versions): the rule of :mod:`floydd.cluster.state.access` (a job's output: its job's owner's)."""
    name = dataset.get("name") or next((v["name"] for v in (dataset.get("versions") or {}).values()), "")
    target = access.dataset_target(state, name) if name in state.datasets else access.Target(
        kind="dataset", name=name, owner=dataset.get("owner"), private=dataset.get("visibility") == "private")
    return access.allowed(state, user, target, "mount")
