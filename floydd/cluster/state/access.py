"""Who may do what to which object: the one table every road to an object asks (DESIGN 5c).

An object is reached by many roads: a dataset version by its name, ``NAME:N``, as
``PROJECT/N/output``, in a job's ``--data`` mounts, in an export; a job's code by ``floyd
clone``, ``code.tar``, an export; a job's output by ``floyd output``, ``output.tar``, ``floyd
data clone P/N/output``, a mount, an export. Each road turns what it reached into a
:class:`Target` (:func:`dataset_target`, :func:`job_target`) and asks :func:`check` (or
:func:`allowed`) with the verb it is about to do; nothing else decides. Pure: the replicated
state and the box's read rules are passed in, no I/O, no clock.

The table (:data:`RULES`), for a person who is neither the owner nor an admin (the owner and
admins may always; in a lab with no admins, a lab of one, everyone is its admin)::

    object    verb                     who else may
    dataset   read, mount, clone       everyone if its visibility is lab; nobody if private
    dataset   add (a version), delete  nobody (a new dataset: whoever creates it owns it)
    output    read, mount, clone       everyone if the box's job_outputs is lab (default owner)
    output    add, delete              nobody: the owner is the job's owner
    code      read, clone              everyone if the box's job_code is lab (default owner)
    logs      read                     everyone if the box's job_logs is lab (the default)
    metrics   read                     as logs

``read`` is listing the files (``floyd data info``); ``clone`` is any copy that leaves the
store (``floyd data clone``, a tar, ``floyd output``, an export); ``mount`` is a job's
``--data``. A job's output (its final version and its checkpoints, the versions of
``PROJECT/N/output``) is the job's owner's whoever published it. Store maintenance (gc,
verify, repair) is an admin's: :func:`check_admin`.

Two kinds of rule, checked in two places. ``add`` and ``delete`` change the replicated
catalog: every box checks them on apply (:mod:`floydd.cluster.state.authz`, from cluster level 3),
from the state alone, and the box a person asks checks them first so that a refusal costs no
upload. The read verbs change nothing: the box serving the read checks them with its own
:class:`ReadRules` (its ``floydd.toml``), and only that box's config counts for that read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from floydd.errors import Forbidden, UserError

__all__ = ["OBJECTS", "VERBS", "SCOPES", "RULES", "ReadRules", "Target", "dataset_target", "job_target",
           "output_job", "output_owner", "allowed", "check", "check_admin", "is_admin"]

OBJECTS = ("dataset", "output", "code", "logs", "metrics")
VERBS = ("read", "mount", "clone", "add", "delete")
SCOPES = ("owner", "lab")
"""What a read rule of :class:`ReadRules` may say: its owner (and admins) only, or everyone."""

RULES: Mapping[tuple[str, str], str] = {
    ("dataset", "read"): "visibility", ("dataset", "mount"): "visibility", ("dataset", "clone"): "visibility",
    ("dataset", "add"): "owner", ("dataset", "delete"): "owner",
    ("output", "read"): "job_outputs", ("output", "mount"): "job_outputs", ("output", "clone"): "job_outputs",
    ("output", "add"): "owner", ("output", "delete"): "owner",
    ("code", "read"): "job_code", ("code", "clone"): "job_code",
    ("logs", "read"): "job_logs",
    ("metrics", "read"): "job_logs",
}
"""(object, verb) -> who besides the owner and admins: ``visibility`` (the dataset's own:
``lab`` everyone, ``private`` nobody), ``owner`` (nobody; an object with no owner yet, a new
dataset, anyone), or the name of a :class:`ReadRules` field (its value ``lab``: everyone)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadRules:
    """Who besides the owner and admins reads what a job made, as one box serves it (the box's
    ``job_outputs``, ``job_code`` and ``job_logs`` config: :class:`floydd.config.Config`)."""

    job_outputs: str = "owner"
    job_code: str = "owner"
    job_logs: str = "lab"

    def __post_init__(self) -> None:
        for name in ("job_outputs", "job_code", "job_logs"):
            value = getattr(self, name)
            if value not in SCOPES:
                raise UserError(f"config {name} = {value!r:.40} is not owner or lab",
                                hint=f"set {name} to \"owner\" (its owner and the admins) or \"lab\" (everyone) in "
                                     f"floydd.toml or FLOYDD_{name.upper()}")

    @classmethod
    def of(cls, config: Any) -> ReadRules:
        """The rules a daemon's config sets."""
        return cls(job_outputs=config.job_outputs, job_code=config.job_code, job_logs=config.job_logs)


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One object as a road reached it: what it is, what to call it in a refusal, whose it is."""

    kind: str
    """One of :data:`OBJECTS`."""
    name: str
    """As said to people: ``faces:1``, ``mnist``, ``ap/1/output:2``, ``ap/1``."""
    owner: str | None
    """Its owner's name; None: it has none yet (a new dataset) and ``owner`` verbs are anyone's."""
    private: bool = False
    """A dataset's visibility is ``private`` (datasets only)."""
    job: str = ""
    """The job it belongs to (outputs, code, logs, metrics)."""


def output_job(name: str) -> str | None:
    """``ap/1`` for ``ap/1/output`` (a job's output dataset); None for any other name."""
    if not isinstance(name, str) or not name.endswith("/output"):
        return None
    job = name.removesuffix("/output")
    project, sep, number = job.partition("/")
    return job if sep and project and number.isdigit() else None


def output_owner(state: Any, name: str, before: int | None = None) -> str | None:
    """The owner of job output ``name`` from the replicated state: its job's owner; None when
    ``name`` is no job's output or the state does not know the job (a box's history before it
    joined, an import before ``job.import`` committed). ``before``: on apply, the log index of
    the entry being applied, so that the archive is read as of that entry on every box
    (:func:`floydd.cluster.state.archive.visible`); None: as it is now (a read)."""
    job = output_job(name)
    if job is None:
        return None
    found = state.find_job(job, before)
    return None if found is None else found.user


def dataset_target(state: Any, name: str, ref: str | None = None, *, before: int | None = None) -> Target:
    """Dataset ``name`` (as its version ``ref``, when one was named) in the replicated catalog:
    a job's output (``PROJECT/N/output``) is an ``output`` owned by its job's owner; any other
    a ``dataset`` owned by whoever added its first version, with its visibility. A name the
    catalog does not hold is a new dataset: no owner. ``before``: as :func:`output_owner`."""
    dataset = state.datasets.get(name) or {}
    versions = dataset.get("versions") or {}
    owner = dataset.get("owner")
    if owner is None and versions:                  # made before owners (level 1): its first version's
        owner = versions[min(versions, key=int)].get("user") or ""
    job = output_job(name)
    if job is not None:
        job_owner = output_owner(state, name, before)
        return Target(kind="output", name=ref or name, owner=job_owner if job_owner is not None else owner, job=job)
    return Target(kind="dataset", name=ref or name, owner=owner, private=dataset.get("visibility") == "private")


def job_target(job: Any, kind: str) -> Target:
    """The ``code``, ``output``, ``logs`` or ``metrics`` of ``job`` (a :class:`~floydd.model.JobView`
    or a replicated :class:`~floydd.model.Job`: its ``id``, ``output_version`` and ``user``)."""
    if kind not in ("code", "output", "logs", "metrics"):
        raise ValueError(f"{kind!r} is not a part of a job")
    key = str(job.id)
    name = (job.output_version or f"{key}/output") if kind == "output" else key   # as the data road names it
    return Target(kind=kind, name=name, owner=job.user or "", job=key)


def is_admin(state: Any, person: str | None) -> bool:
    """An admin; everyone in a lab with none (a lab of one)."""
    return not state.admins or (bool(person) and person in state.admins)


def allowed(state: Any, person: str | None, target: Target, verb: str, rules: ReadRules = ReadRules()) -> bool:
    """Whether ``person`` (None: a caller with no account) may ``verb`` ``target`` (the table
    of the module docstring)."""
    rule = _rule(target.kind, verb)
    if is_admin(state, person) or _owns(person, target):
        return True
    if rule == "visibility":
        return not target.private
    if rule == "owner":
        return target.owner is None
    return getattr(rules, rule) == "lab"


def check(state: Any, person: str | None, target: Target, verb: str, rules: ReadRules = ReadRules(), *,
          doing: str | None = None) -> None:
    """Raise :class:`Forbidden`, one line naming whose it is, unless :func:`allowed`; ``doing``
    names the verb in the refusal when the road's own word says it better (``export``)."""
    if allowed(state, person, target, verb, rules):
        return
    who = f"user {person}" if person else "a caller with no account"
    owner = target.owner or "nobody"
    words = doing or ("read" if verb == "read" and target.kind in ("code", "logs", "metrics") else _WORDS[verb])
    rule = RULES[(target.kind, verb)]
    if target.kind == "dataset" and rule == "visibility":
        raise Forbidden(f"{who} may not {words} {target.name}: it is {owner}'s private dataset", code="private_dataset",
                        hint="only its owner and the lab's admins use a private dataset (floyd data ls lists "
                             "those you may use)")
    if target.kind == "dataset":
        kind = "private dataset" if target.private else "dataset"
        raise Forbidden(f"{who} may not {words} {target.name}: it is {owner}'s {kind}",
                        code="private_dataset" if target.private else "not_the_owner",
                        hint="only a dataset's owner or an admin adds versions to it or deletes it; upload under "
                             "a name of your own")
    if target.kind == "output":
        raise Forbidden(f"{who} may not {words} {target.name}: it is the output of {owner}'s job {target.job}",
                        code="not_the_owner", hint=_hint("output", rule))
    what = {"code": "the code", "logs": "the logs", "metrics": "the metrics"}[target.kind]
    raise Forbidden(f"{who} may not {words} {what} of {target.name}, which is {owner}'s", code="not_the_owner",
                    hint=_hint(target.kind, rule))


def check_admin(state: Any, person: str | None, doing: str) -> None:
    """Store maintenance (gc, verify, repair) and other box-wide work: admins only."""
    if not is_admin(state, person):
        who = f"user {person}" if person else "a caller with no account"
        raise Forbidden(f"{who} may not {doing}: it is an admin's", code="not_an_admin",
                        hint="ask an admin of the lab (floydd user list shows them)")


# -- helpers ---------------------------------------------------------------------------------------

_WORDS = {"read": "list the files of", "mount": "mount", "clone": "clone", "add": "add a version to",
          "delete": "delete"}


def _rule(kind: str, verb: str) -> str:
    try:
        return RULES[(kind, verb)]
    except KeyError:
        raise ValueError(f"no rule for {verb} on a {kind}: this is a bug in the caller") from None


def _owns(person: str | None, target: Target) -> bool:
    """A named person owning ``target`` (a caller with no account owns nothing, even an object
    whose owner is unnamed)."""
    return person is not None and target.owner is not None and person == target.owner


def _hint(kind: str, rule: str) -> str:
    whose = {"output": "a job's output", "code": "a job's code", "logs": "a job's logs",
             "metrics": "a job's metrics"}[kind]
    if rule == "owner":
        return f"only the job's owner or an admin changes {whose}"
    return (f"{whose} is its owner's and the admins' on this box (its floydd.toml may say {rule} = \"lab\"); "
            "ask the job's owner or an admin")
