"""Helpers shared by the store tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.conftest import wait_until


def write_tree(root: Path, spec: dict[str, object]) -> None:
    """Build a folder: ``{"a/b.txt": b"data", "d/": 0o755, "l@": "a/b.txt", "x": (b"..", 0o600)}``.
    A key ending in ``/`` is a folder (value: mode), ``@`` a symlink (value: target)."""
    root.mkdir(parents=True, exist_ok=True)
    dirs: list[tuple[Path, int]] = []
    for rel, value in sorted(spec.items()):
        if rel.endswith("/"):
            p = root / rel.rstrip("/")
            p.mkdir(parents=True, exist_ok=True)
            dirs.append((p, int(value)))
        elif rel.endswith("@"):
            p = root / rel[:-1]
            p.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(str(value), p)
        else:
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            data, mode = value if isinstance(value, tuple) else (value, 0o644)
            p.write_bytes(data)
            os.chmod(p, mode)
    for p, mode in sorted(dirs, key=lambda d: -len(d[0].parts)):
        os.chmod(p, mode)


def describe(root: Path) -> dict[str, tuple]:
    """Everything a restore must reproduce: kind, mode, content or link target, per path."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
    return out


def object_files(store_root: Path) -> list[Path]:
    return sorted(p for p in (store_root / "objects").rglob("*") if p.is_file() and not p.name.startswith("."))


def flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x40
    path.write_bytes(bytes(data))


def wait_until_set(event, timeout: float = 30.0) -> None:
    """Wait for a threading.Event with a deadline (never a bare sleep)."""
    wait_until(event.is_set, timeout, what="the event to be set")


def count_rekey_steps(setattr_, after_step) -> None:
    """Call ``after_step(name)`` after each write or durable step a re-key makes: object
    saves and commits, journal transactions, the catalog and key switches, cache drop and
    removals. ``setattr_`` is ``monkeypatch.setattr`` (or plain ``setattr`` in a child)."""
    from contextlib import contextmanager

    from floydd.store import local
    from floydd.store.keys import rekey_journal, rekey_run
    from floydd.store.catalog import Catalog

    def wrap(owner, name):
        real = getattr(owner, name)

        def step(*args, **kwargs):
            out = real(*args, **kwargs)
            after_step(name)
            return out
        setattr_(owner, name, step)

    for owner, name in [(local._LocalBatch, "save"), (local._LocalBatch, "commit"), (Catalog, "remap_trees"),
                        (rekey_run, "_drop_cache"), (rekey_run, "_switch_key"), (local.LocalBackend, "remove")]:
        wrap(owner, name)
    real_tx = rekey_journal.Journal.transaction

    @contextmanager
    def tx(self):
        outermost = not self._db.in_transaction
        with real_tx(self):
            yield
        if outermost:
            after_step("journal")
    setattr_(rekey_journal.Journal, "transaction", tx)
