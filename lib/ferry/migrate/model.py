"""What a plan is: matching's result per anchor position, given to every group partition at
that position only when a row is asked for.

Ten thousand groups committed on the same partitions share a few thousand positions (source
topic, partition, committed offset). Spark matches each position once and the driver keeps
one result per position; a group's plan rows are built from its committed offsets when a
stage needs them (decide, ledger, output), one group at a time, so nothing the size of
groups × partitions is collected or held beyond the committed offsets discovery fetched.

Pure: no Spark, no Kafka client (`ferry.migrate.plan` builds a `Plan`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from ferry.keys import TopicPartitionKey
from ferry.migrate.spans import Span, row_span, span_between
from ferry.status import GroupStatus

Position = tuple[str, int, int]  # source topic, partition, committed offset


def offsets_by_partition(positions: Iterable[Position]) -> dict[TopicPartitionKey, list[int]]:
    """The positions' committed offsets per source partition, in the positions' order."""
    out: dict[TopicPartitionKey, list[int]] = {}
    for t, p, c in positions:
        if (offsets := out.get((t, p))) is None:
            offsets = out[(t, p)] = []
        offsets.append(c)
    return out


def table_positions(table) -> list[Position]:  # noqa: ANN001 - a pyarrow.Table
    """The positions of a table of matching's rows (`Plan.position_table`), in its order."""
    keys = ("src_topic", "src_partition", "committed_offset")
    return list(zip(*(table.column(c).to_pylist() for c in keys), strict=True))


# a position's destination partition and offset, or None while unresolved (what `decide` reads)
Target = tuple[TopicPartitionKey, int] | None


class PositionRows(Mapping):
    """Matching's rows (`POSITION_COLUMNS`) by position, read from its Arrow table: a row's
    dict is made when it is first read (250,000 positions as dicts took a second that a run
    whose groups all resolve never needs), and the table's order is every position's index.
    `order`: the table's positions when known already (the plan asked for them in that
    order), else read from it."""

    def __init__(self, table, order: list[Position] | None = None) -> None:  # noqa: ANN001
        if order is not None:
            _check_order(table, order)
        self.table = table
        self.order = table_positions(table) if order is None else order
        self._columns: dict[str, list] | None = None
        self._rows: dict[int, dict] = {}

    @cached_property
    def index(self) -> dict[Position, int]:
        return {p: i for i, p in enumerate(self.order)}

    def __getitem__(self, position: Position) -> dict:
        i = self.index[position]
        row = self._rows.get(i)
        if row is None:
            if self._columns is None:
                table = self.table
                self._columns = {c: table.column(c).to_pylist() for c in table.column_names}
            row = self._rows[i] = {c: values[i] for c, values in self._columns.items()}
        return row

    def __iter__(self) -> Iterator[Position]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def targets(self) -> list[Target]:
        """Every position's `Target`, in order, read column-wise."""
        names = ("dst_topic", "dst_partition", "destination_offset", "is_resolved")
        columns = (self.table.column(c).to_pylist() for c in names)
        return [((t, p), o) if ok else None for t, p, o, ok in zip(*columns, strict=True)]


def _check_order(table, order: list[Position]) -> None:  # noqa: ANN001 - a pyarrow.Table
    """A row given to the wrong position would commit another position's offset: the table's
    partitions and committed offsets must be `order`'s, row by row (250,000: 0.03 s)."""
    import numpy as np

    n = len(order)
    same = n == table.num_rows and all(
        np.array_equal(
            table.column(name).to_numpy(), np.fromiter((p[i] for p in order), np.int64, n)
        )
        for i, name in ((1, "src_partition"), (2, "committed_offset"))
    )
    if not same:
        raise ValueError(f"matching's {table.num_rows} rows are not the plan's {n} positions")


def _exact_at(offsets: Mapping[TopicPartitionKey, int], index: Mapping[Position, int]) -> list[int]:
    return [index[(t, p, o)] for (t, p), o in sorted(offsets.items())]


def exact_indexes(
    exact: Mapping[str, Mapping[TopicPartitionKey, int]], order: list[Position]
) -> dict[str, list[int]]:
    """Every group's `Plan.exact_at` (`exact`: group -> partition -> committed offset), given
    the order of the plan's positions: it needs the positions, not their match."""
    index = {p: i for i, p in enumerate(order)}
    return {group: _exact_at(offsets, index) for group, offsets in exact.items()}


def row_order(row: Mapping) -> tuple:
    """Group, source topic, then source partition (exact rows) or destination partition
    (reconciled rows, which have no source partition)."""
    partition = row["src_partition"]
    return (row["group"], row["src_topic"], partition is None, partition or 0, row["dst_partition"])


@dataclass
class Plan:
    """Every selected group's plan, row by row on demand (`rows_of`, `rows`)."""

    # position -> matching's row for it (`ferry.migrate.matching.POSITION_COLUMNS`): its
    # Arrow table's `PositionRows`, or plain dicts (a plan merged by `--wait`)
    positions: Mapping[Position, dict]
    # group -> source partition -> committed offset, for partitions matched exactly
    exact: dict[str, Mapping[TopicPartitionKey, int]]
    # group -> the destination group's offsets before this run
    previous: dict[str, Mapping[TopicPartitionKey, int]]
    # group -> rows made outside matching (reconciled topics, no destination, refused)
    extra: dict[str, list[dict]] = field(default_factory=dict)
    # group -> (status, why) for groups decided before matching (refused, nothing to migrate)
    group_notes: dict[str, tuple[GroupStatus, str]] = field(default_factory=dict)
    # group -> `exact_at`, worked out once for decide, the ledger and the output (ahead, while
    # Spark matches: `exact_indexes`, or when first asked)
    indexes: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def groups(self) -> list[str]:
        return sorted(set(self.exact) | set(self.extra) | set(self.group_notes))

    @property
    def position_table(self):  # noqa: ANN201 - a pyarrow.Table or None
        """`positions` as the Arrow table matching gave them in (`POSITION_COLUMNS`, one row
        per position, in `position_order`), or None: the ledger's and the JSON output's
        columns are cast from it, not read back out of 250,000 dicts."""
        return self.positions.table if isinstance(self.positions, PositionRows) else None

    @cached_property
    def position_order(self) -> list[Position]:
        """Every position, in the order `exact_at` indexes."""
        if isinstance(self.positions, PositionRows):
            return self.positions.order
        return list(self.positions)

    @cached_property
    def _position_index(self) -> dict[Position, int]:
        if isinstance(self.positions, PositionRows):
            return self.positions.index
        return {p: i for i, p in enumerate(self.position_order)}

    @cached_property
    def position_destinations(self) -> list[TopicPartitionKey]:
        """Each position's destination partition, in `position_order`: read only for groups
        already committed on the destination (a first run has none)."""
        if isinstance(self.positions, PositionRows):
            table = self.positions.table
            columns = (table.column(c).to_pylist() for c in ("dst_topic", "dst_partition"))
            return list(zip(*columns, strict=True))
        rows = map(self.positions.__getitem__, self.position_order)
        return [(r["dst_topic"], r["dst_partition"]) for r in rows]

    def exact_at(self, group: str) -> list[int]:
        """The indexes (into `position_order`) of the group's exactly matched partitions'
        positions, in partition order."""
        at = self.indexes.get(group)
        if at is None:
            at = self.indexes[group] = _exact_at(self.exact.get(group, {}), self._position_index)
        return at

    @cached_property
    def _targets(self) -> list[Target]:
        if isinstance(self.positions, PositionRows):
            return self.positions.targets()
        return [
            ((r["dst_topic"], r["dst_partition"]), r["destination_offset"])
            if r["is_resolved"]
            else None
            for r in map(self.positions.__getitem__, self.position_order)
        ]

    def targets_of(self, group: str) -> list[Target]:
        """Each exactly matched partition's `Target`, in partition order."""
        targets = self._targets
        return [targets[i] for i in self.exact_at(group)]

    def rows_of(self, group: str) -> list[dict]:
        """The group's plan rows (`PLAN_COLUMNS`, `previous_offset`, `note`), in row order;
        fresh dicts each call, so a caller may add columns."""
        previous = self.previous.get(group, {})
        rows = []
        for (topic, partition), offset in self.exact.get(group, {}).items():
            row = {"group": group, **self.positions[(topic, partition, offset)]}
            row["previous_offset"] = previous.get((row["dst_topic"], row["dst_partition"]))
            row["note"] = None
            rows.append(row)
        for extra in self.extra.get(group, []):
            row = dict(extra)
            if row.get("previous_offset") is None and row.get("dst_partition") is not None:
                row["previous_offset"] = previous.get((row["dst_topic"], row["dst_partition"]))
            rows.append(row)
        rows.sort(key=row_order)
        return rows

    def shared_rows_of(self, group: str) -> list[Mapping]:
        """The group's matching rows without `group`, `previous_offset` or `note` and without
        copies (the plan's own: read them, never change them): what `decide` needs, at a
        tenth of `rows_of`'s cost for 10,000 groups."""
        positions, order = self.positions, self.position_order
        rows: list[Mapping] = [positions[order[i]] for i in self.exact_at(group)]
        return rows + self.extra.get(group, [])

    @property
    def rows(self) -> Iterator[dict]:
        """Every group's rows, group by group (a new iterator each time)."""
        for group in self.groups():
            yield from self.rows_of(group)

    def resolved_spans(self) -> set[Span]:
        """`row_span` of every resolved row, read from the positions without building the
        rows (what `audit` counts; 640,000 rows built only for this took over a second)."""
        spans: set[Span] = set()
        for group, exact in self.exact.items():
            previous = self.previous.get(group, {})
            for (topic, partition), offset in exact.items():
                position = self.positions[(topic, partition, offset)]
                if not position["is_resolved"]:
                    continue
                topic, partition = position["dst_topic"], position["dst_partition"]
                committed = previous.get((topic, partition))
                span = span_between(topic, partition, committed, position["destination_offset"])
                if span is not None:
                    spans.add(span)
        for group in self.extra:
            spans.update(
                s for r in self.rows_of(group) if r.get("is_resolved") and (s := row_span(r))
            )
        return spans

    def row_count(self, group: str) -> int:
        return len(self.exact.get(group, {})) + len(self.extra.get(group, []))

    def merged(self, newer: Plan) -> Plan:
        """This plan with every group `newer` planned replaced by newer's rows and notes."""
        replanned = set(newer.groups())

        def keep(d: dict) -> dict:
            return {g: v for g, v in d.items() if g not in replanned}

        return Plan(
            {**self.positions, **newer.positions},
            {**keep(self.exact), **newer.exact},
            {**keep(self.previous), **newer.previous},
            {**keep(self.extra), **newer.extra},
            {**keep(self.group_notes), **newer.group_notes},
        )
