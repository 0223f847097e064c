"""All the export file's cryptography, in one small module (the store's is :mod:`floydd.store.keys.crypto`).

An export is sealed under its own **export key**, 32 random bytes that never touch either
cluster's store secret: the importing cluster has another secret, so the exporter opens each
chunk with its own store key and seals it again under the export key, and the importer opens
it with the export key and seals it under *its* store key. The key reaches the person in one
of three ways (the CLI's choice, :mod:`floydd.cli.exchange`):

- ``random``: made by ``floyd export`` and printed once, as text (``fxk1-`` and 52 base32
  letters, :meth:`ExportKey.text`), or written to a new ``--key-file`` (0600);
- a ``--key-file`` that already holds such a text: the same key for several exports;
- a passphrase, stretched with scrypt (N=2**16, r=8, p=1: 64 MiB, ~0.2 s) and a random
  salt that the file's header carries (``kdf``), so the importer derives the same key.

From the key, BLAKE3's key derivation makes independent subkeys:

- the **record key** of one file: ``derive(key ‖ file id)``, the file id being 16 random
  bytes in the header; every record is sealed with AES-256-GCM under it, a fresh random
  96-bit nonce, and associated data naming the record's place (part index, record index,
  flags), so a record cannot be moved, dropped from the middle of a part, or taken from
  another file sealed with the same key;
- the **manifest key**: the table of contents at the end carries a keyed BLAKE3 MAC, so
  someone without the key cannot make a consistent table of contents either;
- the **check value** (16 bytes, in the header): a wrong key is refused before anything is
  read or written, and said so, rather than as damage.

Sealed record = ``nonce (12) | ciphertext | tag (16)``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import struct

import blake3
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from floydd.errors import InvalidSpec

__all__ = ["ExportKey", "KEY_SIZE", "FILE_ID_SIZE", "RECORD_OVERHEAD", "SCRYPT", "new_salt"]

KEY_SIZE = 32
FILE_ID_SIZE = 16
NONCE_SIZE = 12
TAG_SIZE = 16
RECORD_OVERHEAD = NONCE_SIZE + TAG_SIZE
SCRYPT = {"n": 1 << 16, "r": 8, "p": 1}
"""The passphrase KDF's cost (64 MiB of memory): written into each header, read back from it."""
_TEXT_PREFIX = "fxk1-"
_AD = struct.Struct(">8sIIB")
_AD_TAG = b"floydx01"


class ExportKey:
    """One export key; its repr and pickling hide it (it is a secret, like the store's)."""

    __slots__ = ("_key", "_mac", "check")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != KEY_SIZE:
            raise InvalidSpec(f"an export key is {KEY_SIZE} bytes", hint="give the key floyd export printed")
        self._key = key
        self._mac = _derive(key, "floydd 2024 export manifest mac")
        self.check = _derive(key, "floydd 2024 export key check")[:16].hex()

    @classmethod
    def new(cls) -> ExportKey:
        return cls(secrets.token_bytes(KEY_SIZE))

    @classmethod
    def from_text(cls, text: str) -> ExportKey:
        """Parse ``fxk1-...`` (dashes, spaces and case do not matter) or 64 hex digits."""
        raw = "".join(str(text).split()).replace("-", "")
        if raw.lower().startswith(_TEXT_PREFIX[:-1]) and len(raw) != 2 * KEY_SIZE:
            letters = raw[len(_TEXT_PREFIX) - 1:].upper()
            try:
                key = base64.b32decode(letters + "=" * (-len(letters) % 8))
            except ValueError:
                key = b""
        else:
            try:
                key = bytes.fromhex(raw)
            except ValueError:
                key = b""
        if len(key) != KEY_SIZE:
            raise InvalidSpec("that is not an export key",
                              hint=f"an export key reads {_TEXT_PREFIX}… (as floyd export printed it) or is 64 hex digits")
        return cls(key)

    @classmethod
    def from_passphrase(cls, passphrase: str, kdf: dict) -> ExportKey:
        """The key a passphrase gives with the header's ``kdf`` (``{"kind": "scrypt", "salt", "n", "r", "p"}``)."""
        try:
            salt = bytes.fromhex(kdf["salt"])
            n, r, p = int(kdf["n"]), int(kdf["r"]), int(kdf["p"])
        except (KeyError, TypeError, ValueError):
            raise InvalidSpec("the export's header has a malformed passphrase setting",
                              hint="the file is damaged or not a floyd export") from None
        if not (1 < n <= 1 << 20 and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16 and len(salt) >= 16):
            raise InvalidSpec("the export asks for passphrase settings floyd does not accept",
                              hint="the file is damaged or not a floyd export")
        key = hashlib.scrypt(passphrase.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 << 20, dklen=KEY_SIZE)
        return cls(key)

    @property
    def hex(self) -> str:
        """The key as 64 hex digits: how the CLI hands it to its daemon (never printed)."""
        return self._key.hex()

    def text(self) -> str:
        """The form shown to people: ``fxk1-`` and 52 base32 letters in groups of four."""
        letters = base64.b32encode(self._key).decode().rstrip("=").lower()
        return _TEXT_PREFIX + "-".join(letters[i:i + 4] for i in range(0, len(letters), 4))

    def records(self, file_id: bytes) -> RecordSealer:
        return RecordSealer(_derive(self._key + file_id, "floydd 2024 export records aes-256-gcm"))

    def mac(self, data: bytes) -> str:
        return blake3.blake3(data, key=self._mac).hexdigest()

    def check_mac(self, data: bytes, mac: object) -> bool:
        return isinstance(mac, str) and hmac.compare_digest(self.mac(data), mac)

    def matches(self, check: object) -> bool:
        return isinstance(check, str) and hmac.compare_digest(self.check, check)

    def __repr__(self) -> str:
        return f"ExportKey(check={self.check[:8]})"

    def __reduce__(self):
        raise TypeError("export keys cannot be pickled")


class RecordSealer:
    """AES-256-GCM over the records of one file (see the module docstring)."""

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal_into(self, part: int, record: int, flags: int, plaintext: bytes | memoryview, out: memoryview) -> int:
        """Seal into ``out`` (at least ``len(plaintext) + RECORD_OVERHEAD`` bytes, a buffer the
        caller reuses: no fresh memory per record); the sealed record's length."""
        n = len(plaintext) + RECORD_OVERHEAD
        nonce = os.urandom(NONCE_SIZE)
        out[:NONCE_SIZE] = nonce
        self._aead.encrypt_into(nonce, plaintext, _AD.pack(_AD_TAG, part, record, flags), out[NONCE_SIZE:n])
        return n

    def open(self, part: int, record: int, flags: int, sealed: bytes | memoryview) -> bytes | None:
        """The plaintext, or None when the record fails authentication (damaged, moved, or
        sealed under another key)."""
        view = memoryview(sealed)
        if len(view) < RECORD_OVERHEAD:
            return None
        try:
            return self._aead.decrypt(bytes(view[:NONCE_SIZE]), view[NONCE_SIZE:], _AD.pack(_AD_TAG, part, record, flags))
        except InvalidTag:
            return None

    def open_into(self, part: int, record: int, flags: int, sealed: bytes | memoryview,
                  out: bytearray) -> memoryview | None:
        """:meth:`open` into ``out`` (at least the plaintext's length; a buffer the caller
        reuses): a view of the plaintext in it, or None."""
        view = memoryview(sealed)
        n = len(view) - RECORD_OVERHEAD
        if n < 0:
            return None
        plain = memoryview(out)[:n]
        try:
            self._aead.decrypt_into(bytes(view[:NONCE_SIZE]), view[NONCE_SIZE:], _AD.pack(_AD_TAG, part, record, flags),
                                    plain)
        except InvalidTag:
            return None
        return plain


def new_salt() -> str:
    return secrets.token_hex(16)


def _derive(material: bytes, context: str) -> bytes:
    return blake3.blake3(material, derive_key_context=context).digest()
