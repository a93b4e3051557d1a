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

from ferry.migrate.model import Plan, Position


def arrow_schema():  # noqa: ANN201 - a pyarrow.Schema (pyarrow is imported on first use)
    from pyspark.sql.pandas.types import to_arrow_schema

    from ferry.write.ledger import LEDGER_SCHEMA

    return to_arrow_schema(LEDGER_SCHEMA, timezone="UTC")


# The ledger's position columns and matching's (`matching.POSITION_COLUMNS`) they hold.
_POSITION_SOURCES = {
    "source_topic": "src_topic",
    "source_partition": "src_partition",
    "source_offset": "committed_offset",
    "topic": "dst_topic",
    "partition": "dst_partition",
    "new_offset": "destination_offset",
    "status": "status",
    "anchor_kind": "anchor_kind",
    "anchor_offset": "anchor_offset",
    "anchor_timestamp": "anchor_timestamp_ms",
    "anchor_sha256": "anchor_sha256",
    "candidate_count": "candidate_count",
}


def position_table_of(table):  # noqa: ANN001, ANN201 - pyarrow.Tables
    """The ledger's position columns of a table of matching's rows (`Plan.position_table`),
    row for row: its columns cast, none read into Python."""
    import pyarrow as pa

    schema = arrow_schema()
    columns = {}
    for name, source in _POSITION_SOURCES.items():
        column = table.column(source)
        if name == "anchor_timestamp":  # epoch milliseconds as timestamps
            column = column.cast(pa.timestamp("ms", tz="UTC"))
        columns[name] = column.cast(schema.field(name).type)
    return pa.table(columns)


def position_table(positions: Mapping[Position, Mapping], order: Sequence[Position]):  # noqa: ANN201
    """The ledger's position columns, one row per position of `order` (`positions`' dicts)."""
    import pyarrow as pa

    schema = arrow_schema()
    rows = [positions[p] for p in order]
    plain = {"status": str, "anchor_sha256": bytes}  # enums and bytearrays as Arrow takes them
    columns = {}
    for name, source in _POSITION_SOURCES.items():
        values = [r[source] for r in rows]
        if (convert := plain.get(source)) is not None:
            values = [None if v is None else convert(v) for v in values]
        kind = pa.int64() if name == "anchor_timestamp" else schema.field(name).type
        columns[source] = pa.array(values, kind)
    return position_table_of(pa.table(columns))


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
        # one row per position, in `plan.position_order` (what `plan.exact_at` indexes)
        if plan.position_table is not None:  # matching's own columns, in its order
            self.by_position = position_table_of(plan.position_table)
        else:
            self.by_position = position_table(plan.positions, plan.position_order)

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

    plan = tables.plan

    taken: list[int] = []
    counts: list[int] = []
    previous: list[int | None] = []
    for group in groups:
        at = plan.exact_at(group)
        taken += at
        counts.append(len(at))
        now = plan.previous.get(group)
        if now:
            destinations = plan.position_destinations
            previous += [now.get(destinations[i]) for i in at]
        else:
            previous += [None] * len(at)
    per_row = np.repeat(np.arange(len(groups)), counts)
    names = pa.array(groups, pa.string()).take(per_row)
    table = tables.by_position.take(pa.array(taken, pa.int64()))
    n = len(taken)
    extra = {
        "cluster": pa.repeat(pa.scalar(tables.cluster, pa.string()), n),
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
