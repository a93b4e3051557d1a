"""Discover: which source groups are selected, their states and committed offsets on both
clusters, and the watermarks of every partition the plan needs — all fetched in bulk, before
any record is read."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry import kafka_admin
from ferry.config import FerryConfig
from ferry.kafka_admin import Cluster, TopicPartitionKey


@dataclass
class Discovery:
    """What the clusters said about the selected groups, before any record is read."""

    groups: list[str]
    source_states: dict[str, str]
    destination_states: dict[str, str]
    committed: dict[str, dict[TopicPartitionKey, int]]
    previous: dict[str, dict[TopicPartitionKey, int]]
    refusals: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # (group, source tp) -> reason, for partitions that cannot land on the destination
    missing: dict[tuple[str, TopicPartitionKey], str] = field(default_factory=dict)
    source_bounds: dict[TopicPartitionKey, tuple[int, int]] = field(default_factory=dict)
    destination_bounds: dict[TopicPartitionKey, tuple[int, int]] = field(default_factory=dict)



def discover(
    src: Cluster,
    dst: Cluster,
    cfg: FerryConfig,
    allow_active_source: bool,
    only: set[str] | None = None,
) -> Discovery:
    """Select groups (`only`: of these), check both sides' states, and fetch offsets and
    watermarks in bulk."""
    kafka_admin.check_reachable(src)
    kafka_admin.check_reachable(dst)
    groups = [
        g
        for g in kafka_admin.list_groups(src)
        if cfg.groups.matches(g) and (only is None or g in only)
    ]
    source_info = kafka_admin.describe_groups(src, groups)
    destination_info = kafka_admin.describe_groups(dst, groups)
    committed_all = kafka_admin.committed_offsets(src, groups)
    src_topics = kafka_admin.list_topics(src)
    dst_topics = kafka_admin.list_topics(dst)
    disc = Discovery(
        groups=groups,
        source_states={g: source_info[g].state for g in groups},
        destination_states={g: destination_info[g].state for g in groups},
        committed={},
        previous={},
    )
    for group in groups:
        disc.committed[group] = {
            tp: off
            for tp, off in committed_all[group].items()
            if not tp[0].startswith("__") and cfg.topics.matches(tp[0]) and tp[0] in src_topics
        }
        if not source_info[group].is_inactive:
            if allow_active_source:
                disc.warnings.append(
                    f"source group {group} is {source_info[group].state}: its offsets may still "
                    "move after this run"
                )
            else:
                disc.refusals[group] = (
                    f"source group is {source_info[group].state}, not Empty; stop its consumers "
                    "or pass --allow-active-source"
                )
        if not destination_info[group].is_inactive:
            disc.refusals[group] = (
                f"destination group is {destination_info[group].state}, not Empty; never moved"
            )
        for topic, partition in disc.committed[group]:
            dst_topic = cfg.topics.destination_topic(topic)
            if dst_topic not in dst_topics:
                disc.missing[(group, (topic, partition))] = f"topic {dst_topic} not on destination"
            elif partition >= dst_topics[dst_topic]:
                disc.missing[(group, (topic, partition))] = (
                    f"{dst_topic} has {dst_topics[dst_topic]} partitions on destination"
                )
    active = [g for g in groups if g not in disc.refusals]
    disc.previous = kafka_admin.committed_offsets(dst, active) if active else {}
    needed = {tp for g in active for tp in disc.committed[g]}
    disc.source_bounds = kafka_admin.watermarks(src, needed)
    dst_needed = {
        (cfg.topics.destination_topic(t), p)
        for g in active
        for (t, p) in disc.committed[g]
        if (g, (t, p)) not in disc.missing
    }
    disc.destination_bounds = kafka_admin.watermarks(dst, dst_needed)
    return disc


def committed_rows(disc: Discovery, cfg: FerryConfig) -> list[dict]:
    """One row per group × source partition that matching should resolve."""
    rows = []
    for group in disc.groups:
        if group in disc.refusals:
            continue
        for (topic, partition), offset in sorted(disc.committed[group].items()):
            if (group, (topic, partition)) in disc.missing:
                continue
            start, end = disc.source_bounds[(topic, partition)]
            rows.append(
                {
                    "group": group,
                    "src_topic": topic,
                    "src_partition": partition,
                    "committed_offset": offset,
                    "dst_topic": cfg.topics.destination_topic(topic),
                    "dst_partition": partition,
                    "src_log_start_offset": start,
                    "src_log_end_offset": end,
                }
            )
    return rows

