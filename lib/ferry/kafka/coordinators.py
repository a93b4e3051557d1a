"""Group coordinators: which `__consumer_offsets` partition (and so which coordinator) holds
a group, waiting until the coordinators an offset fetch will reach answer, and choosing one
group per coordinator to probe. Used by `ferry.kafka.groups`' offset fetches, in the worker
process that runs them (`ferry.kafka.isolated`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ferry.kafka.cluster import Cluster, ClusterError
from ferry.kafka.failures import is_transient
from ferry.kafka.retry import call_with_retries, retry_each


def probe_groups(groups: Sequence[str], fetched: Sequence[str], count: int) -> list[str]:
    """One group not in `fetched` per `__consumer_offsets` partition (of `count`; 0: not
    known) that none of `fetched` falls in: its fetch (answered empty: the group is not
    listed) proves that coordinator answers OffsetFetch, as a fetch of every group would. A
    coordinator that answers a describe but refuses the fetch then fails the call before
    anything is written, not the read-back of a write."""
    if not count:  # the partitions are not known: one group at all
        return [g for g in groups if g not in fetched][:1]
    covered = {partition_for(g, count) for g in fetched}
    probes: dict[int, str] = {}
    for group in groups:
        p = partition_for(group, count)
        if p not in covered and p not in probes:
            probes[p] = group
    return list(probes.values())


OFFSETS_TOPIC = "__consumer_offsets"

# Per cluster (by name), the `__consumer_offsets` partitions whose coordinator answered in
# this process, and how many partitions the topic has: asked once per process, as long as the
# process lives (a worker that crashed is gone, and its successor asks again).
_answering: dict[str, tuple[int, set[int]]] = {}


def offsets_partitions_known(cluster: Cluster) -> int:
    """How many partitions `__consumer_offsets` has, once a coordinator of `cluster` answered
    in this process (0 before)."""
    return _answering.get(cluster.name, (0, set()))[0]


def await_coordinators(
    cluster: Cluster,
    groups: Sequence[str],
    deadline: float,
    errors: dict[str, ClusterError] | None = None,
) -> None:
    """Wait until the coordinator of every group's `__consumer_offsets` partition answers a
    group read, with the one retry loop, before an offset fetch is sent there: librdkafka's
    AdminClient crashes on an offset fetch answered NOT_COORDINATOR, but a describe answered so
    is just an error. One group per partition is described (`partition_for`, the broker's own
    rule), so at most as many requests as the topic has partitions, once per process. On a
    fresh cluster the first describe's FindCoordinator creates the topic.

    A coordinator still not answering when `deadline` comes fails the call; with `errors`,
    it fails the groups it coordinates instead (all of them when not even the topic's
    partitions are known). Any other failure of a describe (not allowed, say) is left to the
    fetch to report."""
    known = _answering.get(cluster.name)
    if known is None:
        first = groups[0]
        if not _answered(cluster, {0: first}, deadline, lambda _g: groups, errors, None):
            return
        count = _offsets_partitions(cluster, deadline)
        known = _answering[cluster.name] = (count, {partition_for(first, count)})
    count, answering = known
    by_partition: dict[int, list[str]] = {}
    for group in groups:
        by_partition.setdefault(partition_for(group, count), []).append(group)
    asked = {p: members[0] for p, members in by_partition.items() if p not in answering}
    if asked:
        coordinated = lambda g: by_partition[partition_for(g, count)]  # noqa: E731
        answering.update(_answered(cluster, asked, deadline, coordinated, errors, count))


def _answered(
    cluster: Cluster,
    asked: dict[int, str],
    deadline: float,
    coordinated_with: Callable[[str], Sequence[str]],
    errors: dict[str, ClusterError] | None,
    count: int | None,
) -> set[int]:
    """Describe one group per partition (`asked`) until each is answered (or fails for
    another reason than a coordinator not answering yet); returns the partitions answered. A
    coordinator still not answering when the budget ends raises, or with `errors` fails the
    groups `coordinated_with` names (those of its partition; `count` partitions, when known,
    name it)."""

    def coordinator(group: str) -> str:
        if count is None:
            return f"the coordinator of group {group}"
        return f"the coordinator of {OFFSETS_TOPIC}[{partition_for(group, count)}]"

    answers, failed = retry_each(
        cluster,
        lambda g: f"fetch committed offsets ({coordinator(g)} not answering)",
        list(asked.values()),
        lambda admin, keys: admin.describe_consumer_groups(keys, request_timeout=cluster.attempt_s),
        deadline=deadline,
    )
    for group, error in failed.items():
        if not is_transient(error.__cause__):
            continue  # not a coordinator that is not ready: the fetch reports it
        if errors is None:
            raise error
        errors.update(dict.fromkeys(coordinated_with(group), error))
    return {p for p, g in asked.items() if g in answers}


def _offsets_partitions(cluster: Cluster, deadline: float) -> int:
    """How many partitions `__consumer_offsets` has, once every one of them has a leader."""
    from confluent_kafka import KafkaError, KafkaException

    def count(admin) -> int:  # noqa: ANN001
        topic = admin.list_topics(topic=OFFSETS_TOPIC, timeout=cluster.attempt_s).topics.get(
            OFFSETS_TOPIC
        )
        if (
            topic is None
            or topic.error is not None
            or not topic.partitions
            or any(p.leader < 0 for p in topic.partitions.values())
        ):
            raise KafkaException(
                KafkaError(
                    KafkaError.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} lacks partition leaders"
                )
            )
        return len(topic.partitions)

    return call_with_retries(cluster, f"read the partitions of {OFFSETS_TOPIC}", count, deadline)


def partition_for(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition that holds `group` (and whose leader coordinates
    it): the broker's rule, Java's `String.hashCode` of the group id, made non-negative as
    Kafka's `Utils.abs` does (the smallest int becomes 0), modulo the partition count."""
    code = 0
    data = group.encode("utf-16-be")  # Java hashes UTF-16 code units
    for i in range(0, len(data), 2):
        code = (31 * code + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    if code >= 1 << 31:
        code -= 1 << 32
    return (0 if code == -(1 << 31) else abs(code)) % partitions
