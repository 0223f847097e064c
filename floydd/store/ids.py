"""Object ids: 32-byte keyed hashes as a value type (restic's ``ID``).

An id is the keyed BLAKE3 hash of an object's plaintext (see :mod:`floydd.store.keys.crypto`),
so it names content without revealing it. Written as 64 lowercase hex digits; ``short``
is the first 12, enough to tell objects apart in messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from floydd.errors import InvalidSpec

__all__ = ["ObjectId", "ID_SIZE"]

ID_SIZE = 32
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True, order=True)
class ObjectId:
    """The name of one stored object: 32 raw bytes."""

    raw: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.raw, bytes) or len(self.raw) != ID_SIZE:
            raise InvalidSpec(f"an object id is {ID_SIZE} bytes, got {self.raw!r:.80}")

    @classmethod
    def from_hex(cls, text: str) -> ObjectId:
        """Parse 64 hex digits; ``InvalidSpec`` says what was wrong."""
        if not isinstance(text, str) or len(text) != 2 * ID_SIZE or not _HEX.issuperset(text.lower()):
            raise InvalidSpec(f"{text!r:.80} is not an object id",
                              hint=f"an object id is {2 * ID_SIZE} hex digits")
        return cls(bytes.fromhex(text))

    @property
    def hex(self) -> str:
        return self.raw.hex()

    @property
    def short(self) -> str:
        return self.raw[:6].hex()

    def __str__(self) -> str:
        return self.raw.hex()

    def __repr__(self) -> str:
        return f"ObjectId({self.short})"
