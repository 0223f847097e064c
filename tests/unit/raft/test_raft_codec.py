"""Messages round-trip through msgpack; malformed bytes raise CodecError."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floydd.cluster.raft import (AppendEntries, AppendResponse,
                                 CodecError, ConfState, Entry, EntryKind, Heartbeat,
                                 HeartbeatResponse, InstallSnapshot, ReadIndexRequest,
                                 ReadIndexResponse, RequestVote, Snapshot, TimeoutNow,
                                 VoteResponse, decode_message, encode_message)
from floydd.cluster.raft.codec import decode_entry, decode_snapshot, encode_entry, encode_snapshot
from floydd.cluster.raft.messages import MESSAGE_TYPES

ids = st.one_of(st.integers(0, 2**63 - 1), st.text(min_size=1, max_size=16))
u = st.integers(0, 2**63 - 1)
entries = st.builds(Entry, u, u, st.binary(max_size=64),
                    st.sampled_from([EntryKind.NORMAL, EntryKind.CONF_CHANGE]))
confs = st.builds(lambda v, l: ConfState(voters=frozenset(v), learners=frozenset(l) - frozenset(v)),
                  st.lists(ids, max_size=5), st.lists(ids, max_size=3))
snapshots = st.builds(Snapshot, index=u, term=u, conf=confs, data=st.binary(max_size=64))
head = dict(frm=ids, to=ids, term=u)
messages = st.one_of(
    st.builds(AppendEntries, **head, index=u, log_term=u,
              entries=st.lists(entries, max_size=4).map(tuple), commit=u),
    st.builds(AppendResponse, **head, index=u, reject=st.booleans(), reject_hint=u, log_term=u),
    st.builds(RequestVote, **head, index=u, log_term=u, pre=st.booleans(), transfer=st.booleans()),
    st.builds(VoteResponse, **head, reject=st.booleans(), pre=st.booleans()),
    st.builds(Heartbeat, **head, commit=u, context=st.binary(max_size=16)),
    st.builds(HeartbeatResponse, **head, context=st.binary(max_size=16)),
    st.builds(InstallSnapshot, **head, snapshot=snapshots),
    st.builds(TimeoutNow, **head),
    st.builds(ReadIndexRequest, **head, context=st.binary(max_size=16)),
    st.builds(ReadIndexResponse, **head, index=u, context=st.binary(max_size=16)),
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_every_message_round_trips(m) -> None:
    data = encode_message(m)
    assert isinstance(data, bytes)
    assert decode_message(data) == m


def test_the_strategy_covers_every_message_type() -> None:
    covered = {AppendEntries, AppendResponse, RequestVote, VoteResponse, Heartbeat,
               HeartbeatResponse, InstallSnapshot, TimeoutNow, ReadIndexRequest, ReadIndexResponse}
    assert covered == set(MESSAGE_TYPES)


@given(entries)
def test_entries_round_trip(e) -> None:
    assert decode_entry(encode_entry(e)) == e


@given(snapshots)
def test_snapshots_round_trip(s) -> None:
    assert decode_snapshot(encode_snapshot(s)) == s


@pytest.mark.parametrize("raw", [
    b"", b"\xc1", msgpack.packb({"a": 1}), msgpack.packb([99, 1, 2, 3]),
    msgpack.packb([1, 1, 2, 3]),                                   # AppendEntries, no fields
    msgpack.packb([8, 1, 2, -1]),                                  # negative term
    msgpack.packb([8, 1.5, 2, 3]),                                 # float id
    msgpack.packb([8, "x" * 65, 2, 3]),                            # id too long
    msgpack.packb([4, 1, 2, 3, 1, 0]),                             # bool as int
    msgpack.packb([5, 1, 2, 3, 0, "ctx"]),                         # context not bytes
    msgpack.packb([1, 1, 2, 3, 0, 0, [[1, 1, 7, b""]], 0]),        # unknown entry kind
    msgpack.packb([7, 1, 2, 3, [0, 0, [1], [1], b""]]),            # voter also learner
])
def test_malformed_bytes_raise_codec_error(raw) -> None:
    with pytest.raises(CodecError):
        decode_message(raw)


@given(st.binary(max_size=64))
def test_random_bytes_never_crash_the_decoder(raw) -> None:
    try:
        decode_message(raw)
    except CodecError:
        pass
