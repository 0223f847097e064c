"""Parsing and validation of what a user asks to run (shared by CLI and daemon).

The CLI parses flags with these functions to fail fast with a one-line error; the
daemon parses again, since any client may call the API.
"""

from __future__ import annotations

import re

from floydd.errors import InvalidName, InvalidSpec

__all__ = ["PROJECT_RE", "check_project", "parse_data", "parse_param", "parse_job_key", "ENVIRONMENTS",
           "SPEC_FIELDS"]

PROJECT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_PARAM_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_PARAMS = {"PATH", "HOME", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONPATH", "LD_PRELOAD",
                    "LD_LIBRARY_PATH"}
ENVIRONMENTS = ("default",)
"""Named environments; a project's floyd_requirements.txt adds packages on top of the chosen one."""
SPEC_FIELDS = ("command", "params", "code_tree", "data", "resources", "env", "message", "mode", "max_runtime")
"""What a job's spec holds in the cluster's replicated state (the rest is its state)."""


def check_project(name: str) -> str:
    if not isinstance(name, str) or not PROJECT_RE.match(name):
        raise InvalidName(f"{name!r} is not a valid project name",
                          hint="use 1-64 lowercase letters, digits, '-' or '_', starting with a letter or digit")
    return name


def parse_data(text: str) -> dict:
    """``NAME[:VER]:MOUNT`` or ``PROJECT/N/output[:VER]:MOUNT`` -> ``{"ref", "mount"}``."""
    if not isinstance(text, str) or ":" not in text:
        raise InvalidSpec(f"--data {text!r} is malformed",
                          hint="write NAME[:VERSION]:MOUNT, e.g. --data mnist:/input or --data mnist:2:/input")
    ref, _, mount = text.rpartition(":")
    if not ref or not mount.startswith("/"):
        raise InvalidSpec(f"--data {text!r} is malformed: the mount point must be an absolute path",
                          hint="write NAME[:VERSION]:MOUNT, e.g. --data mnist:/input")
    return {"ref": ref, "mount": mount}


def parse_param(text: str) -> tuple[str, str]:
    key, sep, value = str(text).partition("=")
    if not sep or not _PARAM_KEY.match(key):
        raise InvalidSpec(f"--param {text!r} is malformed",
                          hint="write KEY=VALUE with KEY made of letters, digits and '_', e.g. --param lr=0.01")
    if key.upper() in _RESERVED_PARAMS:
        raise InvalidSpec(f"--param {key} would override the job's {key.upper()}", hint="pick another name")
    return key, value


def parse_job_key(text: str) -> tuple[str, int]:
    """``"digits/3"`` -> ``("digits", 3)``."""
    project, sep, number = str(text).rpartition("/")
    if not sep or not PROJECT_RE.match(project) or not number.isdigit() or int(number) < 1:
        raise InvalidSpec(f"{text!r} is not a job name",
                          hint="jobs are named PROJECT/NUMBER, e.g. digits/3 (see `floyd status`)")
    return project, int(number)
