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


def row_order(row: Mapping) -> tuple:
    """Group, source topic, then source partition (exact rows) or destination partition
    (reconciled rows, which have no source partition)."""
    partition = row["src_partition"]
    return (row["group"], row["src_topic"], partition is None, partition or 0, row["dst_partition"])


@dataclass
class Plan:
    """Every selected group's plan, row by row on demand (`rows_of`, `rows`)."""

    # position -> matching's row for it (`ferry.migrate.matching.POSITION_COLUMNS`)
    positions: dict[Position, dict]
    # group -> source partition -> committed offset, for partitions matched exactly
    exact: dict[str, Mapping[TopicPartitionKey, int]]
    # group -> the destination group's offsets before this run
    previous: dict[str, Mapping[TopicPartitionKey, int]]
    # group -> rows made outside matching (reconciled topics, no destination, refused)
    extra: dict[str, list[dict]] = field(default_factory=dict)
    # group -> (status, why) for groups decided before matching (refused, nothing to migrate)
    group_notes: dict[str, tuple[GroupStatus, str]] = field(default_factory=dict)
    # `positions` as the Arrow table matching gave them in (a pyarrow.Table of
    # `POSITION_COLUMNS`, one row per position), or None: the ledger's and the JSON output's
    # columns are taken from it, not read back out of 250,000 dicts
    position_table: object | None = None

    def groups(self) -> list[str]:
        return sorted(set(self.exact) | set(self.extra) | set(self.group_notes))

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
        positions = self.positions
        rows: list[Mapping] = [
            positions[(topic, partition, offset)]
            for (topic, partition), offset in self.exact.get(group, {}).items()
        ]
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
