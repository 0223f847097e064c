"""Names and keys: project and dataset names, job keys (``mnist/12``), dataset references
(``mnist:2``, ``mnist:latest``), and the absolute paths a request may name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

from floydd.errors import InvalidName, InvalidSpec, UnsafePath

__all__ = ["PROJECT_PATTERN", "DATASET_PATTERN", "check_project", "check_dataset_name", "check_upload_name",
           "MAX_PATH", "check_abs_path", "JobKey", "parse_job_key", "DatasetRef", "parse_ref"]

PROJECT_PATTERN = r"[a-z0-9][a-z0-9_-]{0,63}"
_PROJECT = re.compile(PROJECT_PATTERN)
_PROJECT_HINT = "use 1-64 lowercase letters, digits, '-' or '_', starting with a letter or digit"
_DATASET = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_OUTPUT = re.compile(rf"({PROJECT_PATTERN})/([1-9][0-9]{{0,17}})/output")
DATASET_PATTERN = rf"{_DATASET.pattern}|{_OUTPUT.pattern}"
"""A dataset name, or ``PROJECT/N/output``: the output of job N of PROJECT."""
_DATASET_HINT = ("use lowercase letters, digits, '.', '_' and '-' (64 at most, starting with a letter or digit), "
                 "or PROJECT/N/output for a job's output")


def check_project(name: object) -> str:
    if not isinstance(name, str) or not _PROJECT.fullmatch(name):
        raise InvalidName(f"{name!r:.80} is not a valid project name", hint=_PROJECT_HINT)
    return name


def check_dataset_name(name: object) -> str:
    if isinstance(name, str) and (_DATASET.fullmatch(name) or _OUTPUT.fullmatch(name)) and ".." not in name:
        return name
    raise InvalidName(f"{name!r:.80} is not a valid dataset name", hint=_DATASET_HINT)


def check_upload_name(name: object) -> str:
    """A name an upload may take: a dataset name, but not ``PROJECT/N/output``, which is job
    N's output (a version under it would be mounted as that job's output). Only the runtime
    publishes versions under such names."""
    check_dataset_name(name)
    output = _OUTPUT.fullmatch(name)  # type: ignore[arg-type]
    if output:
        project, number = output.groups()
        raise InvalidName(f"{name} is the name of the output of job {project}/{number}; an upload cannot take it",
                          hint=f"choose a plain name, e.g. --name {project}-{number}-output")
    return name  # type: ignore[return-value]


MAX_PATH = 4096
"""The longest path (bytes, as the kernel's PATH_MAX) a request may name; a name in it at most 255."""


def check_abs_path(path: object, what: str, *, hint: str) -> str:
    """``path`` unchanged if it is an absolute path the kernel can take: no NUL, at most
    :data:`MAX_PATH` bytes, each name at most 255 (it need not exist)."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise UnsafePath(f"{what} must be an absolute path", hint=hint)
    if "\0" in path:
        raise UnsafePath(f"{what} {path[:80]!r} holds a NUL byte", hint=hint)
    encoded = path.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_PATH or any(len(name) > 255 for name in encoded.split(b"/")):
        raise UnsafePath(f"{what} {path[:80]!r}... is too long: paths are at most {MAX_PATH} bytes, "
                         "each name in them at most 255", hint=hint)
    return path


@dataclass(frozen=True, slots=True, order=True)
class JobKey:
    """``mnist/12``: job 12 of project mnist. Unpacks as ``project, number = key``."""

    project: str
    number: int

    @classmethod
    def parse(cls, text: object) -> JobKey:
        project, sep, number = str(text).rpartition("/")
        if not sep or not _PROJECT.fullmatch(project) or not number.isascii() or not number.isdigit() \
                or number.startswith("0") or len(number) > 18:
            raise InvalidSpec(f"{text!r:.80} is not a job name",
                              hint="jobs are named PROJECT/NUMBER, e.g. digits/3 (see `floyd status`)")
        return cls(project, int(number))

    def __iter__(self) -> Iterator[Any]:
        yield self.project
        yield self.number

    def __str__(self) -> str:
        return f"{self.project}/{self.number}"

    @property
    def output_name(self) -> str:
        """The dataset its ``/output`` becomes."""
        return f"{self.project}/{self.number}/output"


def parse_job_key(text: object) -> JobKey:
    """``"digits/3"`` -> ``JobKey("digits", 3)`` (unpacks as ``("digits", 3)``)."""
    return JobKey.parse(text)


@dataclass(frozen=True, slots=True)
class DatasetRef:
    """``NAME`` or ``NAME:latest`` (version None: the latest), or ``NAME:N``."""

    name: str
    version: int | None = None

    @classmethod
    def parse(cls, text: object) -> DatasetRef:
        if not isinstance(text, str):
            raise InvalidName(f"{text!r:.80} is not a dataset reference", hint="write NAME, NAME:N or NAME:latest")
        name, sep, number = text.partition(":")
        check_dataset_name(name)
        if not sep or number == "latest":
            return cls(name)
        if not number.isascii() or not number.isdigit() or number.startswith("0") or len(number) > 18:
            raise InvalidName(f"{text!r:.80}: the version must be a number or 'latest'",
                              hint=f"write {name}, {name}:N or {name}:latest")
        return cls(name, int(number))

    @classmethod
    def stored(cls, text: object) -> DatasetRef | None:
        """A ref as the replicated state and the records keep it (``NAME:N``: a resolved
        mount, a job's ``output_version``), or None if it is no ref: the state takes its
        commands from authorised nodes, not from well-formed ones, and its readers never
        raise on what it holds."""
        try:
            return cls.parse(text)
        except InvalidName:
            return None

    @property
    def version_key(self) -> str:
        """The key of its version in a dataset's ``versions`` (JSON keys are text); "" for the latest."""
        return "" if self.version is None else str(self.version)

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}:{self.version}"


def parse_ref(text: object) -> tuple[str, int | None]:
    """``NAME``, ``NAME:N`` or ``NAME:latest`` -> (name, N or None for the latest)."""
    ref = DatasetRef.parse(text)
    return ref.name, ref.version
