"""Positions kept outside `__consumer_offsets` — a Structured Streaming checkpoint's, a list
from a Flink savepoint or a database — translated by `migrate`'s own engine.

Each set of positions (one checkpoint source line, one CSV line) stands where `migrate` has a
group: `discover_positions` builds the same `Discovery` that group discovery builds (topics,
renames and partitioning decided per topic by the same rule, watermarks in bulk), and
`build_plan`, `decide` and `exit_code` run unchanged on it — the same matching, windows,
statuses and exit codes. There is no group state to check: a position set has no members
(whether a streaming query still runs is `ferry.checkpoint.translate`'s check).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator, Mapping

from ferry import kafka
from ferry.config import FerryConfig
from ferry.errors import UsageError
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.migrate.decision import GroupDecision, decide
from ferry.migrate.discover import (
    MISSING,
    RECONCILE,
    Discovery,
    both_clusters,
    read_bounds,
    topic_plan,
)
from ferry.migrate.model import Plan
from ferry.status import GroupState

PositionSets = Mapping[str, Mapping[TopicPartitionKey, int]]  # name -> partition -> next offset

# What `migrate --positions` prints per input line (-o json: the field names are a contract).
POSITIONS_COLUMNS = [
    "topic",
    "partition",
    "offset",
    "dst_topic",
    "dst_partition",
    "destination_offset",
    "status",
    "note",
]


def discover_positions(
    src: Cluster,
    dst: Cluster,
    cfg: FerryConfig,
    sets: PositionSets,
    *,
    allow_reconcile: bool,
    known_src_topics: Mapping[str, int] | None = None,
) -> Discovery:
    """`migrate.discover` for position sets: every set's partitions checked against the source
    (a topic or partition it lacks, or a topic the config does not select, is a usage error),
    each topic planned by `migrate`'s rule. `allow_reconcile`: a topic with another partition
    count on the destination is reconciled (a set holds every partition of it, as a checkpoint
    line does); otherwise its partitions are NO_DESTINATION, said why. `known_src_topics`: the
    source's topics when the caller already listed them."""
    # Each cluster's calls in a thread of its own, as group discovery does (`both_clusters`).
    src_topics, dst_topics = both_clusters(
        lambda: _reachable_topics(src, known_src_topics), lambda: _reachable_topics(dst, None)
    )
    names = sorted(sets)
    disc = Discovery(
        groups=names,
        source_states=dict.fromkeys(names, GroupState.unlisted()),
        destination_states=dict.fromkeys(names, GroupState.unlisted()),
        committed={n: dict(sets[n]) for n in names},
        previous=dict.fromkeys(names, {}),
        destination_members=dict.fromkeys(names, 0),
    )
    topics = {t for offsets in sets.values() for t, _ in offsets}
    plans = {}
    for topic in sorted(topics):
        if topic not in src_topics:
            raise UsageError(f"topic {topic} is not on the source cluster")
        plan = topic_plan(topic, cfg, src_topics, dst_topics)
        if plan is None:
            raise UsageError(f"topic {topic} is not selected by the config's topics section")
        plans[topic] = plan
    for name in names:
        for tp in sets[name]:
            topic, partition = tp
            if partition >= src_topics[topic] or partition < 0:
                raise UsageError(
                    f"{topic}[{partition}] is not on the source cluster "
                    f"({topic} has {src_topics[topic]} partitions)"
                )
            dst_topic, mode, count = plans[topic]
            if mode == MISSING:
                disc.missing[(name, tp)] = f"topic {dst_topic} not on destination"
            elif mode == RECONCILE and not allow_reconcile:
                disc.missing[(name, tp)] = (
                    f"{dst_topic} has {count} partitions on the destination, {topic} "
                    f"{src_topics[topic]} on the source: a position list is translated "
                    "partition by partition"
                )
            elif mode == RECONCILE:
                disc.reconcile_topics[topic] = (src_topics[topic], count)
            elif partition >= count:
                disc.missing[(name, tp)] = f"{dst_topic} has {count} partitions on destination"
    missing = {tp for _n, tp in disc.missing}
    read_bounds(
        disc, cfg, src, dst, {tp for tps in sets.values() for tp in tps if tp not in missing}
    )
    return disc


def _reachable_topics(cluster: Cluster, known: Mapping[str, int] | None) -> Mapping[str, int]:
    if known is not None:
        return known
    kafka.check_reachable(cluster)
    return kafka.list_topics(cluster)


def translate(
    spark,  # noqa: ANN001 - a SparkSession (typed loosely: this module loads no Spark itself)
    src: Cluster,
    dst: Cluster,
    cfg: FerryConfig,
    sets: PositionSets,
    progress: Callable[[str], None],
    *,
    allow_reconcile: bool,
    known_src_topics: Mapping[str, int] | None = None,
) -> tuple[Plan, dict[str, GroupDecision]]:
    """Every set's plan and decision, by `migrate`'s engine (`decide` with nothing on the
    destination yet: a resolved set is READY)."""
    from ferry.migrate.plan import build_plan

    progress(f"discovering {sum(len(s) for s in sets.values())} positions")
    disc = discover_positions(
        src, dst, cfg, sets, allow_reconcile=allow_reconcile, known_src_topics=known_src_topics
    )
    plan = build_plan(spark, src, dst, disc, cfg, progress)
    return plan, decide(plan, allow_rewind=False)


def read_positions_csv(name: str, text: str) -> dict[str, dict[TopicPartitionKey, int]]:
    """`topic,partition,offset` lines (the next offset to read on the source; an optional
    header line `topic,partition,offset`; blank lines and `#` comments skipped) → one set per
    line, named `line N`. A bad line is a usage error naming the file and line."""
    out: dict[str, dict[TopicPartitionKey, int]] = {}
    for number, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [f.strip() for f in fields]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if number == 1 and [c.lower() for c in cells] == ["topic", "partition", "offset"]:
            continue
        if len(cells) != 3 or not cells[0]:
            raise UsageError(f"{name} line {number}: expected topic,partition,offset")
        topic, partition, offset = cells
        if not (partition.isascii() and partition.isdigit()):
            raise UsageError(f"{name} line {number}: partition {partition!r} is not a number")
        if not (offset.isascii() and offset.isdigit()):
            raise UsageError(f"{name} line {number}: offset {offset!r} is not an offset >= 0")
        out[f"line {number}"] = {(topic, int(partition)): int(offset)}
    if not out:
        raise UsageError(f"{name}: no positions in it (expected topic,partition,offset lines)")
    return out


def line_number(name: str) -> int:
    return int(name.split()[-1])


def position_rows(plan: Plan, decisions: Mapping[str, GroupDecision]) -> Iterator[dict]:
    """`migrate --positions` output: one row per input line, in the file's order."""
    for name in sorted(plan.groups(), key=line_number):
        for row in plan.rows_of(name):
            yield {
                "topic": row["src_topic"],
                "partition": row["src_partition"],
                "offset": row["committed_offset"],
                "dst_topic": row["dst_topic"],
                "dst_partition": row["dst_partition"],
                "destination_offset": row["destination_offset"],
                "status": str(row["status"]),
                "note": row.get("note") or _why(decisions[name]),
            }


def _why(decision: GroupDecision) -> str | None:
    return None if decision.is_write else decision.message
