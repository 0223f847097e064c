"""Export and import between sites (``/v1/import``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ExportOrigin", "ImportedJob", "ImportedDataset", "ImportResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportOrigin:
    """Who made an export file: a cluster (``fingerprint``: its CA's sha256) or a box alone
    (``box:`` and its node key's sha256), its name and the box that wrote the file."""

    kind: Literal["cluster", "box"]
    fingerprint: str
    name: str
    node_id: str
    short: str
    description: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedJob:
    """A job of the file (``origin_job``: its id at the origin) and the job it is here; ``new``
    False: an earlier import had made it."""

    origin_job: str
    job: str
    new: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedDataset:
    """A dataset version of the file (``origin_ref``: its name there) and the version it is
    here; ``alone``: exported on its own (else: mounted by a job of the file)."""

    origin_ref: str
    ref: str
    alone: bool
    new: bool
    """False: the version was here already (an earlier import, or the same data)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportResult:
    """``POST /v1/import``: where the file came from and what it made here."""

    origin: ExportOrigin
    jobs: tuple[ImportedJob, ...]
    datasets: tuple[ImportedDataset, ...]
    bytes: int
    exported_by: str = ""
    created: float | None = None
