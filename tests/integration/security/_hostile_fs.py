"""A hostile job's file system tricks, for the race suite: a separate process that swaps
folders for symlinks to a place outside the tree (``renameat2(RENAME_EXCHANGE)``, in a tight
loop) while the daemon works on the tree, and a place outside holding unique secrets.

Layout of a tree under attack (:func:`arm`), with ``outside`` the secret place::

    tree/a/         a real folder holding s0..s9 (innocent text)   a <-> b  swapped
    tree/b       -> outside/                                        continuously
    tree/c          an innocent file                               c <-> d  swapped
    tree/d       -> outside/s0

The daemon sees ``a`` as a folder at one moment and a link to ``outside`` the next; a path
walk from ``/`` then reads ``outside/s3`` as ``a/s3``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

from tests.conftest import wait_until

NAMES = [f"s{i}" for i in range(10)]

_SWAPPER = r"""
import ctypes, json, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
spec = json.loads(sys.argv[1])
links = {os.fsencode(k): os.fsencode(v) for k, v in spec["links"].items()}
pairs = [(os.fsencode(x), os.fsencode(y), links.get(os.fsencode(y))) for x, y in spec["pairs"]]
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
open(spec["ready"], "w").close()
swaps = 0
while not stop:
    for x, y, target in pairs:
        if target is not None and os.path.lexists(x):   # what the daemon removed (or has not made
            try:                                         # yet), put back once its twin is there
                os.symlink(target, y)
            except OSError:
                pass
        if libc.renameat2(-100, x, -100, y, 2) == 0:   # AT_FDCWD, RENAME_EXCHANGE
            swaps += 1
open(spec["ready"], "w").write(str(swaps))
"""


class Secret:
    """Files outside the tree whose content must never show up in what the daemon makes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.token = f"SECRET-{uuid.uuid4().hex}".encode()
        folder.mkdir(parents=True, exist_ok=True)
        for name in NAMES:
            (folder / name).write_bytes(self.token + b" " + name.encode() + b"\n")
        os.chmod(folder, 0o755)
        for name in NAMES:
            os.chmod(folder / name, 0o444)

    def state(self) -> dict[str, tuple]:
        """What must not change: names, contents, owners and modes of the secret place."""
        out = {".": _meta(self.folder)}
        for p in self.folder.iterdir():
            out[p.name] = _meta(p) + (p.read_bytes() if p.is_file() and not p.is_symlink() else b"",)
        return out

    def leaked(self, data: bytes) -> bool:
        return self.token in data


def _meta(p: Path) -> tuple:
    st = os.lstat(p)
    return st.st_uid, st.st_gid, st.st_mode


def arm(tree: Path, outside: Path, *, folders: bool = True, files: bool = True) -> dict:
    """Lay out the swap pairs in ``tree`` (see the module docstring); the swapper's spec."""
    pairs, links = [], {}
    if folders:
        (tree / "a").mkdir(parents=True, exist_ok=True)
        for name in NAMES:
            (tree / "a" / name).write_text(f"innocent {name}\n")
        pairs.append((tree / "a", tree / "b"))
        links[str(tree / "b")] = str(outside)
    if files:
        (tree / "c").write_text("innocent c\n")
        pairs.append((tree / "c", tree / "d"))
        links[str(tree / "d")] = str(outside / NAMES[0])
    return {"pairs": [[str(x), str(y)] for x, y in pairs], "links": links}


@contextlib.contextmanager
def swapping(spec: dict, workdir: Path) -> Iterator[dict]:
    """Run the swapper (its own process: a job is one) until the block ends; ``result["swaps"]``
    says how many exchanges it made."""
    ready = workdir / f"swapper-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-c", _SWAPPER, json.dumps({**spec, "ready": str(ready)})])
    result: dict = {"swaps": 0}
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, timeout=30, what="the swapper to start")
        assert proc.poll() is None, "the swapper died"
        yield result
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError, ValueError):
            result["swaps"] = int(ready.read_text() or 0)
        with contextlib.suppress(OSError):
            ready.unlink()


def refill(tree: Path) -> None:
    """Put ``a/s0..s9`` back into ``tree`` as the job would, never through a link (the test
    runs as root: a write through the swapped link would land in the secret place itself)."""
    tree.mkdir(exist_ok=True)
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir("a", dir_fd=fd)
        try:
            a = os.open("a", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            return                                   # swapped just now: it is full anyway
        try:
            for name in NAMES:
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=a))
        finally:
            os.close(a)
    finally:
        os.close(fd)


def stored_plaintexts(store) -> Iterator[bytes]:
    """Every object the store holds, decrypted: whatever a snapshot wrote, kept or not."""
    for oid in list(store.backend.list()):
        yield store.read_object(oid)
