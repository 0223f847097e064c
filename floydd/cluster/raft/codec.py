"""Messages to bytes and back (msgpack), for the network driver.

A message is a msgpack array ``[type, frm, to, term, *fields]`` with the fields in
the order the dataclass declares them; entries are ``[term, index, kind, data]`` and
snapshots ``[index, term, voters, learners, data]``. Decoding checks every field's
type, so bytes from a peer either give a well-formed message or raise
:class:`~floydd.cluster.raft.errors.CodecError`. Nothing is pickled.
"""

from __future__ import annotations

from dataclasses import fields

import msgpack

from .errors import CodecError
from .messages import MESSAGE_TYPES, ConfState, Entry, EntryKind, Message, Snapshot, sorted_ids

__all__ = ["encode_message", "decode_message", "encode_entry", "decode_entry",
           "encode_snapshot", "decode_snapshot"]

_CODE = {cls: n for n, cls in enumerate(MESSAGE_TYPES, start=1)}
_CLASS = {n: cls for cls, n in _CODE.items()}
_FIELDS = {cls: tuple(f.name for f in fields(cls) if f.name not in ("frm", "to", "term"))
           for cls in MESSAGE_TYPES}
_BOOL_FIELDS = {"reject", "pre", "transfer"}
_BYTES_FIELDS = {"context"}


def encode_message(m: Message) -> bytes:
    cls = type(m)
    out = [_CODE[cls], m.frm, m.to, m.term]
    for name in _FIELDS[cls]:
        value = getattr(m, name)
        if name == "entries":
            value = [_entry_list(e) for e in value]
        elif name == "snapshot":
            value = _snapshot_list(value)
        out.append(value)
    return msgpack.packb(out, use_bin_type=True)


def decode_message(data: bytes) -> Message:
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise CodecError(f"not msgpack: {exc}") from exc
    if not isinstance(raw, list) or len(raw) < 4:
        raise CodecError("a message is an array [type, frm, to, term, ...]")
    cls = _CLASS.get(raw[0]) if type(raw[0]) is int else None
    if cls is None:
        raise CodecError(f"unknown message type {raw[0]!r}")
    names = _FIELDS[cls]
    if len(raw) != 4 + len(names):
        raise CodecError(f"{cls.__name__} has {len(names)} fields, got {len(raw) - 4}")
    kwargs = {"frm": _node(raw[1]), "to": _node(raw[2]), "term": _uint(raw[3])}
    for name, value in zip(names, raw[4:]):
        if name == "entries":
            if not isinstance(value, list):
                raise CodecError("entries must be an array")
            value = tuple(_entry_from(e) for e in value)
        elif name == "snapshot":
            value = _snapshot_from(value)
        elif name in _BOOL_FIELDS:
            if type(value) is not bool:
                raise CodecError(f"{name} must be a bool")
        elif name in _BYTES_FIELDS:
            if type(value) is not bytes:
                raise CodecError(f"{name} must be bytes")
        else:
            value = _uint(value)
        kwargs[name] = value
    return cls(**kwargs)


def encode_entry(e: Entry) -> bytes:
    return msgpack.packb(_entry_list(e), use_bin_type=True)


def decode_entry(data: bytes) -> Entry:
    try:
        return _entry_from(msgpack.unpackb(data, raw=False))
    except CodecError:
        raise
    except Exception as exc:
        raise CodecError(f"not an entry: {exc}") from exc


def encode_snapshot(s: Snapshot) -> bytes:
    return msgpack.packb(_snapshot_list(s), use_bin_type=True)


def decode_snapshot(data: bytes) -> Snapshot:
    try:
        return _snapshot_from(msgpack.unpackb(data, raw=False))
    except CodecError:
        raise
    except Exception as exc:
        raise CodecError(f"not a snapshot: {exc}") from exc


def encode_conf(conf: ConfState) -> list:
    return [list(sorted_ids(conf.voters)), list(sorted_ids(conf.learners))]


def decode_conf(value) -> ConfState:
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, list) for v in value):
        raise CodecError("a conf state is [voters, learners]")
    try:
        return ConfState(voters=frozenset(_node(n) for n in value[0]),
                         learners=frozenset(_node(n) for n in value[1]))
    except ValueError as exc:
        raise CodecError(str(exc)) from exc


def _entry_list(e: Entry) -> list:
    return [e.term, e.index, int(e.kind), e.data]


def _entry_from(value) -> Entry:
    if not isinstance(value, list) or len(value) != 4:
        raise CodecError("an entry is [term, index, kind, data]")
    term, index, kind, data = value
    if type(data) is not bytes:
        raise CodecError("entry data must be bytes")
    if kind not in (EntryKind.NORMAL, EntryKind.CONF_CHANGE) or type(kind) is not int:
        raise CodecError(f"unknown entry kind {kind!r}")
    return Entry(_uint(term), _uint(index), data, EntryKind(kind))


def _snapshot_list(s: Snapshot) -> list:
    return [s.index, s.term, *encode_conf(s.conf), s.data]


def _snapshot_from(value) -> Snapshot:
    if not isinstance(value, list) or len(value) != 5:
        raise CodecError("a snapshot is [index, term, voters, learners, data]")
    index, term, voters, learners, data = value
    if type(data) is not bytes:
        raise CodecError("snapshot data must be bytes")
    return Snapshot(index=_uint(index), term=_uint(term), conf=decode_conf([voters, learners]),
                    data=data)


def _uint(value) -> int:
    if type(value) is not int or value < 0:
        raise CodecError(f"expected a non-negative int, got {value!r}")
    return value


def _node(value):
    if type(value) is int or (type(value) is str and 0 < len(value) <= 64):
        return value
    raise CodecError(f"a node id is an int or a short string, got {value!r}")
