"""All the store's cryptography, in one small module (restic's ``crypto/``).

One 32-byte secret per store (the ``key`` file, mode 0600) is stretched with BLAKE3's
key-derivation mode into independent keys:

- the **id key**: object id = keyed BLAKE3(plaintext). Ids are deterministic (identical
  data dedups) but reveal nothing to someone without the key;
- the **seal key**: each object is sealed with AES-256-GCM (hardware AES), a fresh random
  96-bit nonce, and its id as associated data, so an object cannot be swapped for another;
- the **path key**: the file-metadata cache stores keyed hashes of paths, never names;
- the **chunker seed**: cut points depend on the secret, so chunk sizes do not fingerprint
  known files (restic picks a random chunker polynomial per repository for the same reason).

Sealed object = ``FORMAT (1 byte) | nonce (12) | ciphertext | tag (16)``. Opening checks
the tag and then re-hashes the plaintext against the id.

**Key epochs** (``floydd rotate-store-key``, :mod:`floydd.store.keys.epochs`). The seal key
rotates; the id key, path key and chunker seed do not (they name objects: rotating them
renames every object, which is :mod:`floydd.store.keys.rekey`, a whole-store rewrite). Epoch 0
seals with the key derived from the store secret, as above. Epoch N >= 1 has its own random
32-byte secret, held only by the members the cluster had when it began; an object sealed
under it is ``FORMAT_EPOCH (0x02) | epoch (u32, big-endian) | nonce | ciphertext | tag``,
with the epoch in the associated data too (a header edited to name another epoch fails
authentication). So a box removed from the cluster, which keeps the store secret, still
*recognises* content it once had (same ids) but cannot open what is sealed under a later
epoch, and objects re-sealed under one (in the background) no longer open with its keys. Random nonces bound a key to
about 2**32 objects (petabytes at 1 MiB per object) before GCM's collision margin shrinks.

AES-GCM (the ``cryptography`` package) is imported, and each epoch's cipher built, on the first
seal or open under that epoch, not when a store opens: a box that starts and seals or opens
nothing (an idle box alone, issue 23) never loads it (~8 MiB of RSS).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import blake3

from floydd.errors import IntegrityError, StoreError
from floydd.store.ids import ObjectId

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["Keys", "load_or_create_secret", "read_secret", "write_secret", "epoch_of", "epoch_fingerprint",
           "SECRET_SIZE", "OVERHEAD", "MAX_OVERHEAD", "HEADER_PEEK"]

SECRET_SIZE = 32
FORMAT = b"\x01"
NONCE_SIZE = 12
TAG_SIZE = 16
OVERHEAD = len(FORMAT) + NONCE_SIZE + TAG_SIZE
"""What sealing adds under epoch 0 (the sizes the store reports assume it)."""
FORMAT_EPOCH = b"\x02"
EPOCH_SIZE = 4
MAX_OVERHEAD = OVERHEAD + EPOCH_SIZE
"""What sealing adds at most (buffers are sized with it)."""
HEADER_PEEK = len(FORMAT_EPOCH) + EPOCH_SIZE
"""Bytes of a sealed object that say its epoch (:func:`epoch_of`)."""
MAX_EPOCH = (1 << 32) - 1
_AD_PREFIX = b"floydd-object-v1:"
_AD_EPOCH_PREFIX = b"floydd-object-v2:"


class Keys:
    """Keys derived from the store secret. Never printed: the repr hides everything."""

    __slots__ = ("_id_key", "_path_key", "chunker_seed", "fingerprint", "_seal_keys", "_ciphers", "seal_epoch")

    def __init__(self, secret: bytes, epochs: Mapping[int, bytes] | None = None) -> None:
        if len(secret) != SECRET_SIZE:
            raise StoreError(f"the store secret must be {SECRET_SIZE} bytes, got {len(secret)}")
        self._id_key = _derive(secret, "floydd 2024 store object id")
        self._seal_keys: dict[int, bytes] = {0: _derive(secret, "floydd 2024 store seal aes-256-gcm")}
        self._ciphers: dict[int, tuple[bytes, AESGCM]] = {}
        """Each epoch's seal key and the AES-GCM built from it on its first seal or open (:meth:`_cipher`)."""
        self.seal_epoch = 0
        """The epoch new objects are sealed under: the newest this box holds the key of."""
        self._path_key = _derive(secret, "floydd 2024 store cache path")
        seed = _derive(secret, "floydd 2024 store chunker seed")
        # pyfastcdc wants a non-zero seed below 2**63 (it shifts it left by one).
        self.chunker_seed = (int.from_bytes(seed[:8], "little") >> 1) or 1
        # Public, harmless: lets caches and peers check they hold the same secret.
        self.fingerprint = _derive(secret, "floydd 2024 store fingerprint")[:8].hex()

        for n, epoch_secret in sorted((epochs or {}).items()):
            self.add_epoch(n, epoch_secret)

    def __repr__(self) -> str:
        return f"Keys(fingerprint={self.fingerprint}, seal_epoch={self.seal_epoch})"

    def add_epoch(self, n: int, secret: bytes) -> None:
        """Hold the seal key of epoch ``n`` (>= 1); new objects are sealed under the newest.
        Safe while other threads seal and open (one dict item and one int are replaced)."""
        if not 1 <= n <= MAX_EPOCH:
            raise StoreError(f"a key epoch is a number from 1 to {MAX_EPOCH}, got {n}")
        if len(secret) != SECRET_SIZE:
            raise StoreError(f"the secret of key epoch {n} must be {SECRET_SIZE} bytes, got {len(secret)}")
        self._seal_keys[n] = _derive(secret, "floydd 2026 store seal epoch aes-256-gcm")
        self.seal_epoch = max(self.seal_epoch, n)

    def epochs(self) -> list[int]:
        """The epochs this box holds the keys of (0 always)."""
        return sorted(self._seal_keys)

    def __reduce__(self):  # never pickled into a log, a crash dump or another process
        raise TypeError("store keys cannot be pickled")

    def object_id(self, data: bytes | memoryview) -> ObjectId:
        return ObjectId(blake3.blake3(data, key=self._id_key).digest())

    def path_digest(self, path: bytes) -> bytes:
        return blake3.blake3(path, key=self._path_key).digest(16)

    def seal(self, oid: ObjectId, plaintext: bytes | memoryview, *, epoch: int | None = None) -> bytes:
        buf = bytearray(len(plaintext) + MAX_OVERHEAD)
        return bytes(self.seal_into(oid, plaintext, buf, epoch=epoch))

    def seal_into(self, oid: ObjectId, plaintext: bytes | memoryview, out: bytearray, *,
                  epoch: int | None = None) -> memoryview:
        """``seal`` into a reusable buffer of at least ``len(plaintext) + MAX_OVERHEAD`` bytes
        (no fresh memory per object); returns a view of the sealed bytes in it. Sealed under
        ``epoch`` (default: :attr:`seal_epoch`)."""
        epoch = self.seal_epoch if epoch is None else epoch
        aead = self._cipher(epoch)
        if aead is None:
            raise StoreError(f"this box does not hold the key of epoch {epoch}")
        head = FORMAT if epoch == 0 else FORMAT_EPOCH + epoch.to_bytes(EPOCH_SIZE, "big")
        n = len(head) + NONCE_SIZE + len(plaintext) + TAG_SIZE
        if len(out) < n:
            raise ValueError(f"seal_into needs a buffer of {n} bytes, got {len(out)}")
        view = memoryview(out)
        nonce = os.urandom(NONCE_SIZE)
        h = len(head)
        view[0:h] = head
        view[h:h + NONCE_SIZE] = nonce
        aead.encrypt_into(nonce, plaintext, _ad(epoch, oid), view[h + NONCE_SIZE:n])
        return view[:n]

    def check(self, oid: ObjectId, sealed: bytes | memoryview, scratch: bytearray) -> None:
        """``open`` without keeping the plaintext: decrypts into ``scratch`` (at least
        ``len(sealed) - OVERHEAD`` bytes) and re-hashes."""
        view = memoryview(sealed)
        epoch, h, aead = self._parse(oid, view)
        n = len(view) - h - NONCE_SIZE - TAG_SIZE
        if len(scratch) < n:
            raise ValueError(f"check needs a scratch buffer of {n} bytes, got {len(scratch)}")
        plain = memoryview(scratch)[:n]
        from cryptography.exceptions import InvalidTag      # loaded with the cipher, by _parse
        try:
            aead.decrypt_into(bytes(view[h:h + NONCE_SIZE]), view[h + NONCE_SIZE:], _ad(epoch, oid), plain)
        except InvalidTag:
            raise _damaged(oid, "it failed authentication (changed on disk, or sealed with another key)") from None
        if self.object_id(plain) != oid:
            raise _damaged(oid, "its content does not hash to its id")

    def _parse(self, oid: ObjectId, view: memoryview) -> tuple[int, int, AESGCM]:
        """(epoch, header length, its AEAD) of a sealed object; ``IntegrityError`` if it is not
        one, or sealed under an epoch whose key this box does not hold."""
        if len(view) >= OVERHEAD and view[:1] == FORMAT:
            return 0, 1, self._cipher(0)
        if len(view) < MAX_OVERHEAD or view[:1] != FORMAT_EPOCH:
            raise _damaged(oid, "it is truncated or not a floydd object")
        epoch = int.from_bytes(view[1:HEADER_PEEK], "big")
        aead = self._cipher(epoch)
        if aead is None:
            raise _damaged(oid, f"it is sealed under key epoch {epoch}, whose key this box does not hold "
                                "(a member receives each epoch's key from another; a removed box never does)")
        return epoch, HEADER_PEEK, aead

    def intact(self, oid: ObjectId, sealed: bytes | memoryview) -> bool:
        """Whether ``sealed`` opens and re-hashes as ``oid`` under these keys."""
        try:
            self.open(oid, sealed)
        except IntegrityError:
            return False
        return True

    def open(self, oid: ObjectId, sealed: bytes | memoryview) -> bytes:
        """Authenticate, decrypt and re-hash; ``IntegrityError`` names the object."""
        view = memoryview(sealed)
        epoch, h, aead = self._parse(oid, view)
        nonce = bytes(view[h:h + NONCE_SIZE])
        from cryptography.exceptions import InvalidTag      # loaded with the cipher, by _parse
        try:
            plaintext = aead.decrypt(nonce, view[h + NONCE_SIZE:], _ad(epoch, oid))
        except InvalidTag:
            raise _damaged(oid, "it failed authentication (changed on disk, or sealed with another key)") from None
        if self.object_id(plaintext) != oid:
            raise _damaged(oid, "its content does not hash to its id")
        return plaintext

    def _cipher(self, epoch: int) -> AESGCM | None:
        """Epoch ``epoch``'s AES-GCM, built from its seal key on first use (and again if
        :meth:`add_epoch` replaced the key); None if this box lacks the key. Threads that seal
        and open at once may each build it the first time: the same cipher of the same key."""
        key = self._seal_keys.get(epoch)
        if key is None:
            return None
        built = self._ciphers.get(epoch)
        if built is not None and built[0] is key:
            return built[1]
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        aead = AESGCM(key)
        self._ciphers[epoch] = (key, aead)
        return aead


def load_or_create_secret(path: Path) -> bytes:
    """Read the store secret, creating it (0600, atomically) on first use."""
    try:
        return read_secret(path)
    except FileNotFoundError:
        pass
    secret = secrets.token_bytes(SECRET_SIZE)
    try:
        write_secret(path, secret)
    except FileExistsError:  # another process made it first: theirs wins
        return read_secret(path)
    return secret


def read_secret(path: Path) -> bytes:
    """The secret in ``path``; ``FileNotFoundError`` if there is none, ``StoreError`` if it
    is readable by others or malformed."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077:
            raise StoreError(f"the store key {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o})",
                             hint=f"chmod 600 {path}")
        text = os.read(fd, 200).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) != SECRET_SIZE:
        raise StoreError(f"the store key {path} is malformed",
                         hint="restore it from your backup; without it the store cannot be read")
    return secret


def write_secret(path: Path, secret: bytes) -> None:
    """Write ``secret`` to the new file ``path`` (0600), durably (file and folder fsynced),
    appearing whole or not at all; ``FileExistsError`` if ``path`` exists."""
    if len(secret) != SECRET_SIZE:
        raise StoreError(f"the store secret must be {SECRET_SIZE} bytes, got {len(secret)}")
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, secret.hex().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # atomic, and never replaces a key another process made first
    except OSError as e:
        if e.errno != errno.EPERM:  # filesystems without hard links
            raise
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "exists", str(path)) from None
        os.rename(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def epoch_of(head: bytes | memoryview) -> int | None:
    """The key epoch a sealed object's first bytes (:data:`HEADER_PEEK` of them) name; None
    when they are not a floydd object's."""
    view = memoryview(head)
    if view[:1] == FORMAT:
        return 0
    if len(view) >= HEADER_PEEK and view[:1] == FORMAT_EPOCH:
        return int.from_bytes(view[1:HEADER_PEEK], "big")
    return None


def epoch_fingerprint(secret: bytes) -> str:
    """Public, harmless: names an epoch's secret, so a box can check the one it was sent."""
    return _derive(secret, "floydd 2026 store epoch fingerprint")[:8].hex()


def _ad(epoch: int, oid: ObjectId) -> bytes:
    if epoch == 0:
        return _AD_PREFIX + oid.raw
    return _AD_EPOCH_PREFIX + epoch.to_bytes(EPOCH_SIZE, "big") + oid.raw


def _derive(secret: bytes, context: str) -> bytes:
    return blake3.blake3(secret, derive_key_context=context).digest()


def _damaged(oid: ObjectId, why: str) -> IntegrityError:
    err = IntegrityError(f"object {oid.short} is damaged: {why}",
                         hint="run verify to see what it affects; fetch or upload that data again")
    err.object = oid  # lets the store name the versions that use it
    return err
