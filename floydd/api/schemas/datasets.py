"""Datasets and the store: versions, their files, deletions, garbage collection."""

from __future__ import annotations

from dataclasses import dataclass

from floydd.api.schemas.literals import Visibility

__all__ = ["DatasetVersion", "DatasetEntry", "DatasetInfo", "DatasetDeleted", "GcReport"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetVersion:
    """``GET /v1/datasets`` items: a version, with the names of the boxes holding it, those of
    them not heard from within the replica grace (``silent_holders``: their copies do not
    count), and how many ``copies`` count of the ``replicas`` the cluster keeps."""

    name: str
    version: int
    created: float
    size: int
    files: int
    message: str
    held_by: tuple[str, ...]
    silent_holders: tuple[str, ...]
    copies: int
    replicas: int
    ref: str = ""
    tree: str = ""
    holders: tuple[str, ...] = ()
    copies_note: str = ""
    owner: str = ""
    """The person who added the dataset's first version (empty: from before owners)."""
    visibility: Visibility = "lab"
    """``private``: only the owner and admins mount, clone or add to it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetEntry:
    """A file, folder or link of a dataset version."""

    path: str
    kind: str
    size: int
    mode: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetInfo:
    """``GET /v1/datasets/info``: one version, its copies (as :class:`DatasetVersion`, and
    ``copies_note``: "stored on 1 of 2 boxes; the second copy follows") and its first 1000 entries."""

    name: str
    version: int
    created: float
    size: int
    files: int
    message: str
    tree: str
    entries: tuple[DatasetEntry, ...]
    truncated: bool
    held_by: tuple[str, ...]
    silent_holders: tuple[str, ...]
    copies: int
    replicas: int
    copies_note: str
    key_epochs: dict[str, int] | None
    """The objects of this version on the answering box by the store key epoch they are sealed
    under (``{"2": 140}``); None where it holds no copy."""
    cluster_key_epoch: int
    """The cluster's newest store key epoch."""
    ref: str = ""
    holders: tuple[str, ...] = ()
    owner: str = ""
    visibility: Visibility = "lab"


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetDeleted:
    """``POST /v1/datasets/delete``: the ref that was deleted, as given."""

    deleted: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GcReport:
    """``POST /v1/store/gc``: objects removed and kept, bytes freed, stray temp files removed."""

    removed: int
    freed: int
    kept: int = 0
    temp_files: int = 0
