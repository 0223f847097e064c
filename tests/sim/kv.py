"""The simulator's state machine: a tiny key-value register store.

Commands are bytes ``b"client seq key value"`` (ASCII); the state is a dict
key -> value (ints), snapshotted with msgpack.
"""

from __future__ import annotations

import msgpack


def encode_put(client: int, seq: int, key: int, value: int) -> bytes:
    return b"%d %d %d %d" % (client, seq, key, value)


def decode_put(data: bytes) -> tuple[int, int, int, int]:
    client, seq, key, value = data.split()
    return int(client), int(seq), int(key), int(value)


class KV:
    __slots__ = ("data",)

    def __init__(self, data: dict | None = None) -> None:
        self.data: dict[int, int] = data if data is not None else {}

    def apply(self, data: bytes) -> None:
        if data:
            _client, _seq, key, value = decode_put(data)
            self.data[key] = value

    def snapshot(self) -> bytes:
        return msgpack.packb(self.data)

    @classmethod
    def restore(cls, blob: bytes) -> "KV":
        return cls(msgpack.unpackb(blob, strict_map_key=False) if blob else {})
