"""Reconcile: whether the replicator has copied what each group consumed. A group is PENDING
while a source partition's consumed records are not all on the destination: no copy of its
last consumed record (or a later one) was read, that record lies inside the band, and no
destination record read is more than window_after_ms newer than it (docs/matching.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ferry.config import FerryConfig
from ferry.migrate.copies import COPY
from ferry.migrate.discover import Discovery
from ferry.migrate.frontier import Frontier, GroupFrontier
from ferry.session import local_df

PENDING_SCHEMA = StructType(
    [
        StructField("group", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        *(
            StructField(name, LongType(), False)
            for name in ("after_offset", "committed_offset", "band_lo_ms")
        ),
    ]
)


def replication_read(rows: Iterable) -> tuple[dict[tuple[str, int], int], dict[str, int]]:  # noqa: ANN001
    """(destination topic, source partition) → newest source offset a copy was read of;
    destination topic → newest timestamp read."""
    copied: dict[tuple[str, int], int] = {}
    newest: dict[str, int] = {}
    for r in rows:
        if r.src_partition is not None and r.max_copied_offset is not None:
            copied[(r.dst_topic, r.src_partition)] = r.max_copied_offset
        if r.newest_ms is not None:
            newest[r.dst_topic] = max(newest.get(r.dst_topic, r.newest_ms), r.newest_ms)
    return copied, newest


def is_replicated(
    g: GroupFrontier,
    p: int,
    log_start: int,
    copied: Mapping[tuple[str, int], int],
    newest: Mapping[str, int],
    after_ms: int,
) -> bool:
    """Whether every record the group consumed on p is known to be on the destination (see
    the module docstring)."""
    last_ms, last_offset = g.last_consumed_ms[p], g.last_consumed_offset[p]
    if g.committed[p] <= log_start or last_ms is None or last_offset is None:
        return True
    if last_ms < g.band_lo_ms:
        return True  # older than the band: taken as replicated
    if copied.get((g.dst_topic, p), -1) >= last_offset:
        return True  # a copy of it or of a later record of p: p's order puts it before
    return newest.get(g.dst_topic, last_ms) > last_ms + after_ms


def missing_records(  # noqa: PLR0913
    spark: SparkSession,
    frontiers: list[Frontier],
    disc: Discovery,
    copied: Mapping[tuple[str, int], int],
    newest: Mapping[str, int],
    cfg: FerryConfig,
    src_df: DataFrame,
    edges_df: DataFrame,
) -> dict[tuple[str, str], int]:
    """Consumed records of each group's band the replicator has not copied yet."""
    rows = []
    for f in frontiers:
        for g in f.groups:
            for p, c in enumerate(g.committed):
                start = disc.source_bounds[(f.topic, p)][0]
                if not is_replicated(g, p, start, copied, newest, cfg.matching.window_after_ms):
                    after = copied.get((g.dst_topic, p), -1)
                    rows.append((g.group, f.topic, p, after, c, g.band_lo_ms))
    if not rows:
        return {}
    pending_df = local_df(spark, rows, PENDING_SCHEMA)
    records_df = src_df.unionByName(edges_df)
    found = with_missing(records_df, pending_df).collect()
    out = {(r.group, r.topic): r.missing for r in found}
    for group, topic, *_ in rows:  # its last consumed record is known to exist
        out[(group, topic)] = max(1, out.get((group, topic), 0))
    return out


def with_replication(copies_df: DataFrame) -> DataFrame:
    """Per destination topic and source partition: the newest source offset a copy was read
    of (`src_partition` null: records that are not copies), and the newest timestamp read."""
    return copies_df.groupBy("dst_topic", "src_partition").agg(
        F.max(F.when(F.col("kind") == COPY, F.col("src_offset"))).alias("max_copied_offset"),
        F.max("timestamp_ms").alias("newest_ms"),
    )


def _between(offset: Column) -> Column:
    return (offset > F.col("after_offset")) & (offset < F.col("committed_offset"))


def with_missing(src_records_df: DataFrame, pending_df: DataFrame) -> DataFrame:
    """Per group and source topic: consumed records of the band the replicator has not copied
    yet — on each source partition whose copies read stop at `after_offset`, the records read
    after it, before the committed offset and inside the band.

    pending_df: group, topic, partition, after_offset, committed_offset, band_lo_ms."""
    records = src_records_df.select("topic", "partition", "offset", "timestamp_ms").distinct()
    return (
        records.join(F.broadcast(pending_df), ["topic", "partition"])
        .filter(_between(F.col("offset")) & (F.col("timestamp_ms") >= F.col("band_lo_ms")))
        .groupBy("group", "topic")
        .agg(F.count("*").alias("missing"))
        .select("group", "topic", "missing")
    )
