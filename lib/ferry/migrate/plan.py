"""Plan: run matching once per anchor position over what was extracted, and hand back a
`ferry.migrate.model.Plan`, which gives every group partition its position's result.

Only positions cross between Spark and the driver: the distinct (source topic, partition,
committed offset) go in, one matching row per position comes back. Nothing here grows with
groups × partitions except the Python loop that derives the positions from discovery."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from ferry import connect
from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.migrate import anchors, matching, search
from ferry.migrate.context import (
    RecordsAt,
    fingerprints_at,
    hashes_at,
    locate_each,
    with_fingerprint_in,
)
from ferry.migrate.discover import Discovery, discover, exact_partitions
from ferry.migrate.extract import (
    DST_BOUNDS_SCHEMA,
    destination_last_timestamps,
    destination_windows,
    extract_source_records,
    fingerprints_df,
    located_records,
    read_hashed,
    window_offsets,
)
from ferry.migrate.model import (
    Plan,
    Position,
    PositionRows,
    exact_indexes,
    offsets_by_partition,
    row_order,
)
from ferry.migrate.ranges import RangeBook
from ferry.migrate.reconcile import plan_reconciled
from ferry.migrate.slices import collected, in_anchor_order
from ferry.runtime import release
from ferry.session import (
    SparkOrLater,
    arrow_df,
    beside,
    cache_in_background,
    in_background,
    local_df,
    session_of,
)
from ferry.status import GroupStatus, PartitionStatus

__all__ = ["Plan", "build_plan", "replan_pending", "row_order"]

WAIT_INTERVAL_S = 10.0  # `--wait`: between rounds of planning PENDING groups again

POSITIONS_SCHEMA = StructType(
    [
        StructField("src_topic", StringType(), False),
        StructField("src_partition", IntegerType(), False),
        StructField("committed_offset", LongType(), False),
        StructField("dst_topic", StringType(), False),
        StructField("dst_partition", IntegerType(), False),
        StructField("src_log_start_offset", LongType(), False),
        StructField("src_log_end_offset", LongType(), False),
    ]
)
# a position with its anchor (`matching.ANCHORED_COLUMNS`)
ANCHORED_SCHEMA = StructType(
    [
        *POSITIONS_SCHEMA.fields,
        StructField("anchor_kind", StringType(), False),
        StructField("anchor_offset", LongType(), True),
        StructField("anchor_timestamp_ms", LongType(), True),
    ]
)
# and its record's hash and where it is among the records read
# (`ferry.migrate.context.locate`): `matching.ANCHORS_COLUMNS`
ANCHORS_SCHEMA = StructType(
    [
        *ANCHORED_SCHEMA.fields,
        StructField("anchor_sha256", BinaryType(), True),
        StructField("src_at", IntegerType(), True),
        StructField("src_first", IntegerType(), True),
        StructField("src_last", IntegerType(), True),
        StructField("anchor_row", IntegerType(), False),
    ]
)


def anchors_table(
    table: pa.Table,
    at: RecordsAt,
    records: dict[TopicPartitionKey, anchors.PartitionRecords],
    segments: dict[TopicPartitionKey, list[tuple[int, int]]],
) -> pa.Table:
    """Positions with their anchors (`table`, `ANCHORED_SCHEMA` as Arrow; `at`: each row's
    anchor record), each anchor's hash, where it is among the source records read
    (`anchors.records_by_partition`, the intervals read) and its row, all taken on the
    driver (`ANCHORS_SCHEMA` as Arrow)."""
    table = table.append_column("anchor_sha256", hashes_at(records, at))
    for name, column in zip(("src_at", "src_first", "src_last"),
                            locate_each(records, segments, at), strict=True):  # fmt: skip
        table = table.append_column(name, column)
    import numpy as np

    rows = pa.array(np.arange(table.num_rows, dtype=np.int32))
    return table.append_column(matching.ANCHOR_ROW, rows)


def anchored_table(
    found: dict[TopicPartitionKey, anchors.PartitionAnchors],
    renamed: dict[str, str],
    source_bounds: Mapping[TopicPartitionKey, tuple[int, int]],
) -> tuple[pa.Table, RecordsAt]:
    """The positions with their anchors (`found`, per source partition), as Arrow
    (`ANCHORED_SCHEMA`), and each row's anchor record: built column-wise, a partition at a
    time."""
    import numpy as np
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(ANCHORED_SCHEMA)
    columns: dict[str, list] = {name: [] for name in schema.names}
    parts: dict[TopicPartitionKey, tuple] = {}
    row = 0
    for (topic, partition), a in found.items():
        n = len(a.committed)
        start, end = source_bounds[(topic, partition)]
        repeated = {
            "src_topic": topic,
            "src_partition": partition,
            "dst_topic": renamed[topic],
            "dst_partition": partition,
            "src_log_start_offset": start,
            "src_log_end_offset": end,
        }
        for name, value in repeated.items():
            columns[name].append(pa.repeat(pa.scalar(value, schema.field(name).type), n))
        has = a.kinds != anchors.NONE
        columns["committed_offset"].append(pa.array(a.committed, pa.int64()))
        columns["anchor_kind"].append(
            pa.DictionaryArray.from_arrays(pa.array(a.kinds), anchors.ANCHOR_KINDS).cast(
                pa.string()
            )
        )
        columns["anchor_offset"].append(pa.array(a.offsets, pa.int64(), mask=~has))
        columns["anchor_timestamp_ms"].append(pa.array(a.timestamps, pa.int64(), mask=~has))
        if has.any():
            parts[(topic, partition)] = (row + np.flatnonzero(has), a.offsets[has])
        row += n
    arrays = [
        pa.concat_arrays(columns[f.name]) if columns[f.name] else pa.array([], f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema), RecordsAt(row, parts)


def build_plan(
    spark: SparkOrLater,
    src: Cluster,
    dst: Cluster,
    disc: Discovery,
    cfg: FerryConfig,
    progress: Callable[[str], None],
) -> Plan:
    """Extract what matching needs, match every distinct position once, and gather the plan.
    `spark` may still be starting: the source is read on the driver meanwhile, if small."""
    exact = exact_partitions(disc)
    wanted = distinct_positions(exact)
    # Which positions each group's rows take needs no match: worked out while Spark matches.
    indexes: dict[str, list[int]] = {}
    table = None
    if wanted:
        table = match_positions(spark, src, dst, disc, cfg, wanted, progress,
                                lambda: indexes.update(exact_indexes(exact, wanted)))  # fmt: skip
    extra: dict[str, list[dict]] = {}
    if disc.reconcile_topics:
        for row in plan_reconciled(session_of(spark), src, dst, disc, cfg, progress):
            extra.setdefault(row["group"], []).append(row)
    for (group, (topic, partition)), reason in sorted(disc.missing.items()):
        if group not in disc.refusals:
            extra.setdefault(group, []).append(
                _unmatched_row(group, topic, partition, disc, cfg, PartitionStatus.NO_DESTINATION,
                               reason)
            )  # fmt: skip
    for group, reason in disc.refusals.items():
        extra[group] = [
            _unmatched_row(group, topic, partition, disc, cfg, PartitionStatus.REFUSED, reason)
            for topic, partition in sorted(disc.committed[group])
        ]
    notes = {g: (GroupStatus.REFUSED, reason) for g, reason in disc.refusals.items()}
    for group in disc.groups:
        if not disc.committed[group] and group not in notes:
            notes[group] = (
                GroupStatus.NOTHING_TO_MIGRATE,
                "no committed offsets on the selected topics: nothing to migrate",
            )
    positions = PositionRows(table, wanted) if table is not None else {}
    return Plan(positions, exact, disc.previous, extra, notes, indexes)


def distinct_positions(exact: dict[str, dict[TopicPartitionKey, int]]) -> list[Position]:
    """The distinct positions of every group's offsets, sorted. Per partition, then offsets as
    plain ints: 250,000 (topic, partition, offset) tuples sorted as tuples took 0.7 s."""
    per_tp: dict[TopicPartitionKey, set[int]] = {}
    for offsets in exact.values():
        for tp, offset in offsets.items():
            if (seen := per_tp.get(tp)) is None:
                seen = per_tp[tp] = set()
            seen.add(offset)
    return [(t, p, o) for (t, p) in sorted(per_tp) for o in sorted(per_tp[(t, p)])]


def match_positions(
    spark: SparkOrLater,
    src: Cluster,
    dst: Cluster,
    disc: Discovery,
    cfg: FerryConfig,
    wanted: list[Position],
    progress: Callable[[str], None],
    ahead: Callable[[], object] | None = None,
) -> pa.Table:
    """Matching's row for each position (`matching.POSITION_COLUMNS`), one per position, in
    `wanted`'s order. `ahead()`: driver work that needs no match, done while Spark matches."""
    k = cfg.matching.context
    progress(f"matching {len(wanted)} distinct committed positions")
    read, src_segments = extract_source_records(spark, src, wanted, disc, cfg, progress)
    renamed = {t: cfg.topics.destination_topic(t) for t in {t for t, _, _ in wanted}}
    found = {
        tp: anchors.nearest_in(committed, read.get(tp))
        for tp, committed in offsets_by_partition(wanted).items()
    }
    table, anchor_records = anchored_table(found, renamed, disc.source_bounds)
    context = anchors.search_positions(found, renamed, k)
    # the destination records that may be candidates share an anchor's fingerprint
    anchor_prints = fingerprints_at(read, anchor_records)
    dst_bounds = dict(disc.destination_bounds)
    last_ts = destination_last_timestamps(dst, dst_bounds)
    # Handed to Spark on a thread of its own while the destination is looked up and read on
    # the driver: the JVM turning them into DataFrames (and caching the anchors) and the
    # driver reading Kafka overlap, where one waited for the other. The anchors are cached
    # only for a search that may take several steps, each a query over them; one query (a
    # full read, or a search that reads every partition whole) streams them once, and
    # filling a cache first only delays it.
    is_one_query = cfg.matching.search == "full" or search.takes_one_step(context, dst_bounds, k)
    inputs = in_background(
        "ferry-inputs",
        _match_inputs,
        spark,
        table,
        anchor_records,
        read,
        src_segments,
        set(anchor_records.parts),
        [(t, p, s, e, last_ts.get((t, p))) for (t, p), (s, e) in dst_bounds.items()],
        not is_one_query,
    )
    if cfg.matching.search == "full":
        resolved = _match_windows(spark, dst, inputs, anchor_prints, sorted(context), dst_bounds,
                                  cfg, progress, ahead)  # fmt: skip
    else:
        found = search.search_destination(
            spark,
            dst,
            inputs,
            anchor_prints,
            context,
            dst_bounds,
            cfg,
            lambda ranges: read_hashed(spark, dst, ranges, cfg),
            progress,
            ahead,
        )
        per = found.offsets_read / max(1, found.positions)
        progress(
            f"destination: read {found.offsets_read} offsets for {found.positions} anchor "
            f"positions ({per:.0f} per position) in {found.steps} steps"
        )
        resolved = found.table
    done = inputs()
    done.anchors_cached()
    release(done.anchors_df)
    return resolved


def _match_inputs(
    spark: SparkOrLater,
    table: pa.Table,
    at: RecordsAt,
    read: dict[TopicPartitionKey, anchors.PartitionRecords],
    segments: dict[TopicPartitionKey, list[tuple[int, int]]],
    src_partitions: set[TopicPartitionKey],
    bounds: list[tuple],
    cached: bool,
) -> matching.MatchInputs:
    """The anchors (`anchors_table`, also kept as Arrow in `MatchInputs.anchors_table`; when
    `cached`, hash-partitioned by position and cached so: each search step streams them past
    its candidates, and groups by position the rows of those with several, which a cache
    partitioned so needs no shuffle for; one query shuffles only those: `matching.match`),
    the source fingerprints their context is cut from, and the destination's bounds
    (`DST_BOUNDS_SCHEMA` rows). `spark` may still be starting: this waits for it."""
    spark = session_of(spark)
    held = anchors_table(table, at, read, segments)
    anchors_df = arrow_df(spark, held, ANCHORS_SCHEMA)
    n = shuffle_partitions(spark)

    def by_position(df: DataFrame) -> DataFrame:
        keys = matching.ANCHOR_KEYS
        return df.repartition(n, *keys) if n else df.repartition(*keys)

    if cached:
        anchors_df = by_position(anchors_df)
    return matching.MatchInputs(
        anchors_df,
        fingerprints_df(spark, read, src_partitions),
        local_df(spark, bounds, DST_BOUNDS_SCHEMA),
        cache_in_background(anchors_df) if cached else lambda: None,
        (lambda df: df) if cached else by_position,
        held,
    )


def shuffle_partitions(spark: SparkSession) -> int | None:
    """The session's `spark.sql.shuffle.partitions` as a number, or None where it is not one
    (Databricks' `auto`: its adaptive execution picks a count per shuffle) or the server will
    not say: a repartition then names no count, and the session's own choice is the same for
    each query, so the cached anchors stay partitioned as the queries over them expect."""
    value = connect.setting(spark, "spark.sql.shuffle.partitions")
    try:
        n = int(value or "")
    except ValueError:
        return None
    return n if n > 0 else None


def _match_windows(
    spark: SparkOrLater,
    dst: Cluster,
    inputs: Callable[[], matching.MatchInputs],
    anchor_prints,  # noqa: ANN001 - numpy: the anchors' fingerprints
    slice_keys: list[tuple[str, int, int]],
    dst_bounds: dict,
    cfg: FerryConfig,
    progress: Callable[[str], None],
    ahead: Callable[[], object] | None = None,
) -> pa.Table:
    """`matching.search: full`: every anchor's whole timestamp window, read at once, and
    matching's row for each position, in the anchors' order (`ahead`: as `match_positions`)."""
    k, m = cfg.matching.context, cfg.matching
    windows = destination_windows(slice_keys, m.window_before_ms, m.window_after_ms)
    book = RangeBook()
    dst_ranges = book.new_ranges(window_offsets(dst, windows, dst_bounds, k))
    progress(
        f"destination: reading {len(dst_ranges)} windows "
        f"({sum(r.end - r.start for r in dst_ranges)} offsets)"
    )
    records = anchors.records_by_partition(read_hashed(spark, dst, dst_ranges, cfg))
    wanted = with_fingerprint_in(records, anchor_prints, records.keys())
    located = located_records(session_of(spark), records, book.read, wanted)
    ready = inputs()
    progress("matching anchors to destination records")
    resolved_df = matching.match(ready, ready.anchors_df, located, k, m.window_before_ms,
                                 m.window_after_ms)  # fmt: skip
    table = beside(ahead, collected, resolved_df, ready.anchors_table)
    return in_anchor_order([table], ready.anchors_table.num_rows)


def _unmatched_row(group, topic, partition, disc, cfg, status, reason) -> dict:  # noqa: ANN001
    return matching.plan_row(
        group=group,
        src_topic=topic,
        src_partition=partition,
        committed_offset=disc.committed[group][(topic, partition)],
        dst_topic=cfg.topics.destination_topic(topic),
        # a reconciled topic's records are not in the same partitions on the destination
        dst_partition=None if disc.is_reconciled(topic) else partition,
        status=status,
        previous_offset=None,
        note=reason,
    )


def replan_pending(
    spark: SparkSession,
    src: Cluster,
    dst: Cluster,
    cfg: FerryConfig,
    plan: Plan,
    decide: Callable[[Plan], dict],
    wait_s: float,
    allow_active_source: bool,
    progress: Callable[[str], None],
) -> tuple[Plan, dict]:
    """`migrate --wait`: plan PENDING groups again every `WAIT_INTERVAL_S` until none is left
    or `wait_s` has passed; the plan and decisions after the last round."""
    decisions = decide(plan)
    deadline = time.monotonic() + wait_s
    while pending := {g for g, d in decisions.items() if d.status == GroupStatus.PENDING}:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        progress(
            f"{len(pending)} groups PENDING; planning them again in "
            f"{min(left, WAIT_INTERVAL_S):.0f}s"
        )
        time.sleep(min(left, WAIT_INTERVAL_S))
        again = discover(src, dst, cfg, allow_active_source, only=pending)
        plan = plan.merged(build_plan(spark, src, dst, again, cfg, progress))
        decisions = decide(plan)
    return plan, decisions
