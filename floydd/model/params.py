"""Params (``--param KEY=VALUE``): recorded with the job and passed to it in its
environment, so their keys are variable names and leave the job's own variables alone."""

from __future__ import annotations

import re

from floydd.errors import InvalidSpec

__all__ = ["MAX_PARAMS", "MAX_PARAM_VALUE", "parse_param", "check_params"]

_PARAM_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_PARAMS = 256
"""The most params one job may have (each is a variable in its environment)."""
MAX_PARAM_VALUE = 65536
"""The longest param value (bytes): the kernel refuses a longer environment variable at start."""
_RESERVED_PARAMS = frozenset({"PATH", "HOME", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONPATH",
                              "LD_PRELOAD", "LD_LIBRARY_PATH"})


def parse_param(text: object) -> tuple[str, str]:
    """``KEY=VALUE`` (``--param``): recorded with the job and passed to it in its environment."""
    key, sep, value = str(text).partition("=")
    if not sep or not _PARAM_KEY.fullmatch(key):
        raise InvalidSpec(f"--param {str(text):.80} is malformed",
                          hint="write KEY=VALUE with KEY made of letters, digits and '_', e.g. --param lr=0.01")
    if key.upper() in _RESERVED_PARAMS:
        raise InvalidSpec(f"--param {key} would override the job's {key.upper()}", hint="pick another name")
    if "\0" in value:
        raise InvalidSpec(f"--param {key}: the value holds a NUL byte", hint="pass plain text")
    if len(value.encode("utf-8", "surrogateescape")) > MAX_PARAM_VALUE:
        raise InvalidSpec(f"--param {key}: the value is longer than {MAX_PARAM_VALUE} bytes",
                          hint="put long values in a file in the code folder or a dataset, and pass its path")
    return key, value


def check_params(raw: object) -> dict[str, str]:
    """Params as ``{KEY: VALUE}`` or a list of ``KEY=VALUE``; values become strings."""
    if not isinstance(raw, (list, tuple, dict)):
        raise InvalidSpec("params must be an object of KEY: VALUE", hint="use --param KEY=VALUE")
    if len(raw) > MAX_PARAMS:
        raise InvalidSpec(f"{len(raw)} params; a job takes at most {MAX_PARAMS}",
                          hint="put the rest in a config file in the code folder")
    if isinstance(raw, dict):
        raw = [f"{k}={v}" for k, v in raw.items()]
    return dict(parse_param(p) for p in raw)
