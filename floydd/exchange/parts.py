"""What an export's parts hold, in the order they come (shared by the export and the import).

::

    kind      name                    records
    data      data of WHAT            one chunk each: its id at the source (32 bytes) ‖ its bytes;
                                      each chunk is in the file once, in the first data part of
                                      a tree that uses it
    tree      tree of WHAT            the tree's id at the source (32 bytes), then the tree
                                      (the store's manifest, :mod:`floydd.store.tree`) in pieces
    dataset   dataset NAME:N          one JSON record: name, version, message, created, tree
    job       job PROJECT/N           one JSON record: the job (:func:`job_document`)
    metrics   metrics of PROJECT/N    msgpack batches of points [name, step, value, ts]
    samples   samples of PROJECT/N    msgpack batches of system samples
    events    events of PROJECT/N     msgpack batches of events (the cluster's and its box's)
    log       log of PROJECT/N        the log's bytes, a MiB a record

A tree's data and tree parts come before anything that names the tree; a job's datasets,
code and output before the job. WHAT says whose tree it is (``mnist:2``, ``code of mnist/3``,
``output of mnist/3``), so damage is named in words a person knows.
"""

from __future__ import annotations

from typing import Any

import msgpack
import msgspec

from floydd.model import SPEC_FIELDS, JobView

__all__ = ["DATA", "TREE", "DATASET", "JOB", "METRICS", "SAMPLES", "EVENTS", "LOG", "LOG_RECORD",
           "BATCH", "job_document", "pack", "unpack"]

DATA, TREE, DATASET, JOB = "data", "tree", "dataset", "job"
METRICS, SAMPLES, EVENTS, LOG = "metrics", "samples", "events", "log"
LOG_RECORD = 1 << 20
BATCH = 20_000
"""Metric points (or samples, or events) per record."""


def job_document(view: JobView) -> dict:
    """What an export keeps of a job (its view from :class:`~floydd.jobs.service.JobService`):
    its spec (trees and data versions by their ids at the source), how it ended, who ran it,
    where, and where it came from if it was itself imported."""
    spec = {name: _plain(getattr(view, name)) for name in SPEC_FIELDS}
    spec["data"] = [{"ref": m.ref, "tree": m.tree, "mount": m.mount} for m in view.data]
    return {"id": view.id, "project": view.project, "number": view.number, "state": view.state,
            "reason": view.reason or "", "exit_code": view.exit_code, "created": view.created,
            "started": view.started, "ended": view.ended, "user": view.user or "",
            "node": view.node or "", "spec": spec, "output_version": view.output_version,
            "attempts": view.attempts or 0, "reruns": _plain(view.reruns) or 0,
            "imported": _plain(view.imported)}


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=True)


def _plain(value: Any) -> Any:
    """A view's value as plain data (a value the view leaves out: None)."""
    return None if value is msgspec.UNSET else msgspec.to_builtins(value)
