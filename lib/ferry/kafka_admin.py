"""Driver-side cluster metadata and group operations, in bulk, with one-line errors.

Everything here talks to a cluster through confluent-kafka's AdminClient or a plain assigned
consumer (never a group member). Calls are issued for many partitions or groups at once and
awaited together, so a thousand groups cost a handful of round trips, not a thousand.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

TopicPartitionKey = tuple[str, int]

ACTIVE_STATES = {
    "STABLE",
    "PREPARING_REBALANCE",
    "COMPLETING_REBALANCE",
    "ASSIGNING",
    "RECONCILING",
}
INACTIVE_STATES = {"EMPTY", "DEAD"}


class ClusterError(RuntimeError):
    """A cluster call failed; the message names the cluster and what was asked."""


@dataclass(frozen=True)
class Cluster:
    """A cluster's client properties plus a name for messages."""

    name: str
    conf: Mapping[str, str]
    timeout_s: float = 30.0
    _admin: object = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_config(cls, section: str, conf: Mapping[str, str], timeout_ms: int = 30_000):
        return cls(
            f"{section} ({conf.get('bootstrap.servers', '?')})", dict(conf), timeout_ms / 1000
        )

    def admin(self):  # noqa: ANN201 - confluent_kafka type
        """One AdminClient per cluster: its futures die with it, so it must outlive them."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            client = AdminClient({**self.conf, "log_level": 0, "error_cb": lambda _err: None})
            object.__setattr__(self, "_admin", client)
        return self._admin

    def consumer(self):  # noqa: ANN201
        from confluent_kafka import Consumer

        return Consumer(
            {
                **self.conf,
                "group.id": "ferry-probe",  # required by librdkafka; never joined or committed
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                # Probes often land at a partition's end; don't let the broker sit on them.
                "fetch.wait.max.ms": 10,
                "log_level": 0,
                "error_cb": lambda _err: None,
            }
        )


@dataclass(frozen=True)
class GroupInfo:
    group: str
    state: str  # upper-case Kafka state name, e.g. EMPTY, STABLE, DEAD, UNKNOWN
    protocol_type: str | None = None
    members: tuple[dict, ...] = field(default_factory=tuple)

    @property
    def is_inactive(self) -> bool:
        return self.state in INACTIVE_STATES


def _result(cluster: Cluster, what: str, future, timeout: float | None = None):  # noqa: ANN001, ANN202
    try:
        return future.result(timeout=timeout or cluster.timeout_s)
    except Exception as exc:
        raise ClusterError(f"{cluster.name}: {what} failed: {_short(exc)}") from exc


def _short(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    if hasattr(exc.args[0] if exc.args else None, "str"):
        text = exc.args[0].str()
    return text.splitlines()[0] if text else type(exc).__name__


def _is_transport_error(exc: BaseException | None) -> bool:
    from confluent_kafka import KafkaError

    err = exc.args[0] if exc is not None and exc.args else None
    codes = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.NETWORK_EXCEPTION)
    return isinstance(err, KafkaError) and (err.code() in codes or err.retriable())


def check_reachable(cluster: Cluster) -> None:
    """Fail fast, naming the cluster, when no broker answers within the timeout."""
    try:
        cluster.admin().list_topics(timeout=cluster.timeout_s)
    except Exception as exc:
        raise ClusterError(
            f"cannot reach {cluster.name} within {cluster.timeout_s:g}s: {_short(exc)}"
        ) from exc


def list_topics(cluster: Cluster, include_internal: bool = False) -> dict[str, int]:
    """Topic name → partition count."""
    try:
        metadata = cluster.admin().list_topics(timeout=cluster.timeout_s)
    except Exception as exc:
        raise ClusterError(f"cannot reach {cluster.name}: {_short(exc)}") from exc
    return {
        name: len(t.partitions)
        for name, t in metadata.topics.items()
        if t.error is None and (include_internal or not name.startswith("__"))
    }


def watermarks(
    cluster: Cluster, partitions: Iterable[TopicPartitionKey]
) -> dict[TopicPartitionKey, tuple[int, int]]:
    """(log start, log end) for each partition, from two bulk ListOffsets requests."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    keys = sorted(set(partitions))
    if not keys:
        return {}
    admin = cluster.admin()
    answers = {}
    for label, spec in (("earliest", OffsetSpec.earliest()), ("latest", OffsetSpec.latest())):
        futures = admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in keys},
            request_timeout=cluster.timeout_s,
        )
        answers[label] = {
            (tp.topic, tp.partition): _result(
                cluster, f"list {label} offsets of {tp.topic}[{tp.partition}]", f
            ).offset
            for tp, f in futures.items()
        }
    return {k: (answers["earliest"][k], answers["latest"][k]) for k in keys}


def first_records_at(
    cluster: Cluster,
    positions: Mapping[TopicPartitionKey, int],
    consumer=None,  # noqa: ANN001
) -> dict[TopicPartitionKey, tuple[int, int] | None]:
    """For each partition, (offset, timestamp ms) of the first record at or after the given
    offset, or None when the partition has nothing there. One consumer, all partitions at once.
    """
    from confluent_kafka import KafkaError, TopicPartition

    if not positions:
        return {}
    own = consumer is None
    consumer = consumer or cluster.consumer()
    found: dict[TopicPartitionKey, tuple[int, int] | None] = {}
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        deadline = time.monotonic() + cluster.timeout_s
        while len(found) < len(positions):
            if time.monotonic() > deadline:
                missing = ", ".join(f"{t}[{p}]" for t, p in sorted(set(positions) - set(found))[:3])
                raise ClusterError(f"{cluster.name}: timed out reading {missing}")
            # consume() waits for num_messages or the timeout: ask for what is still missing.
            for msg in consumer.consume(num_messages=len(positions) - len(found), timeout=0.05):
                key = (msg.topic(), msg.partition())
                if key in found or key not in positions:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        found[key] = None
                        consumer.pause([TopicPartition(*key)])
                        continue
                    raise ClusterError(f"{cluster.name}: reading {key[0]}[{key[1]}]: {err}")
                if msg.offset() < positions[key]:
                    continue
                found[key] = (msg.offset(), msg.timestamp()[1])
                consumer.pause([TopicPartition(*key)])
    finally:
        if own:
            consumer.close()
        else:
            # Paused flags outlive an assignment in librdkafka; clear them for the next round.
            consumer.resume([TopicPartition(t, p) for t, p in positions])
            consumer.unassign()
    return found


def offsets_for_timestamps(
    cluster: Cluster,
    targets: Mapping[TopicPartitionKey, int],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]] | None = None,
) -> dict[TopicPartitionKey, int | None]:
    """Offset of the first record whose timestamp is >= the target, or None when no record is
    that new (callers use log end then, like kafka-consumer-groups).

    The broker's ListOffsets answer is only trusted as a lower bound (some brokers answer the
    log start); the answer is then narrowed by a binary search over single-record reads, all
    partitions in lockstep, and confirmed by reading the records it lands on. Assumes
    timestamps that mostly grow with offsets (LogAppendTime, or CreateTime from in-order
    producers); with badly shuffled CreateTime, widen the matching windows.
    """
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    if not targets:
        return {}
    bounds = dict(bounds or watermarks(cluster, targets))
    admin = cluster.admin()
    futures = admin.list_offsets(
        {TopicPartition(t, p): OffsetSpec.for_timestamp(ts) for (t, p), ts in targets.items()},
        request_timeout=cluster.timeout_s,
    )
    lo: dict[TopicPartitionKey, int] = {}
    hi: dict[TopicPartitionKey, int] = {}
    for tp, fut in futures.items():
        key = (tp.topic, tp.partition)
        start, end = bounds[key]
        answer = _result(cluster, f"offset for timestamp of {tp.topic}[{tp.partition}]", fut).offset
        # The broker's answer bounds the search from below; -1 means "no such record".
        lo[key] = max(start, answer) if answer is not None and answer >= 0 else start
        hi[key] = end
    consumer = cluster.consumer()
    try:
        # Invariant: records before lo[key] are older than the target; the first record at or
        # after hi[key] is at least as new as the target, or there is none.
        while True:
            probes = {k: (lo[k] + hi[k]) // 2 for k in targets if lo[k] < hi[k]}
            if not probes:
                break
            seen = first_records_at(cluster, probes, consumer)
            for key, mid in probes.items():
                record = seen.get(key)
                if record is None or record[1] >= targets[key]:
                    hi[key] = mid  # the first record at or after mid is new enough (or absent)
                else:
                    lo[key] = record[0] + 1
        # lo == hi now: confirm by reading the record there (it may be a gap, so read forward).
        confirm = first_records_at(
            cluster, {k: lo[k] for k in targets if lo[k] < bounds[k][1]}, consumer
        )
    finally:
        consumer.close()
    result: dict[TopicPartitionKey, int | None] = {}
    for key in targets:
        record = confirm.get(key)
        result[key] = record[0] if record is not None and record[1] >= targets[key] else None
    return result


def list_groups(cluster: Cluster) -> list[str]:
    """All consumer group ids the cluster knows."""
    result = _result(
        cluster,
        "list consumer groups",
        cluster.admin().list_consumer_groups(request_timeout=cluster.timeout_s),
    )
    return sorted({g.group_id for g in result.valid})


def describe_groups(cluster: Cluster, groups: Sequence[str]) -> dict[str, GroupInfo]:
    """State, protocol type and members of each group (members may be empty on some brokers)."""
    if not groups:
        return {}
    futures = cluster.admin().describe_consumer_groups(
        list(groups), request_timeout=cluster.timeout_s
    )
    out: dict[str, GroupInfo] = {}
    for group, fut in futures.items():
        desc = _result(cluster, f"describe group {group}", fut)
        state = getattr(desc.state, "name", str(desc.state)).upper()
        members = tuple(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "group_instance_id": getattr(m, "group_instance_id", None),
                "assignment": sorted(
                    (tp.topic, tp.partition)
                    for tp in (m.assignment.topic_partitions if m.assignment else [])
                ),
            }
            for m in desc.members or []
        )
        ptype = getattr(desc, "protocol_type", None)
        if ptype is None:
            ptype = "consumer" if getattr(desc, "is_simple_consumer_group", False) is False else ""
        out[group] = GroupInfo(group, state, ptype, members)
    return out


def committed_offsets(
    cluster: Cluster, groups: Sequence[str]
) -> dict[str, dict[TopicPartitionKey, int]]:
    """Each group's committed offsets (partitions without a commit are left out)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = cluster.admin()
    pending = {
        group: admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=cluster.timeout_s
        )[group]
        for group in groups
    }
    out: dict[str, dict[TopicPartitionKey, int]] = {}
    for group, fut in pending.items():
        answer = _result(cluster, f"fetch committed offsets of group {group}", fut)
        out[group] = {
            (tp.topic, tp.partition): tp.offset
            for tp in answer.topic_partitions
            if tp.offset is not None and tp.offset >= 0 and tp.error is None
        }
    return out


def alter_offsets(cluster: Cluster, group: str, offsets: Mapping[TopicPartitionKey, int]) -> None:
    """Commit the offsets for one group in one request, then read them back and compare."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    )
    # Setting offsets to fixed values is idempotent, so a request lost to a dropped connection
    # is simply sent again (seen on the test broker right after a group is deleted).
    for attempt in range(3):
        fut = cluster.admin().alter_consumer_group_offsets(
            [request], request_timeout=cluster.timeout_s
        )[group]
        try:
            answer = _result(cluster, f"commit offsets of group {group}", fut)
            break
        except ClusterError as exc:
            if attempt == 2 or not _is_transport_error(exc.__cause__):
                raise
            time.sleep(0.2 * (attempt + 1))
    for tp in answer.topic_partitions:
        if tp.error is not None:
            where = f"{tp.topic}[{tp.partition}]"
            raise ClusterError(f"{cluster.name}: commit of group {group} {where}: {tp.error}")
    verify_offsets(cluster, group, offsets)


class GroupActiveError(ClusterError):
    """A group has members (or is rebalancing); Ferry never moves an active group."""


def commit_if_inactive(
    cluster: Cluster, group: str, offsets: Mapping[TopicPartitionKey, int]
) -> None:
    """Commit a whole group's offsets in one request, only if the group is Empty or Dead right
    now, then verify by reading back. The state is checked here, immediately before writing,
    because some brokers accept commits for active groups and the consumers would overwrite
    (or be confused by) what was written.
    """
    info = describe_groups(cluster, [group])[group]
    if not info.is_inactive:
        raise GroupActiveError(f"{cluster.name}: group {group} is {info.state}, not Empty; refused")
    alter_offsets(cluster, group, offsets)


def verify_offsets(cluster: Cluster, group: str, expected: Mapping[TopicPartitionKey, int]) -> None:
    actual = committed_offsets(cluster, [group])[group]
    wrong = [(k, v, actual.get(k)) for k, v in sorted(expected.items()) if actual.get(k) != v]
    if wrong:
        (t, p), want, got = wrong[0]
        raise ClusterError(
            f"{cluster.name}: read-back of group {group} differs at {t}[{p}]: "
            f"expected {want}, found {got} ({len(wrong)} partitions differ)"
        )


def delete_groups(cluster: Cluster, groups: Sequence[str]) -> dict[str, str | None]:
    """Delete groups; returns group → error text (None when deleted)."""
    if not groups:
        return {}
    futures = cluster.admin().delete_consumer_groups(
        list(groups), request_timeout=cluster.timeout_s
    )
    out: dict[str, str | None] = {}
    for group, fut in futures.items():
        try:
            fut.result(timeout=cluster.timeout_s)
            out[group] = None
        except Exception as exc:
            out[group] = _short(exc)
    return out
