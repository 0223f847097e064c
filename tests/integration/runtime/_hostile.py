"""What a careless or hostile job does, for the runtime's and the system's tests: the scripts
it runs, and a small real disk for a state folder that fills up (a tmpfs; the tests run as
root, as CI does)."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. "8m") mounted at ``path`` (made here), unmounted afterwards;
    the test is skipped where mounting is refused."""
    path.mkdir(parents=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path) -> None:
    """Write ``path`` until its disk is full, to the last byte. Unbuffered: a buffered file
    would keep the tail of its last write and fail again when closed."""
    with open(path, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


BAD_METRIC_LINES = """\
import json, os, time
print(json.dumps({"metric": "loss", "value": 1.0, "step": 2**70}), flush=True)
print('{"metric": "deep", "value": ' + '[' * 50000 + ']' * 50000 + '}', flush=True)
print('{"metric": "nan", "value": NaN}', flush=True)
print('{"metric": "inf", "value": Infinity, "step": 1e300}', flush=True)
print(json.dumps({"metric": "n" * 5000, "value": 1}), flush=True)
print(json.dumps({"metric": "loss", "value": "high"}), flush=True)
"""
"""Six metric lines past what the records hold (the first: a step past 64 bits)."""

GOOD_METRIC_LINES = """\
for step in range(3):
    print(json.dumps({"metric": "loss", "value": 1.0 / (step + 1), "step": step}))
"""

BAD_OUTPUT = """\
import os, socket
out = os.environ["FLOYD_OUTPUT"]
open(os.path.join(out, "model.bin"), "w").write("weights")
os.mkfifo(os.path.join(out, "pipe"))
s = socket.socket(socket.AF_UNIX); s.bind(os.path.join(out, "sock")); s.close()
os.symlink("/etc/passwd", os.path.join(out, "passwd"))
"""
"""A /output of one good file, a FIFO, a socket and a link pointing outside."""

FILL = """\
import os
with open(os.path.join(os.environ["FLOYD_OUTPUT"], "big"), "wb") as f:
    while True:
        f.write(b"x" * 65536)
        f.flush()
"""
"""Writes /output until the disk is full (and dies of it)."""
