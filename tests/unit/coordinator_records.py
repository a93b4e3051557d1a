"""Coordinator records in Kafka's binary layout: fixtures for the decoder's unit tests.

Written from Kafka's message schemas (group-coordinator/src/main/resources/common/message/*.json
and the consumer protocol's ConsumerProtocolAssignment.json), independently of the decoder in
`ferry.offsets_topic`, and pinned by literal byte strings in test_offsets_topic.py. Nothing
writes these into a cluster: the integration tests decode the records Apache Kafka's own group
coordinator writes (tests/integration/test_decode_offsets.py).
"""

from __future__ import annotations

import struct


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def string(s: str | None, compact: bool = False) -> bytes:
    if s is None:
        return uvarint(0) if compact else i16(-1)
    raw = s.encode()
    return (uvarint(len(raw) + 1) if compact else i16(len(raw))) + raw


def blob(b: bytes | None, compact: bool = False) -> bytes:
    if b is None:
        return uvarint(0) if compact else i32(-1)
    return (uvarint(len(b) + 1) if compact else i32(len(b))) + b


def array(items: list[bytes], compact: bool = False) -> bytes:
    return (uvarint(len(items) + 1) if compact else i32(len(items))) + b"".join(items)


def tagged(fields: dict[int, bytes] | None = None) -> bytes:
    fields = fields or {}
    return uvarint(len(fields)) + b"".join(
        uvarint(tag) + uvarint(len(data)) + data for tag, data in sorted(fields.items())
    )


def commit_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    return i16(version) + string(group) + string(topic) + i32(partition)


def commit_value(
    version: int,
    offset: int,
    metadata: str,
    commit_ts: int,
    leader_epoch: int = -1,
    expire_ts: int = -1,
    tags: dict[int, bytes] | None = None,
) -> bytes:
    flexible = version >= 4
    out = i16(version) + i64(offset)
    if version >= 3:
        out += i32(leader_epoch)
    out += string(metadata, flexible) + i64(commit_ts)
    if version == 1:
        out += i64(expire_ts)
    if flexible:
        out += tagged(tags)
    return out


def group_key(group: str, version: int = 2) -> bytes:
    return i16(version) + string(group)


def assignment(topics: list[tuple[str, list[int]]], version: int = 0, user_data=None) -> bytes:
    return (
        i16(version)
        + array([string(t) + array([i32(p) for p in ps]) for t, ps in topics])
        + blob(user_data)
    )


def member(
    version: int,
    member_id: str,
    client_id: str,
    host: str,
    session_ms: int,
    assigned: bytes,
    instance_id: str | None = None,
    rebalance_ms: int = 0,
    subscription: bytes = b"\x00\x01sub",
    tags: dict[int, bytes] | None = None,
) -> bytes:
    flexible = version >= 4
    out = string(member_id, flexible)
    if version >= 3:
        out += string(instance_id, flexible)
    out += string(client_id, flexible) + string(host, flexible)
    if version >= 1:
        out += i32(rebalance_ms)
    out += i32(session_ms) + blob(subscription, flexible) + blob(assigned, flexible)
    if flexible:
        out += tagged(tags)
    return out


def group_value(
    version: int,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    members: list[bytes],
    state_ts: int = -1,
    tags: dict[int, bytes] | None = None,
) -> bytes:
    flexible = version >= 4
    out = i16(version) + string(protocol_type, flexible) + i32(generation)
    out += string(protocol, flexible) + string(leader, flexible)
    if version >= 2:
        out += i64(state_ts)
    out += array(members, flexible)
    if flexible:
        out += tagged(tags)
    return out
