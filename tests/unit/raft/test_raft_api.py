"""The public surface of floydd.cluster.raft is pinned (STYLE 6)."""

from __future__ import annotations

import floydd.cluster.raft as raft

PUBLIC = {
    "RaftNode", "RaftConfig", "DEFAULT_CONFIG", "Ready", "SoftState", "Role", "Status",
    "PeerStatus", "NodeId", "Entry", "EntryKind", "HardState", "ConfState", "Snapshot",
    "ReadState", "ConfChange", "ConfChangeOp", "Message", "AppendEntries", "AppendResponse",
    "RequestVote", "VoteResponse", "Heartbeat", "HeartbeatResponse", "InstallSnapshot",
    "TimeoutNow", "ReadIndexRequest", "ReadIndexResponse", "encode_message", "decode_message",
    "Storage", "DurableState", "MemoryStorage", "bootstrap_state", "ProposalDropped",
    "ConfChangeRejected", "CodecError", "RaftInvariantError",
}
NODE_API = {"tick", "step", "campaign", "propose", "propose_conf_change", "transfer_leadership",
            "read_index", "compact", "report_unreachable", "report_snapshot", "status",
            "promotable", "has_ready", "ready", "advance"}


def test_public_names_are_pinned() -> None:
    assert set(raft.__all__) == PUBLIC
    for name in PUBLIC:
        assert hasattr(raft, name), name


def test_node_api_is_pinned() -> None:
    public = {n for n in dir(raft.RaftNode) if not n.startswith("_")}
    assert public == NODE_API


def test_every_timing_knob_is_documented() -> None:
    source = (raft.config.__file__ and open(raft.config.__file__).read())
    for field in raft.RaftConfig.__dataclass_fields__:
        assert f"{field}:" in source and '"""' in source.split(f"{field}:")[1].split("\n")[1], field
