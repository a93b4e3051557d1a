"""What a translated query needs to restart on the destination, said in the summary: the
destination's bootstrap, the topics' names for `subscribe` or `assign`, and what a
`subscribePattern` would read there (pure: names in, lines out).

Spark 4.2's Kafka source keeps every topic a subscribePattern is *found* in
(`Regex.findFirstIn` in `SubscribePatternStrategy`), not one it matches whole: on a
destination MirrorMaker 2 copies to, a broad pattern also reads its `heartbeats`,
`*.checkpoints.internal` and `mm2-offset-syncs.*` topics and any other copied topic, from the
query's startingOffsets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ferry.migrate.decision import GroupDecision

# Topics MirrorMaker 2 keeps on a cluster it copies to, which a broad subscribePattern catches.
MM2_INTERNAL = re.compile(r"(.*\.)?(heartbeats|checkpoints\.internal)$|^mm2-.*")


def restart_hint(
    decisions: Mapping[str, GroupDecision],
    dst_bootstrap: str,
    dst_only_topics: list[str],
    pattern: str | None,
) -> list[str]:
    """What the restarted query needs: the destination's bootstrap and its topics' names, and
    which destination topics the source lacks (MirrorMaker 2's own among them) a
    subscribePattern would also read, from earliest (`pattern`: the query's, when given)."""
    partitions: dict[str, set[int]] = {}
    for d in decisions.values():
        for topic, partition in d.offsets:
            partitions.setdefault(topic, set()).add(partition)
    if not partitions:
        return []
    assign = ",".join(
        f'"{t}":[{",".join(str(p) for p in sorted(ps))}]' for t, ps in sorted(partitions.items())
    )
    if len(assign) > 200:  # hundreds of partitions: the option's shape, not every number
        assign = ",".join(f'"{t}":[0..{max(ps)}]' for t, ps in sorted(partitions.items()))
    topics = sorted(partitions)
    lines = [
        f"restart the query with kafka.bootstrap.servers={dst_bootstrap} and "
        f"subscribe={','.join(topics)} (or assign={{{assign}}})"
    ]
    exact = "^(" + "|".join(re.escape(t) for t in topics) + ")$"
    if pattern is not None:
        # Spark 4.2's Kafka source keeps a topic the pattern is *found* in (Regex.findFirstIn
        # in SubscribePatternStrategy), not one it matches whole: `orders` reads
        # `source.orders` too.
        missed = [t for t in topics if not re.search(pattern, t)]
        caught = [t for t in dst_only_topics if t not in partitions and re.search(pattern, t)]
        if missed:
            lines.append(
                f"subscribePattern {pattern} does not match {', '.join(missed)}: the restarted "
                f"query would not read it; use {exact}"
            )
        if caught:
            lines.append(
                f"subscribePattern {pattern} also matches {_few(caught)} on the destination, "
                f"which the source does not have: the query would read it from its "
                f"startingOffsets (AvailableNow with an uncommitted batch fails); use {exact}"
            )
        if not missed and not caught:
            lines.append(f"subscribePattern {pattern} matches exactly these topics")
    elif internal := [t for t in dst_only_topics if MM2_INTERNAL.search(t)]:
        lines.append(
            f"a subscribePattern must match these names and nothing else: the destination also "
            f"has {_few(internal)} (MirrorMaker 2's), which a broad pattern would read from "
            f"its startingOffsets; give --subscribe-pattern to check yours, or use {exact}"
        )
    else:
        lines.append(
            "a subscribePattern must match these names and no other destination topic; give "
            "--subscribe-pattern to check yours"
        )
    return lines


def _few(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
