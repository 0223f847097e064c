"""``floyd import``, second step: make what was staged visible, as idempotent steps.

Everything was verified before the first of these (:mod:`.stage`); what can still be refused is
checked first, before anything is committed (a new version of someone else's dataset under
a name the file brings: :mod:`floydd.cluster.state.access`; a malformed job document). Then, in order::

    dataset versions   each as the next version of its name here, held by this box (then
                       replicated as any upload); key: the origin, the version there
    job numbers        per project, one raft entry (project.allocate): a number per job, the
                       same number for a job whose key was seen before
    per job            its output as PROJECT/N/output; its record here (spec with this site's
                       trees and data versions, events, metric series, samples as they were,
                       one SQLite transaction) and its log; its code pinned; then job.import
                       makes it visible, finished, with a note of its origin
                       (:mod:`floydd.cluster.state.imported`); key: the origin and its id there

Every step is keyed by the origin's fingerprint and the original ids, so an import cut short
here (a daemon stopped, a leader lost) is finished by importing the same file again, and a
re-import of a file already imported adds nothing: it answers what the first one made. A job
is visible only once job.import committed, after its record and log are in place. The import
never runs anything: an imported job is ended when it arrives and is never placed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import msgpack

from floydd.cluster.state import access
from floydd.errors import FloyddError, Forbidden, InvalidSpec
from floydd.exchange.stage import Staged, StagedJob
from floydd.jobs.local import code_pin
from floydd.model import FINAL_STATES, DatasetRef, JobKey, JobSpec, check_project
from floydd.store.catalog import check_name
from floydd.store.ids import ObjectId

__all__ = ["commit", "MAX_SUMMARY_METRICS"]

MAX_SUMMARY_METRICS = 64
"""Metrics in a job's replicated summary (as the reconciler reports for a run)."""


async def commit(staged: Staged, *, jobs: Any, person: str) -> dict:
    """Commit ``staged`` for ``person`` through this node's :class:`~floydd.jobs.service.JobService`;
    what the import made (see the module docstring)."""
    cluster = jobs.cluster
    state, origin = cluster.state, staged.origin
    run = _Run(jobs, staged, person, prefix=f"import:{origin.fingerprint}:",
               note=f"imported from {origin.name or origin.kind} (sha256:{origin.short})")
    _check(staged, state, person)
    outputs = {(d["ref"], d["tree"]): d for d in staged.datasets if _is_output(d["name"])}
    for doc in staged.datasets:
        if not _is_output(doc["name"]):         # a job's output a job mounted: as it is reached, below
            await run.dataset(doc, doc["name"])
    made_jobs, pending = [], []
    for job in staged.jobs:
        key = f"{run.prefix}{job.doc['id']}"
        existing = _already(state, key)
        if existing is None:
            pending.append((key, job))
            continue
        made_jobs.append({"origin_job": job.doc["id"], "job": existing, "new": False})
        output = (job.doc.get("output") or {})
        version = _version_of(state, state.job(existing).output_version)
        if output and version is not None:
            run.versions[(output["ref"], output["tree"])] = version
    numbers: dict[str, int] = {}
    for project in dict.fromkeys(job.doc["project"] for _, job in pending):
        numbers.update(await cluster.allocate_numbers(project, [k for k, j in pending if j.doc["project"] == project]))
    # in the order they ran: a job that mounted another's output was submitted after that one ended
    for key, job in sorted(pending, key=lambda item: (float(item[1].doc["created"]), item[1].doc["id"])):
        for mount in job.doc["spec"]["data"]:
            found = (mount["ref"], mount["tree"])
            if found not in run.versions:       # the output of a job the file does not hold (or not yet)
                doc = outputs[found]
                await run.dataset(doc, _plain(doc["name"]))
        made = await _import_job(run, job, key, numbers[key])
        made_jobs.append({"origin_job": job.doc["id"], "job": made["id"], "new": True})
    for holder in staged.leases:                # the versions and job pins keep the trees now
        await asyncio.to_thread(jobs.store.catalog.unpin, holder)
    return {"origin": {**origin.to_dict(), "description": origin.describe()},
            "exported_by": staged.manifest.get("exported_by", ""), "created": staged.manifest.get("created"),
            "jobs": made_jobs, "datasets": run.made, "bytes": staged.bytes_read}


class _Run:
    """One commit: what it made so far."""

    def __init__(self, jobs: Any, staged: Staged, person: str, *, prefix: str, note: str) -> None:
        self.jobs, self.staged, self.person, self.prefix, self.note = jobs, staged, person, prefix, note
        self.versions: dict[tuple[str, str], dict] = {}     # (source ref, source tree) -> the version here
        self.made: list[dict] = []

    async def dataset(self, doc: dict, name: str) -> dict:
        """The version here of dataset version ``doc`` of the file, as a version of ``name``."""
        tree = self.staged.trees[doc["tree"]]
        idem_key = f"{self.prefix}dataset:{doc['ref']}:{doc['tree']}"
        version = _same(self.jobs.cluster.state, name, str(tree.tree), idem_key)
        new = version is None
        if new:
            message = f"{doc.get('message') or ''} ({self.note}: {doc['ref']})".strip()
            version = await self.jobs.datasets.register(name, str(tree.tree), size=tree.size, files=tree.files,
                                                        message=message[:1000], idem_key=idem_key, user=self.person)
        self.versions[(doc["ref"], doc["tree"])] = version
        self.made.append({"origin_ref": doc["ref"], "ref": version["ref"], "alone": bool(doc.get("alone")),
                          "new": new})
        return version


def _is_output(name: str) -> bool:
    return name.endswith("/output")


def _plain(name: str) -> str:
    """A dataset name for the output of a job of the origin that is not imported with it
    (``mnist/2/output`` -> ``mnist-2-output``): never a name of this site's own jobs' outputs."""
    project, number, _ = name.split("/")
    return f"{project[:64 - len(number) - 8]}-{number}-output"


def _version_of(state: Any, ref: str | None) -> dict | None:
    parsed = DatasetRef.stored(ref)
    if parsed is None:
        return None
    version = ((state.datasets.get(parsed.name) or {}).get("versions") or {}).get(parsed.version_key)
    return dict(version) if version is not None else None


def _check(staged: Staged, state: Any, person: str) -> None:
    """What would be refused midway, refused before anything is committed."""
    for doc in staged.datasets:
        name = doc.get("name")
        try:
            check_name(name)
            if doc["ref"] != f"{name}:{int(doc['version'])}":
                raise InvalidSpec("its ref is not its name and version")
            if _is_output(name) and doc.get("alone"):
                raise InvalidSpec("a job's output comes with its job")
        except (FloyddError, KeyError, TypeError, ValueError) as exc:
            raise InvalidSpec(f"the export's dataset {str(doc.get('ref'))[:80]} is malformed: {exc}") from None
        if _is_output(name):            # imported under a name of its own (its new job's, or _plain)
            continue
        target = access.dataset_target(state, name)
        tree = staged.trees.get(doc["tree"])
        again = tree is not None and _same(state, name, str(tree.tree),
                                           f"import:{staged.origin.fingerprint}:dataset:{doc['ref']}:{doc['tree']}")
        try:                            # someone else's private one, or a new version of someone else's
            if target.private:
                access.check(state, person, target, "read", doing="import a version of")
            if again is None:
                access.check(state, person, target, "add", doing="import a version of")
        except Forbidden as exc:
            raise Forbidden(f"{exc.message}; nothing was imported", code=exc.code,
                            hint="ask its owner or an admin to import the file") from None
    brought = {(d["ref"], d["tree"]) for d in staged.datasets}
    for job in staged.jobs:
        doc = job.doc
        try:
            if JobKey.parse(doc["id"]).project != check_project(doc["project"]):
                raise InvalidSpec("its id is not of its project")
            if doc["state"] not in FINAL_STATES:
                raise InvalidSpec(f"it is {doc['state']}, not ended")
            JobSpec.from_dict(doc["spec"])
            trees = [doc["spec"]["code_tree"], (doc.get("output") or {}).get("tree")]
            if any(tree is not None and tree not in staged.trees for tree in trees):
                raise InvalidSpec("it names a tree the file does not hold")
            for mount in doc["spec"]["data"]:
                if (mount["ref"], mount["tree"]) not in brought:
                    raise InvalidSpec(f"its mount {mount['ref']} is not in the file")
            float(doc["created"])
        except (FloyddError, KeyError, TypeError, ValueError) as exc:
            raise InvalidSpec(f"the export's job {str(doc.get('id'))[:80]} is malformed: {exc}; nothing was imported",
                              hint="the file was not written by floyd export (or by a version with a bug)") from None


def _same(state: Any, name: str, tree: str, idem_key: str) -> dict | None:
    """A version of ``name`` here that an earlier import made, or that holds the very same tree
    (data that went to the other site and comes back: its chunks keep their cut points, so it
    seals to the same ids): no new version for it."""
    seen = state.idem.get(idem_key)
    versions = (state.datasets.get(name) or {}).get("versions") or {}
    if seen is not None and seen[0] == "dataset" and str(seen[2]) in versions:
        return dict(versions[str(seen[2])])
    for version in versions.values():
        if version["tree"] == tree:
            return dict(version)
    return None


def _already(state: Any, key: str) -> str | None:
    """The job an import key made before, if it still exists."""
    seen = state.idem.get(key)
    if seen is not None and seen[0] == "job" and seen[1] in state.jobs:
        return seen[1]
    archived = state.archive.by_idem(key)
    return archived.id if archived is not None else None


async def _import_job(run: _Run, job: StagedJob, key: str, number: int) -> dict:
    jobs, staged, person = run.jobs, run.staged, run.person
    doc, cluster, store = job.doc, jobs.cluster, jobs.store
    project = doc["project"]
    new = JobKey(project, number)
    output_version = "" if doc.get("output_version") == "" else None
    if doc.get("output"):
        tree = staged.trees[doc["output"]["tree"]]
        version = await jobs.datasets.register(new.output_name, str(tree.tree), size=tree.size, files=tree.files,
                                               message=f"output of {new} ({run.note}: output of {doc['id']})",
                                               idem_key=f"{key}:output", user=person)
        output_version = version["ref"]
        run.versions[(doc["output"]["ref"], doc["output"]["tree"])] = version
    spec = dict(doc["spec"])
    spec["code_tree"] = str(staged.trees[spec["code_tree"]].tree) if spec.get("code_tree") else None
    spec["data"] = [{"ref": run.versions[(m["ref"], m["tree"])]["ref"], "tree": str(staged.trees[m["tree"]].tree),
                     "mount": m["mount"]} for m in spec["data"]]
    spec = {**JobSpec.from_dict(spec).to_dict(), "code_tree": spec["code_tree"]}
    workspace = Path(jobs.local.jobs_dir) / project / str(number)
    fields = {name: spec[name] for name in ("command", "params", "code_tree", "data", "resources", "env", "message",
                                            "mode", "max_runtime")}
    fields.update(created=float(doc["created"]), started=doc.get("started"), ended=doc.get("ended"),
                  exit_code=doc.get("exit_code"), output_version=output_version, node=cluster.name,
                  workspace=str(workspace), user=person, attempt=1, gpus=[])
    summary = await asyncio.to_thread(_records, jobs, job, new, fields, doc, workspace)
    if spec["code_tree"]:
        await asyncio.to_thread(store.catalog.pin, ObjectId.from_hex(spec["code_tree"]), code_pin(new))
    imported = {"origin": staged.origin.fingerprint, "origin_kind": staged.origin.kind,
                "origin_name": staged.origin.name, "job": doc["id"], "exported_by": staged.manifest.get("exported_by", ""),
                "exported": staged.manifest.get("created"), "ran_on": doc.get("node") or "", "user": doc.get("user") or "",
                "before": doc.get("imported")}
    return await cluster.import_job({
        "idem_key": key, "project": project, "number": number, "spec": spec, "state": doc["state"],
        "reason": str(doc.get("reason") or ""), "exit_code": doc.get("exit_code"), "created": float(doc["created"]),
        "started": doc.get("started"), "ended": doc.get("ended"), "output_version": output_version,
        "summary": {"metrics": summary, "ran_on": doc.get("node") or ""}, "imported": imported, "user": person})


def _records(jobs: Any, job: StagedJob, new: JobKey, fields: dict, doc: dict, workspace: Path) -> dict:
    """The job's record, series and log here (blocking); its metric summary."""
    records = jobs.local.records
    workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = job.folder / "log"
    if log.exists():
        shutil.move(log, workspace / "job.log")
    else:
        (workspace / "job.log").touch(mode=0o600)
    os.chmod(workspace / "job.log", 0o600)

    def batches(name: str):
        path = job.folder / name
        if not path.exists():
            return
        with open(path, "rb") as f:
            yield from msgpack.Unpacker(f, raw=False, max_buffer_size=64 << 20)

    def points():
        for batch in batches("metrics"):
            yield [(name, value, step, ts) for name, step, value, ts in batch]

    events = [{"ts": e.get("ts") or fields["created"], "kind": str(e.get("kind") or "note"),
               "message": str(e.get("message") or ""), "data": e.get("data") if isinstance(e.get("data"), dict) else None}
              for batch in batches("events") for e in batch if isinstance(e, dict)]
    samples = [s for batch in batches("samples") for s in batch]
    records.insert_imported(new.project, new.number, fields, state=doc["state"], reason=str(doc.get("reason") or ""),
                            events=events, metrics=points(), samples=samples)
    summary = records.metric_summary(new.project, new.number)
    return dict(list(summary.items())[:MAX_SUMMARY_METRICS])
