"""A plan's ledger rows built column-wise with Arrow: one row per group partition, from the
matching result of its position (shared by thousands of groups) and its group's decision.

10,000 groups are 640,000 ledger rows over ~16,000 positions. Built as a dict per row they
cost ~16 s of Python (load 9); here the position columns are an Arrow table of one row per
position, taken by index (`Table.take`) for every group partition, and the group columns
(group, previous offset, message) are repeated per group — the only per-row Python left is
the list of position indexes. Groups with rows made outside matching (refused, reconciled,
no destination) keep the per-row path (`load.group_ledger_rows`): they are few.

Pure: Arrow and plain values, no Spark, no Kafka client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property

from ferry.migrate.model import Plan, Position


def arrow_schema():  # noqa: ANN201 - a pyarrow.Schema (pyarrow is imported on first use)
    from pyspark.sql.pandas.types import to_arrow_schema

    from ferry.write.ledger import LEDGER_SCHEMA

    return to_arrow_schema(LEDGER_SCHEMA, timezone="UTC")


def position_table(positions: Mapping[Position, Mapping], order: Sequence[Position]):  # noqa: ANN201
    """The ledger's position columns, one row per position of `order`."""
    import pyarrow as pa

    schema = arrow_schema()
    rows = [positions[p] for p in order]

    def col(name: str, key: str, convert: Callable | None = None):  # noqa: ANN202
        values = [r[key] for r in rows]
        if convert is not None:
            values = [None if v is None else convert(v) for v in values]
        return pa.array(values, schema.field(name).type)

    def when(name: str, key: str):  # noqa: ANN202 - epoch milliseconds as timestamps, cast by Arrow
        millis = pa.array([r[key] for r in rows], pa.int64())
        return millis.cast(pa.timestamp("ms", tz="UTC")).cast(schema.field(name).type)

    return pa.table(
        {
            "source_topic": col("source_topic", "src_topic"),
            "source_partition": col("source_partition", "src_partition"),
            "source_offset": col("source_offset", "committed_offset"),
            "topic": col("topic", "dst_topic"),
            "partition": col("partition", "dst_partition"),
            "new_offset": col("new_offset", "destination_offset"),
            "status": col("status", "status", str),
            "anchor_kind": col("anchor_kind", "anchor_kind"),
            "anchor_offset": col("anchor_offset", "anchor_offset"),
            "anchor_timestamp": when("anchor_timestamp", "anchor_timestamp_ms"),
            "anchor_sha256": col("anchor_sha256", "anchor_sha256", bytes),
            "candidate_count": col("candidate_count", "candidate_count"),
        }
    )


class PlanTables:
    """The ledger rows of a plan's groups as Arrow tables: `tables(groups)` gives those of
    `groups` in tables of about `batch_rows` rows (a group's rows are never split), every
    ledger column except the run's own (`Ledger` fills those). Groups matched exactly go
    column-wise with `message(group)` as their rows' message; the others' rows come from
    `row_path(group)`. The position table is built once and serves every call (an executing
    run asks again for each batch of groups it wrote)."""

    def __init__(
        self,
        plan: Plan,
        message: Callable[[str], str],
        cluster: str | None,
        batch_rows: int,
        row_path: Callable[[str], list[dict]],
    ) -> None:
        self.plan, self.message, self.cluster = plan, message, cluster
        self.batch_rows, self.row_path = batch_rows, row_path
        self.schema = arrow_schema()
        order = sorted(plan.positions)
        self.index = {p: i for i, p in enumerate(order)}
        self.by_position = position_table(plan.positions, order)

    @cached_property
    def dst_tp(self) -> list[tuple[str, int]]:
        """Each position's destination partition, in the position table's order: read only
        for groups already committed on the destination (a first run has none)."""
        table = self.by_position
        return list(zip(table["topic"].to_pylist(), table["partition"].to_pylist(), strict=True))

    def __call__(self, groups: Iterable[str]) -> Iterator:  # of pyarrow.Table
        import pyarrow as pa

        plan = self.plan
        batch: list[str] = []
        others: list[dict] = []
        size = 0

        def flush() -> Iterator:
            nonlocal batch, others, size
            if batch:
                yield _exact_table(self, batch)
            if others:
                columns = {f.name: [r.get(f.name) for r in others] for f in self.schema}
                yield pa.Table.from_pydict(columns, self.schema)
            batch, others, size = [], [], 0

        for group in groups:
            if plan.extra.get(group) or group in plan.group_notes:
                rows = self.row_path(group)
                others += rows
                size += len(rows)
            else:
                batch.append(group)
                size += len(plan.exact.get(group, {}))
            if size >= self.batch_rows:
                yield from flush()
        yield from flush()


def plan_tables(
    plan: Plan,
    groups: Iterable[str],
    message: Callable[[str], str],
    cluster: str | None,
    batch_rows: int,
    row_path: Callable[[str], list[dict]],
) -> Iterator:  # of pyarrow.Table
    """`PlanTables(...)(groups)`, for one call."""
    return PlanTables(plan, message, cluster, batch_rows, row_path)(groups)


def _exact_table(tables: PlanTables, groups: list[str]):  # noqa: ANN202 - a pyarrow.Table
    import numpy as np
    import pyarrow as pa

    plan, index = tables.plan, tables.index

    taken: list[int] = []
    counts: list[int] = []
    previous: list[int | None] = []
    for group in groups:
        offsets = plan.exact.get(group, {})
        at = [index[(t, p, o)] for (t, p), o in offsets.items()]
        taken += at
        counts.append(len(at))
        now = plan.previous.get(group)
        if now:
            dst_tp = tables.dst_tp
            previous += [now.get(dst_tp[i]) for i in at]
        else:
            previous += [None] * len(at)
    per_row = np.repeat(np.arange(len(groups)), counts)
    names = pa.array(groups, pa.string()).take(per_row)
    table = tables.by_position.take(pa.array(taken, pa.int64()))
    n = len(taken)
    extra = {
        "cluster": pa.array([tables.cluster] * n, pa.string()),
        "group": names,
        "source_group": names,
        "previous_offset": pa.array(previous, pa.int64()),
        "message": pa.array([tables.message(g) for g in groups], pa.string()).take(per_row),
    }
    columns = []
    for field in tables.schema:
        if field.name in extra:
            columns.append(extra[field.name])
        elif field.name in table.column_names:
            columns.append(table.column(field.name))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=tables.schema)
