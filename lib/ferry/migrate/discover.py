"""Discover: which source groups are selected, their states and committed offsets on both
clusters, and the watermarks of every partition the plan needs — all fetched in bulk, before
any record is read. Per cluster: one ListGroups (every group's state; only groups it does not
show inactive are described, for their members), the OffsetFetches of the groups it shows in
waves of 1,000, two ListOffsets; the source's and the destination's calls overlap.

`migrate` refuses groups that are active on either side; `audit` (read-only) plans them too
(`plan_active`), and reads whether the destination group is live from its state and members."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from ferry import kafka
from ferry.config import FerryConfig
from ferry.groups.selection import select_groups
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey


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
    # source topic -> (source, destination partition count), for topics planned by
    # `ferry.migrate.reconcile` (records not in the same partitions on both sides)
    reconcile_topics: dict[str, tuple[int, int]] = field(default_factory=dict)
    # group -> members the destination cluster reports (a live group has at least one)
    destination_members: dict[str, int] = field(default_factory=dict)

    def is_reconciled(self, topic: str) -> bool:
        return topic in self.reconcile_topics


A = TypeVar("A")
B = TypeVar("B")


def both_clusters(source_call: Callable[[], A], destination_call: Callable[[], B]) -> tuple[A, B]:
    """Run one call per cluster at the same time (each thread keeps to its own cluster and
    its AdminClient, so no client is shared across threads)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        destination = pool.submit(destination_call)
        source = source_call()
        return source, destination.result()


def _side(cluster: Cluster, groups: list[str], listed: dict | None):  # noqa: ANN202
    """(infos, offsets, topics) of one cluster; `listed`: its `list_group_infos`, when
    already asked. Only the groups the listing shows have their offsets fetched
    (`kafka.committed_offsets`): on a fresh destination, none, 10,000 requests saved.
    Whatever appears after the listing is seen by the write itself, which reads the offsets
    again."""
    listed = listed if listed is not None else kafka.list_group_infos(cluster)
    offsets = kafka.committed_offsets(cluster, groups, listed=listed)
    return (
        kafka.group_infos(cluster, groups, listed),
        {g: offsets.get(g, {}) for g in groups},
        kafka.list_topics(cluster),
    )


def discover(
    src: Cluster,
    dst: Cluster,
    cfg: FerryConfig,
    allow_active_source: bool,
    only: set[str] | None = None,
    *,
    plan_active: bool = False,
    group_pattern: str | None = None,
) -> Discovery:
    """Select groups (`only`: of these; `group_pattern`: whose id also fully matches it),
    check both sides' states, and fetch offsets and watermarks in bulk. `plan_active`: refuse
    no group for its state (active groups are planned, read-only callers only; the states are
    in the answer)."""
    kafka.check_reachable(src)
    kafka.check_reachable(dst)
    src_listed = kafka.list_group_infos(src)
    groups = [
        g
        for g in select_groups(sorted(src_listed), group_pattern, cfg.groups)
        if only is None or g in only
    ]
    # The destination's offsets are fetched for every group, refused ones too: cheaper than
    # waiting for the states before asking.
    (source_info, committed_all, src_topics), (destination_info, dst_offsets, dst_topics) = (
        both_clusters(lambda: _side(src, groups, src_listed), lambda: _side(dst, groups, None))
    )
    disc = Discovery(
        groups=groups,
        source_states={g: source_info[g].state for g in groups},
        destination_states={g: destination_info[g].state for g in groups},
        committed={},
        previous={},
        destination_members={g: len(destination_info[g].members) for g in groups},
    )
    # Every rule (selection, renames, partitioning) is decided once per topic: ten thousand
    # groups on a few topics are 640,000 partitions, and regexes per partition cost seconds.
    fetched: set[TopicPartitionKey] = set().union(*(o.keys() for o in committed_all.values()))
    topic_plans = {t: topic_plan(t, cfg, src_topics, dst_topics) for t in {t for t, _ in fetched}}
    # Partitions past the destination's count (a topic recreated with fewer partitions can
    # leave commits there): looked for in a group only when some group has one.
    beyond = {tp for tp in fetched if (plan := topic_plans[tp[0]]) and tp[1] >= plan[2]}
    for group in groups:
        offsets = committed_all[group]
        plans = {t: topic_plans[t] for t in {t for t, _ in offsets}}
        if any(plan is None for plan in plans.values()):
            offsets = {tp: o for tp, o in offsets.items() if plans[tp[0]] is not None}
        disc.committed[group] = offsets  # the fetched dict itself when every topic is kept
        if not source_info[group].state.is_inactive and not plan_active:
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
        if not destination_info[group].state.is_inactive and not plan_active:
            disc.refusals[group] = (
                f"destination group is {destination_info[group].state}, not Empty; never moved"
            )
        for topic, plan in plans.items():
            if plan is None:
                continue
            dst_topic, mode, partitions = plan
            if mode == RECONCILE:
                disc.reconcile_topics[topic] = (src_topics[topic], dst_topics[dst_topic])
            elif mode == MISSING:
                for tp in offsets:
                    if tp[0] == topic:
                        disc.missing[(group, tp)] = f"topic {dst_topic} not on destination"
            elif beyond:
                for tp in offsets:
                    if tp[0] == topic and tp in beyond:
                        disc.missing[(group, tp)] = (
                            f"{dst_topic} has {partitions} partitions on destination"
                        )
    active = [g for g in groups if g not in disc.refusals]
    disc.previous = {g: dst_offsets[g] for g in active}
    # The distinct partitions, gathered by set unions (C speed) rather than a Python loop over
    # every group partition.
    needed: set[TopicPartitionKey] = set().union(*(disc.committed[g].keys() for g in active))
    read_bounds(disc, cfg, src, dst, needed)
    return disc


def read_bounds(
    disc: Discovery, cfg: FerryConfig, src: Cluster, dst: Cluster, needed: set[TopicPartitionKey]
) -> None:
    """Fill `disc`'s watermarks: of the `needed` source partitions and the destination
    partitions they land on (none for those `disc.missing` names), and of every partition of a
    reconciled topic on both sides (records move between partitions)."""
    missing = {tp for _g, tp in disc.missing}
    # Whether a partition lands depends on the topic and partition alone, not the group.
    exact_needed = {tp for tp in needed if not disc.is_reconciled(tp[0]) and tp not in missing}
    dst_needed = {(cfg.topics.destination_topic(t), p) for t, p in exact_needed}
    needed = set(needed)
    for topic, (n_src, n_dst) in disc.reconcile_topics.items():
        needed |= {(topic, p) for p in range(n_src)}
        dst_needed |= {(cfg.topics.destination_topic(topic), q) for q in range(n_dst)}
    disc.source_bounds, disc.destination_bounds = both_clusters(
        lambda: kafka.watermarks(src, needed), lambda: kafka.watermarks(dst, dst_needed)
    )


RECONCILE = "reconcile"
MISSING = "missing"
EXACT = "exact"


def topic_plan(
    topic: str, cfg: FerryConfig, src_topics: dict[str, int], dst_topics: dict[str, int]
) -> tuple[str, str, int] | None:
    """How a source topic's committed partitions are planned: None (not selected: internal,
    excluded or gone from the source), else (destination topic, RECONCILE | MISSING |
    EXACT, the destination's partition count)."""
    if topic.startswith("__") or not cfg.topics.matches(topic) or topic not in src_topics:
        return None
    dst_topic = cfg.topics.destination_topic(topic)
    mode = cfg.matching.partitioning_for(topic)
    is_resized = dst_topics.get(dst_topic) != src_topics[topic]
    if dst_topic in dst_topics and (mode == "reconcile" or (mode == "auto" and is_resized)):
        return dst_topic, RECONCILE, dst_topics[dst_topic]
    if dst_topic not in dst_topics:
        return dst_topic, MISSING, 0
    return dst_topic, EXACT, dst_topics[dst_topic]


def exact_partitions(disc: Discovery) -> dict[str, dict[TopicPartitionKey, int]]:
    """Per group that was not refused, the committed offsets exact matching resolves (not on
    a reconciled topic, with a destination partition). The group's own dict when nothing is
    left out: ten thousand groups' offsets are not copied."""
    out = {}
    is_plain = not disc.missing and not disc.reconcile_topics  # the common case: no scan
    for group in disc.groups:
        if group in disc.refusals:
            continue
        offsets = disc.committed[group]
        if not is_plain and any(
            (group, tp) in disc.missing or disc.is_reconciled(tp[0]) for tp in offsets
        ):
            offsets = {
                tp: o
                for tp, o in offsets.items()
                if (group, tp) not in disc.missing and not disc.is_reconciled(tp[0])
            }
        if offsets:
            out[group] = offsets
    return out
