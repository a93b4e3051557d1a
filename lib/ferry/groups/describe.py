"""Describe groups on one cluster: positions, lag and time lag.

Extract functions talk to the cluster in bulk (one ListOffsets pair for every partition of
every selected group, one read of each record needed for time lag); `with_lag` is a pure
DataFrame transform shared with `lag-snapshot`.

Time lag is how old the next unread record is: now − timestamp of the first record at or
after the committed offset (log start if the committed offset fell off the log), 0 when the
group is caught up, null when nothing is committed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from ferry import kafka
from ferry.config import ReaderConfig
from ferry.groups import positions
from ferry.groups.selection import is_selected
from ferry.kafka.cluster import Cluster
from ferry.kafka.groups import GroupInfo
from ferry.keys import TopicPartitionKey
from ferry.output import emit, emit_json
from ferry.session import local_df

POSITIONS_SCHEMA = StructType(
    [
        StructField("group", StringType(), False),
        StructField("group_state", StringType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("committed_offset", LongType(), True),
        StructField("member_id", StringType(), True),
        StructField("client_id", StringType(), True),
        StructField("host", StringType(), True),
    ]
)
BOUNDS_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("log_start_offset", LongType(), False),
        StructField("log_end_offset", LongType(), False),
    ]
)
NEXT_RECORDS_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("position", LongType(), False),
        StructField("next_offset", LongType(), True),
        StructField("next_timestamp_ms", LongType(), True),
    ]
)
DESCRIBE_COLUMNS = [
    "group",
    "group_state",
    "topic",
    "partition",
    "committed_offset",
    "log_start_offset",
    "log_end_offset",
    "lag",
    "time_lag_ms",
    "member_id",
    "client_id",
    "host",
]
TOTAL_COLUMNS = ["group", "group_state", "partition_count", "lag", "time_lag_ms"]
LIST_COLUMNS = ["group", "state", "protocol_type", "members", "topics", "partitions"]


# ---------------------------------------------------------------------------------- extract


@dataclass
class GroupsSnapshot:
    """What the cluster says about a set of groups right now."""

    infos: dict[str, GroupInfo]
    committed: dict[str, dict[TopicPartitionKey, int]]
    topic_partitions: dict[str, int] = field(default_factory=dict)


def fetch_groups(cluster: Cluster, groups: Sequence[str]) -> GroupsSnapshot:
    """States from the group listing; only groups that can have members are described."""
    return GroupsSnapshot(
        infos=kafka.group_infos(cluster, groups, kafka.list_group_infos(cluster)),
        committed=kafka.committed_offsets(cluster, groups),
        topic_partitions=kafka.list_topics(cluster, include_internal=True),
    )


def emit_list(groups: Sequence[str], state: GroupsSnapshot, fmt: str) -> None:
    """`groups list` on stdout: one row per group, its state, members and what it committed."""
    rows = []
    for group in groups:
        info, committed = state.infos[group], state.committed.get(group, {})
        rows.append(
            {
                "group": group,
                "state": info.state,
                "protocol_type": info.protocol_type,
                "members": len(info.members),
                "topics": len({t for t, _ in committed}),
                "partitions": len(committed),
            }
        )
    emit(rows, LIST_COLUMNS, fmt)


def position_rows(state: GroupsSnapshot, topic_pattern: str | None = None) -> list[dict]:
    """One row per group × partition that is committed or assigned to a member."""
    rows = []
    for group in sorted(state.infos):
        info = state.infos[group]
        owners = {tp: m for m in info.members for tp in m.get("assignment", ())}
        keys = set(state.committed.get(group, {})) | set(owners)
        for topic, partition in sorted(keys):
            if not is_selected(topic, topic_pattern):
                continue
            member = owners.get((topic, partition), {})
            rows.append(
                {
                    "group": group,
                    "group_state": info.state,
                    "topic": topic,
                    "partition": partition,
                    "committed_offset": state.committed.get(group, {}).get((topic, partition)),
                    "member_id": member.get("member_id"),
                    "client_id": member.get("client_id"),
                    "host": member.get("host"),
                }
            )
    return rows


def read_positions(
    spark: SparkSession | Callable[[], SparkSession],
    cluster: Cluster,
    rows: Sequence[Mapping],
    reader: ReaderConfig,
    progress: Callable[[str], None] | None = None,
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(positions_df, bounds_df, next_records_df) for the rows of `position_rows`.

    Each partition's watermarks are asked once, and each distinct position's next record is
    found once however many groups sit there, reading the positions of a partition together
    (`ferry.groups.positions`: one span per cluster of nearby positions, not one seek per position).
    `spark` may be a callable giving the session (`ferry.session.start_session`): it is asked
    for only once Kafka has been read, so a session starting in the background overlaps the reads.
    """
    keys = sorted({(r["topic"], r["partition"]) for r in rows})
    bounds = kafka.watermarks(cluster, keys)
    wanted: set[tuple[str, int, int]] = set()
    for r in rows:
        committed = r["committed_offset"]
        if committed is None:
            continue
        start, end = bounds[(r["topic"], r["partition"])]
        position = max(committed, start)
        if position < end:
            wanted.add((r["topic"], r["partition"], position))
    found = positions.next_records(spark, cluster, wanted, progress=progress)
    next_rows = [(t, p, o, *(found.get((t, p, o)) or (None, None))) for t, p, o in sorted(wanted)]
    session = spark() if callable(spark) else spark
    positions_df = local_df(
        session,
        [tuple(r[c] for c in POSITIONS_SCHEMA.fieldNames()) for r in rows],
        POSITIONS_SCHEMA,
    )
    bounds_df = local_df(
        session, [(t, p, s, e) for (t, p), (s, e) in sorted(bounds.items())], BOUNDS_SCHEMA
    )
    next_df = local_df(session, next_rows, NEXT_RECORDS_SCHEMA)
    return positions_df, bounds_df, next_df


# -------------------------------------------------------------------------------- transform


def with_lag(
    positions_df: DataFrame, bounds_df: DataFrame, next_records_df: DataFrame, now_ms: int
) -> DataFrame:
    """Lag (log end − committed; null when nothing is committed) and time lag per row."""
    effective = F.greatest(F.col("committed_offset"), F.col("log_start_offset"))
    joined = positions_df.join(bounds_df, ["topic", "partition"], "left").withColumn(
        "position", effective
    )
    joined = joined.join(next_records_df, ["topic", "partition", "position"], "left")
    is_caught_up = F.col("position") >= F.col("log_end_offset")
    time_lag = (
        F.when(F.col("committed_offset").isNull(), F.lit(None).cast(LongType()))
        .when(is_caught_up | F.col("next_timestamp_ms").isNull(), F.lit(0).cast(LongType()))
        .otherwise(
            F.greatest(F.lit(0).cast(LongType()), F.lit(now_ms) - F.col("next_timestamp_ms"))
        )
    )
    return joined.select(
        "group",
        "group_state",
        "topic",
        "partition",
        "committed_offset",
        "log_start_offset",
        "log_end_offset",
        (F.col("log_end_offset") - F.col("committed_offset")).alias("lag"),
        time_lag.alias("time_lag_ms"),
        "member_id",
        "client_id",
        "host",
    )


def group_totals(describe_df: DataFrame) -> DataFrame:
    """Per group: partitions, total lag, largest time lag."""
    return (
        describe_df.groupBy("group", "group_state")
        .agg(
            F.count("*").alias("partition_count"),
            F.sum("lag").alias("lag"),
            F.max("time_lag_ms").alias("time_lag_ms"),
        )
        .select("group", "group_state", "partition_count", "lag", "time_lag_ms")
    )


# ------------------------------------------------------------------------------------- load


def emit_describe(describe_df: DataFrame, fmt: str) -> None:
    """`groups describe` on stdout: the partitions then each group's totals (table), one JSON
    object per group holding its partitions (json), or the partitions alone (csv)."""
    detail = [r.asDict() for r in describe_df.orderBy("group", "topic", "partition").collect()]
    if fmt == "csv":
        emit(detail, DESCRIBE_COLUMNS, "csv")
        return
    totals = [r.asDict() for r in group_totals(describe_df).orderBy("group").collect()]
    if fmt == "table":
        emit(detail, DESCRIBE_COLUMNS, "table")
        print()
        emit(totals, TOTAL_COLUMNS, "table")
        return
    by_group = {t["group"]: {**t, "partitions": []} for t in totals}
    for row in detail:
        by_group[row["group"]]["partitions"].append(row)
    emit_json(list(by_group.values()))


def list_or_describe(
    cluster: Cluster,
    verb: str,
    group_pattern: str | None,
    topic_pattern: str | None,
    reader: ReaderConfig,
    fmt: str,
    progress: Callable[[str], None],
    start_session: Callable[[], object],
) -> int:
    """`groups list` and `groups describe` from the group listing to the output; the exit
    code. `start_session()` is called once the groups' offsets are known (describe only): the
    session starts while the log offsets and the positions' records are read."""
    import time

    from ferry.errors import EXIT_OK, NoGroupsError
    from ferry.groups.selection import matching_groups

    names = matching_groups(cluster, group_pattern)
    progress(f"describing {len(names)} groups")
    state = fetch_groups(cluster, names)
    if verb == "list":
        emit_list(names, state, fmt)
        return EXIT_OK
    rows = position_rows(state, topic_pattern)
    if not rows:
        raise NoGroupsError(
            f"no committed or assigned partitions for the selected groups on {cluster.name}"
        )
    found = read_positions(start_session(), cluster, rows, reader, progress)
    emit_describe(with_lag(*found, int(time.time() * 1000)), fmt)
    return EXIT_OK
