"""Partition log offsets: log start and log end (`watermarks`), or the offset any ListOffsets
spec answers (a timestamp lookup), for many partitions in bulk requests retried as one
operation (`ferry.kafka.retry`).

A ListOffsets request carries one spec per partition, so N timestamps of one partition take N
requests (`timestamp_offsets`: one per broker per layer, every layer in flight at once)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ferry.kafka.cluster import Cluster, ClusterError
from ferry.kafka.failures import is_leader_lookup, kafka_error, lost_connection
from ferry.kafka.retry import checked_future, gather
from ferry.keys import TopicPartitionKey

OFFSET_INVALID = -1001  # librdkafka's "no offset"


def watermarks(
    cluster: Cluster, partitions: Iterable[TopicPartitionKey]
) -> dict[TopicPartitionKey, tuple[int, int]]:
    """(log start, log end) for each partition: both bulk ListOffsets requests in flight
    together, retried as one operation (one `admin.retry_ms` budget)."""
    from confluent_kafka.admin import OffsetSpec

    keys = sorted(set(partitions))
    if not keys:
        return {}
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest()}
    answers = _list_offsets(
        cluster, {(t, p, end): specs[end] for t, p in keys for end in ("earliest", "latest")}
    )
    return {(t, p): (answers[(t, p, "earliest")], answers[(t, p, "latest")]) for t, p in keys}


def list_offsets(
    cluster: Cluster, label: str, specs: Mapping[TopicPartitionKey, object]
) -> dict[TopicPartitionKey, int]:
    """The offset each partition's spec (an OffsetSpec) answers; `label` names it in errors."""
    answers = _list_offsets(cluster, {(t, p, label): spec for (t, p), spec in specs.items()})
    return {(t, p): offset for (t, p, _label), offset in answers.items()}


def timestamp_offsets(
    cluster: Cluster, targets: Iterable[tuple[str, int, int]]
) -> dict[tuple[str, int, int], int]:
    """The broker's answer (first offset whose record or marker is at least as new; -1 when
    none is) for each (topic, partition, timestamp ms). A partition's i-th distinct timestamp
    goes in the i-th request (a layer: every partition in it, one request per broker); all
    layers are in flight together and retried as one operation."""
    from confluent_kafka.admin import OffsetSpec

    per_tp: dict[TopicPartitionKey, list[int]] = {}
    for t, p, ts in sorted(set(targets)):
        per_tp.setdefault((t, p), []).append(ts)
    # To the protocol a negative timestamp is a spec (-1 latest, -2 earliest): a window's start
    # before 1970 asks for the first record with any timestamp instead.
    specs = {
        (t, p, f"timestamp#{i}"): OffsetSpec.for_timestamp(max(ts, 0))
        for (t, p), stamps in per_tp.items()
        for i, ts in enumerate(stamps)
    }
    answers = _list_offsets(cluster, specs)
    return {
        (t, p, ts): answers[(t, p, f"timestamp#{i}")]
        for (t, p), stamps in per_tp.items()
        for i, ts in enumerate(stamps)
    }


def _list_offsets(
    cluster: Cluster, specs: Mapping[tuple[str, int, str], object]
) -> dict[tuple[str, int, str], int]:
    """ListOffsets for (topic, partition, label) keys: one request per label, all in flight
    together, retried as one operation."""
    from confluent_kafka import TopicPartition

    def submit(admin, keys):  # noqa: ANN001, ANN202
        futures = {}
        by_label: dict[str, list[tuple[str, int, str]]] = {}
        for key in keys:
            by_label.setdefault(key[2], []).append(key)
        for label, labelled in sorted(by_label.items()):
            asked = {TopicPartition(t, p): specs[(t, p, label)] for t, p, _ in labelled}
            answers = admin.list_offsets(asked, request_timeout=cluster.attempt_s)
            futures.update(
                {
                    (tp.topic, tp.partition, label): checked_future(f, _offset)
                    for tp, f in answers.items()
                }
            )
        return futures

    def describe(key: tuple[str, int, str]) -> str:
        return f"list {key[2].split('#')[0]} offsets of {key[0]}[{key[1]}]"  # no layer number

    def recheck(failures: dict[tuple[str, int, str], BaseException]) -> tuple[dict, dict]:
        # A leader lookup that failed may be a partition that does not exist: not worth
        # retrying for the whole budget. Unknown when the metadata cannot be read either.
        lookups = [k for k, e in failures.items() if is_leader_lookup(kafka_error(e))]
        if not lookups:
            return {}, {}
        try:
            metadata = cluster.admin().list_topics(timeout=cluster.attempt_s)
        except Exception:  # noqa: BLE001 - the retry that follows will say what failed
            return {}, {}
        missing = {k for k in lookups if not _exists(metadata, (k[0], k[1]))}
        return {}, {
            k: ClusterError(f"{cluster.name}: {describe(k)} failed: no such partition")
            for k in missing
        }

    answers = gather(cluster, describe, list(specs), submit, recheck)
    return {k: a.offset for k, a in answers.items()}  # type: ignore[attr-defined]


def _offset(answer):  # noqa: ANN001, ANN202 - a ListOffsetsResultInfo
    # A ListOffsets request whose connection drops can be answered as a success with offset
    # OFFSET_INVALID (-1001) and no error (confluent-kafka 2.x, reproduced through the fault
    # proxy): a log end of -1001 would make every lag wrong and every read empty.
    if answer.offset == OFFSET_INVALID:
        raise lost_connection("ListOffsets answered no offset")
    return answer


def _exists(metadata, key: TopicPartitionKey) -> bool:  # noqa: ANN001 - ClusterMetadata
    from confluent_kafka import KafkaError

    topic = metadata.topics.get(key[0])
    if topic is None:
        return False
    if topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return False
    return topic.error is not None or key[1] in topic.partitions
