"""Objects as files on a local disk, fanned out by id prefix: ``objects/ab/ab12…``.

Writing one object (``Batch.save``): create ``objects/ab/.tmp-<id>-<random>``, write the
sealed bytes, read them back through the file (not from our buffer) and let ``check``
decrypt and re-hash them, and only then give the object its name. A name therefore
always means a complete, verified object; a crash leaves at worst ``.tmp-*`` files,
which ``list`` skips and ``clean_temp`` (run by gc) removes.

Durability (``sync``), measured in ``bench/store_ingest.py``:

- ``"object"`` (default): fsync each temp file before its rename, so a name always
  means a durable object; ``commit`` fsyncs the fan-out folders of every object the
  upload saved or reused (at most 256, most already clean), so nothing is acknowledged
  before its name is durable too. Small files are packed (see ``snapshot``), so a 10k
  small-file tree costs ~100 fsyncs, not 10k. The cost depends only on our own writes.
  The fsync and the rename run on the batch's own thread (:class:`~floydd.store.publish.Publisher`), in the
  order objects were verified: ``save`` returns once the object is written, started to
  write back and verified, so the caller's thread never sleeps in fsync; ``commit``
  first waits for every queued object to be fsynced and named. Same order per object
  (write, read back, check, fsync, rename), same acknowledgement point (``commit``).
- ``"batch"``: temp files are written without fsync (writeback is started at once);
  ``commit`` calls ``syncfs`` (all their data is on disk), renames them all and calls
  ``syncfs`` again. Two flushes per commit instead of one fsync per object, but
  ``syncfs`` also flushes every other process's dirty data on that filesystem (a job
  writing checkpoints, a ``cp`` that just ran), so its cost is not ours to control. In
  the benchmark (1 GiB, packs on) it was within run-to-run noise of ``"object"``
  (5.0 s vs 5.5 s on a quiet disk, slower next to foreign dirty data). Kept for
  filesystems where per-file fsync is pathologically slow.

The read-back check reads the page cache the write just filled: it proves what the
filesystem returns for the file, not that the platter holds it; ``load(bypass_cache=True)``
(used by ``verify``) first drops the file's cached pages so the medium is read.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import threading
from pathlib import Path
from typing import Iterator

from floydd import log
from floydd.errors import NotFound, StoreError, StoreFull
from floydd.store.backend import Check
from floydd.store.fileio import (_read_all, _read_back, _syncfs, _syncfs_path, _unlink_quiet,
                                 _write_all, fsync_dir, fsync_dirs, read_back_direct, start_writeback,
                                 write_direct)
from floydd.store.ids import ID_SIZE, ObjectId
from floydd.store.publish import Publisher

__all__ = ["LocalBackend", "fsync_dir"]

_FANOUT = [f"{i:02x}" for i in range(256)]
_TMP = ".tmp-"
_HEXCHARS = frozenset("0123456789abcdef")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_WRITEBACK_MIN = 256 << 10
_DIRECT_MIN = 64 << 10
"""Objects at least this large are written with direct I/O (a small one costs a padded block
and a synchronous device write for little gain)."""


class LocalBackend:
    def __init__(self, root: Path, *, sync: str | None = None, direct: bool = False) -> None:
        self.root = Path(root)
        self.description = f"local:{self.root}"
        if sync is None:
            sync = "object"
        if sync not in ("batch", "object") or (sync == "batch" and _syncfs is None):
            raise StoreError(f"unknown or unsupported sync policy {sync!r}", hint="use 'batch' or 'object'")
        self.sync = sync
        self._direct_ok = hasattr(os, "O_DIRECT")
        """Whether this filesystem takes direct I/O (False once it refused it)."""
        self.direct = direct and self._direct_ok
        """Batches write objects of :data:`_DIRECT_MIN` bytes or more, and proofs read, with
        direct I/O (:mod:`.fileio`) unless a batch says otherwise (the daemon's
        ``store_direct_io``, off by default); turned off for good when the filesystem refuses it."""
        self._init_layout()

    def _init_layout(self) -> None:
        created = False
        try:
            self.root.mkdir(mode=0o700, parents=True)
            created = True
        except FileExistsError:
            pass
        for name in _FANOUT:
            try:
                (self.root / name).mkdir(mode=0o700)
                created = True
            except FileExistsError:
                pass
        if created:
            fsync_dir(self.root)
            fsync_dir(self.root.parent)

    # -- reading ------------------------------------------------------------------------

    def path(self, oid: ObjectId) -> Path:
        h = oid.hex
        return self.root / h[:2] / h

    def has(self, oid: ObjectId) -> bool:
        try:
            os.stat(self.path(oid))
            return True
        except FileNotFoundError:
            return False

    def stat(self, oid: ObjectId) -> int:
        try:
            return os.stat(self.path(oid)).st_size
        except FileNotFoundError:
            raise _missing(oid) from None

    def load(self, oid: ObjectId, *, bypass_cache: bool = False) -> bytes:
        try:
            fd = os.open(self.path(oid), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise _missing(oid) from None
        try:
            if bypass_cache:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            return _read_all(fd)
        finally:
            os.close(fd)

    def check_stored(self, oid: ObjectId, check: Check) -> None:
        """Read with direct I/O where the filesystem takes it (from the device, into this
        thread's reused buffer: an upload proving a gigabyte of reused objects neither fills
        the page cache with them nor allocates a gigabyte)."""
        path = self.path(oid)
        direct = self.direct
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_DIRECT if direct else 0))
        except FileNotFoundError:
            raise _missing(oid) from None
        except OSError as e:
            if not direct or e.errno != errno.EINVAL:
                raise
            self.no_direct(e)
            return self.check_stored(oid, check)
        try:
            size = os.fstat(fd).st_size
            stored = read_back_direct(fd, size) if direct else _read_back(fd, size)
            check(stored[:size])
        finally:
            os.close(fd)

    def list(self, prefix: str = "") -> Iterator[ObjectId]:
        if len(prefix) > 2:
            raise ValueError(f"list(prefix={prefix!r}): at most two hex digits")
        for folder in [f for f in _FANOUT if f.startswith(prefix)]:
            try:
                names = os.listdir(self.root / folder)
            except FileNotFoundError:
                continue
            for name in names:
                if len(name) == 2 * ID_SIZE and name.startswith(folder) and _HEXCHARS.issuperset(name):
                    yield ObjectId(bytes.fromhex(name))

    def remove(self, oid: ObjectId) -> None:
        try:
            os.unlink(self.path(oid))
        except FileNotFoundError:
            pass

    def clean_temp(self) -> int:
        removed = 0
        for prefix in _FANOUT:
            try:
                names = os.listdir(self.root / prefix)
            except FileNotFoundError:
                continue
            for name in names:
                if name.startswith(_TMP):
                    try:
                        os.unlink(self.root / prefix / name)
                        removed += 1
                    except FileNotFoundError:
                        pass
        return removed

    # -- writing ------------------------------------------------------------------------

    def open_new(self, path: Path, direct: bool) -> tuple[int, bool]:
        """Create ``path`` (exclusively, not following a link) for writing and reading back:
        (fd, whether it is open for direct I/O). Direct when asked and this filesystem
        takes it (:mod:`.fileio`)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        if direct and self._direct_ok:
            try:
                return os.open(path, flags | os.O_DIRECT, 0o600), True
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                _unlink_quiet(path)     # some filesystems create the file before refusing
                self.no_direct(e)
        return os.open(path, flags, 0o600), False

    def no_direct(self, why: OSError) -> None:
        """This filesystem refused direct I/O: write through the page cache from now on."""
        if self._direct_ok:
            self._direct_ok = self.direct = False
            log.store.info("the store at %s writes through the page cache: its filesystem refused direct I/O (%s)",
                           self.root, why.strerror or why)

    def batch(self, *, direct: bool | None = None) -> _LocalBatch:
        return _LocalBatch(self, self.direct if direct is None else direct)


class _LocalBatch:
    def __init__(self, backend: LocalBackend, direct: bool) -> None:
        self._b = backend
        self._direct = direct
        self._lock = threading.Lock()
        self._pending: list[tuple[Path, Path]] = []  # (temp, final) waiting for commit
        self._dirs: set[str] = set()                 # fan-out folders to make durable
        self._pub: Publisher | None = None           # object mode: fsync + rename, in order

    def save(self, oid: ObjectId, data: bytes | memoryview, check: Check) -> None:
        self._raise_failed()
        final = self._b.path(oid)
        tmp = final.with_name(f"{_TMP}{oid.hex}-{secrets.token_hex(4)}")
        try:
            fd, direct = self._b.open_new(tmp, self._direct and len(data) >= _DIRECT_MIN)
        except OSError as e:
            raise _translate(e, oid, self._b) from e
        try:
            try:
                stored = self._write_direct(fd, data) if direct else None
                if stored is None:
                    _write_all(fd, data)
                    if len(data) >= _WRITEBACK_MIN:
                        start_writeback(fd)  # the disk works while we verify; fsync finds little left
                    stored = _read_back(fd, len(data))
            except OSError as e:
                raise _translate(e, oid, self._b) from e
            check(stored)
        except BaseException:
            os.close(fd)
            _unlink_quiet(tmp)
            raise
        with self._lock:
            self._dirs.add(oid.hex[:2])
            if self._b.sync == "batch":
                self._pending.append((tmp, final))
        if self._b.sync == "batch":
            os.close(fd)
        else:
            self._publisher().put((fd, tmp, final, oid))  # fsync, then rename: see Publisher

    def _write_direct(self, fd: int, data: bytes | memoryview) -> memoryview | None:
        """Write ``data`` into ``fd`` (opened ``O_DIRECT``) and read it back from the device;
        None if the filesystem refused direct I/O after all (``fd`` is then a plain, empty
        file again and the backend writes through the page cache from now on)."""
        try:
            write_direct(fd, data)
            return read_back_direct(fd, len(data))
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            refused = e
        self._b.no_direct(refused)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        os.ftruncate(fd, 0)
        return None

    def uses(self, oid: ObjectId) -> None:
        with self._lock:
            self._dirs.add(oid.hex[:2])

    def commit(self) -> None:
        if self._pub is not None:
            self._pub.drain()  # every object saved so far is durable and named (or raises)
        with self._lock:
            pending, self._pending = self._pending, []
            dirs, self._dirs = self._dirs, set()
        try:
            if self._b.sync == "batch":
                if pending:
                    _syncfs_path(self._b.root)          # the data of every temp file
                    for tmp, final in pending:
                        os.rename(tmp, final)
                if pending or dirs:
                    _syncfs_path(self._b.root)          # every name, ours and reused ones
            else:
                fsync_dirs(self._b.root / prefix for prefix in sorted(dirs))
        except OSError as e:
            for tmp, _ in pending:
                _unlink_quiet(tmp)
            raise _translate(e, None, self._b) from e

    def abort(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            self._dirs.clear()
            pub, self._pub = self._pub, None
        if pub is not None:
            pub.close(discard=True)
        for tmp, _ in pending:
            _unlink_quiet(tmp)

    def _publisher(self) -> Publisher:
        with self._lock:
            if self._pub is None:
                self._pub = Publisher(lambda e, oid: _translate(e, oid, self._b))
            return self._pub

    def _raise_failed(self) -> None:
        pub = self._pub
        if pub is not None:
            pub.raise_failed()

    def __enter__(self) -> _LocalBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()


# -- helpers ----------------------------------------------------------------------------

def _missing(oid: ObjectId) -> NotFound:
    return NotFound(f"object {oid.short} is not in the store",
                    hint="it was never stored here or was removed; run verify to see what it affects")


def _translate(e: OSError, oid: ObjectId | None, backend: LocalBackend) -> Exception:
    what = f"object {oid.short}" if oid else "objects"
    if e.errno in _NO_SPACE:
        log.store.error("no space left writing %s to %s", what, backend.root)
        return StoreFull(f"no space left on the device of {backend.root} while writing {what}; "
                         "nothing half-written was kept",
                         hint="free disk space (floyd data delete, then gc) and run the upload again")
    return StoreError(f"could not write {what} to {backend.root}: {e.strerror or e}",
                      hint="check the disk and the permissions of the store folder")
