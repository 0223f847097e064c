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
the tag and then re-hashes the plaintext against the id. Random nonces bound a key to
about 2**32 objects (petabytes at 1 MiB per object) before GCM's collision margin shrinks.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

import blake3
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from floydd.errors import IntegrityError, StoreError
from floydd.store.ids import ObjectId

__all__ = ["Keys", "load_or_create_secret", "read_secret", "write_secret", "SECRET_SIZE", "OVERHEAD"]

SECRET_SIZE = 32
FORMAT = b"\x01"
NONCE_SIZE = 12
TAG_SIZE = 16
OVERHEAD = len(FORMAT) + NONCE_SIZE + TAG_SIZE
_AD_PREFIX = b"floydd-object-v1:"


class Keys:
    """Keys derived from the store secret. Never printed: the repr hides everything."""

    __slots__ = ("_id_key", "_aead", "_path_key", "chunker_seed", "fingerprint")

    def __init__(self, secret: bytes) -> None:
        if len(secret) != SECRET_SIZE:
            raise StoreError(f"the store secret must be {SECRET_SIZE} bytes, got {len(secret)}")
        self._id_key = _derive(secret, "floydd 2024 store object id")
        self._aead = AESGCM(_derive(secret, "floydd 2024 store seal aes-256-gcm"))
        self._path_key = _derive(secret, "floydd 2024 store cache path")
        seed = _derive(secret, "floydd 2024 store chunker seed")
        # pyfastcdc wants a non-zero seed below 2**63 (it shifts it left by one).
        self.chunker_seed = (int.from_bytes(seed[:8], "little") >> 1) or 1
        # Public, harmless: lets caches and peers check they hold the same secret.
        self.fingerprint = _derive(secret, "floydd 2024 store fingerprint")[:8].hex()

    def __repr__(self) -> str:
        return f"Keys(fingerprint={self.fingerprint})"

    def __reduce__(self):  # never pickled into a log, a crash dump or another process
        raise TypeError("store keys cannot be pickled")

    def object_id(self, data: bytes | memoryview) -> ObjectId:
        return ObjectId(blake3.blake3(data, key=self._id_key).digest())

    def path_digest(self, path: bytes) -> bytes:
        return blake3.blake3(path, key=self._path_key).digest(16)

    def seal(self, oid: ObjectId, plaintext: bytes | memoryview) -> bytes:
        nonce = os.urandom(NONCE_SIZE)
        return FORMAT + nonce + self._aead.encrypt(nonce, plaintext, _AD_PREFIX + oid.raw)

    def seal_into(self, oid: ObjectId, plaintext: bytes | memoryview, out: bytearray) -> memoryview:
        """``seal`` into a reusable buffer of at least ``len(plaintext) + OVERHEAD`` bytes
        (no fresh memory per object); returns a view of the sealed bytes in it."""
        n = len(plaintext) + OVERHEAD
        if len(out) < n:
            raise ValueError(f"seal_into needs a buffer of {n} bytes, got {len(out)}")
        view = memoryview(out)
        nonce = os.urandom(NONCE_SIZE)
        view[0:1] = FORMAT
        view[1:1 + NONCE_SIZE] = nonce
        self._aead.encrypt_into(nonce, plaintext, _AD_PREFIX + oid.raw, view[1 + NONCE_SIZE:n])
        return view[:n]

    def check(self, oid: ObjectId, sealed: bytes | memoryview, scratch: bytearray) -> None:
        """``open`` without keeping the plaintext: decrypts into ``scratch`` (at least
        ``len(sealed) - OVERHEAD`` bytes) and re-hashes."""
        view = memoryview(sealed)
        if len(view) < OVERHEAD or view[:1] != FORMAT:
            raise _damaged(oid, "it is truncated or not a floydd object")
        n = len(view) - OVERHEAD
        if len(scratch) < n:
            raise ValueError(f"check needs a scratch buffer of {n} bytes, got {len(scratch)}")
        plain = memoryview(scratch)[:n]
        try:
            self._aead.decrypt_into(bytes(view[1:1 + NONCE_SIZE]), view[1 + NONCE_SIZE:],
                                    _AD_PREFIX + oid.raw, plain)
        except InvalidTag:
            raise _damaged(oid, "it failed authentication (changed on disk, or sealed with another key)") from None
        if self.object_id(plain) != oid:
            raise _damaged(oid, "its content does not hash to its id")

    def open(self, oid: ObjectId, sealed: bytes | memoryview) -> bytes:
        """Authenticate, decrypt and re-hash; ``IntegrityError`` names the object."""
        view = memoryview(sealed)
        if len(view) < OVERHEAD or view[:1] != FORMAT:
            raise _damaged(oid, "it is truncated or not a floydd object")
        nonce = bytes(view[1:1 + NONCE_SIZE])
        try:
            plaintext = self._aead.decrypt(nonce, view[1 + NONCE_SIZE:], _AD_PREFIX + oid.raw)
        except InvalidTag:
            raise _damaged(oid, "it failed authentication (changed on disk, or sealed with another key)") from None
        if self.object_id(plaintext) != oid:
            raise _damaged(oid, "its content does not hash to its id")
        return plaintext


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


def _derive(secret: bytes, context: str) -> bytes:
    return blake3.blake3(secret, derive_key_context=context).digest()


def _damaged(oid: ObjectId, why: str) -> IntegrityError:
    err = IntegrityError(f"object {oid.short} is damaged: {why}",
                         hint="run verify to see what it affects; fetch or upload that data again")
    err.object = oid  # lets the store name the versions that use it
    return err
