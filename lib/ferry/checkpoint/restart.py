"""What a translated query needs to restart on the destination, said in the summary: the
destination's bootstrap, the topics' names for `subscribe` or `assign`, and what a
`subscribePattern` would read there (`restart_hint`, pure: names in, lines out).

Spark 4.2's Kafka source keeps every topic a subscribePattern is *found* in
(`Regex.findFirstIn` in `SubscribePatternStrategy`), not one it matches whole: on a
destination MirrorMaker 2 copies to, a broad pattern also reads its `heartbeats`,
`*.checkpoints.internal` and `mm2-offset-syncs.*` topics and any other copied topic, from the
query's startingOffsets. The pattern is a Java regex: it is checked and searched by the Spark
session itself (`rlike`, Java's `Matcher.find`, on a classic or a Spark Connect session), not
by Python's `re`, whose syntax differs (`\\p{Alpha}`, `\\Q...\\E`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from ferry.errors import UsageError
from ferry.migrate.decision import GroupDecision


def check_pattern(spark, pattern: str) -> None:  # noqa: ANN001 - a SparkSession
    """Refuse (exit 2, one line) a `--subscribe-pattern` Java's regex does not compile."""
    java_finder(spark, pattern, [""])


def java_finder(spark, pattern: str | None, names: Iterable[str]) -> Callable[[str], bool]:  # noqa: ANN001
    """Whether `pattern` is found in each of `names` (Java's `Pattern.find`, as Spark's Kafka
    source searches a subscribePattern), evaluated once by the session, as a lookup."""
    if pattern is None:
        return lambda _name: False
    from pyspark.sql import functions as F

    names = sorted(set(names))
    try:
        df = spark.createDataFrame([(n,) for n in names], "name string")
        found = {r[0] for r in df.where(F.col("name").rlike(pattern)).collect()}
    except Exception as exc:  # noqa: BLE001 - Java's PatternSyntaxException, however wrapped
        reason = " ".join(str(exc).split())
        at = reason.find("PatternSyntaxException")
        reason = (reason[at:] if at >= 0 else reason).split(" at java.", 1)[0]
        raise UsageError(
            f"--subscribe-pattern {pattern!r}: not a Java regex: {reason[:240]}"
        ) from None
    return found.__contains__


# Topics MirrorMaker 2 keeps on a cluster it copies to, which a broad subscribePattern catches.
MM2_INTERNAL = re.compile(r"(.*\.)?(heartbeats|checkpoints\.internal)$|^mm2-.*")


def restart_hint(
    decisions: Mapping[str, GroupDecision],
    dst_bootstrap: str,
    dst_only_topics: list[str],
    pattern: str | None,
    finds: Callable[[str], bool] | None = None,
) -> list[str]:
    """What the restarted query needs: the destination's bootstrap and its topics' names, and
    which destination topics the source lacks (MirrorMaker 2's own among them) a
    subscribePattern would also read, from earliest (`pattern`: the query's, when given;
    `finds(name)`: whether it is found in a name, as Spark searches it: `java_finder`; by
    default Python's `re.search`, which agrees for plain patterns)."""
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
        found = finds or (lambda name: re.search(pattern, name) is not None)
        missed = [t for t in topics if not found(t)]
        caught = [t for t in dst_only_topics if t not in partitions and found(t)]
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
