"""`migrate --flink-savepoint PATH --into-group NAME`: where the new savepoint cannot be used,
the translated reader positions of the savepoint's one KafkaSource committed to destination
group NAME through Ferry's guarded write path (`ferry.write.commit.execute_writes`: ledger
intent, claims, the group Empty or Dead, the forward rule, a verified write, the outcome).

The job then restarts on the destination with a NEW source uid (its old reader state is
dropped: `--allowNonRestoredState`) and `OffsetsInitializer.committedOffsets(...)` over group
NAME, and reads on from exactly the translated offsets. Run again, the group already at its
targets is ALREADY_MIGRATED (exit 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ferry.config import FerryConfig
from ferry.errors import UsageError
from ferry.kafka.cluster import Cluster
from ferry.migrate.decision import GroupDecision
from ferry.write import commit
from ferry.write.ledger import Ledger


def check_one_source(chosen: list, sets: Mapping[str, Mapping], path: str) -> str:  # noqa: ANN001
    """The one reader set a group can hold; refused (exit 2) for several KafkaSources or a
    bounded source (a group has no stopping offsets)."""
    if len(chosen) != 1:
        labels = ", ".join(s.label for s in chosen)
        raise UsageError(
            f"{path}: --into-group takes one KafkaSource, the savepoint has {len(chosen)} "
            f"({labels}): write the new savepoint instead (--execute without --into-group)"
        )
    label = chosen[0].label
    if f"{label} stop" in sets:
        raise UsageError(
            f"{path}: {label} is bounded (its splits have stopping offsets), which a group "
            "cannot hold: write the new savepoint instead"
        )
    return label


def commit_into_group(
    dst: Cluster,
    cfg: FerryConfig,
    group: str,
    decision: GroupDecision,
    rows: Callable[[], list[dict]],
    ledger: Ledger,
    progress: Callable[[str], None],
) -> None:
    """Write the reader set's destination offsets to `group`; `decision` gets the outcome."""
    cluster = dst.conf.get("bootstrap.servers")

    def group_rows() -> list[dict]:
        return [{**r, "group": group, "source_group": r["group"], "cluster": cluster}
                for r in rows()]  # fmt: skip

    write = commit.GroupWrite(group, dict(decision.offsets), group_rows)
    outcome = commit.execute_writes(dst, [write], [], ledger, cfg.ledger.lease_ms, progress)[group]
    decision.status, decision.message = outcome.status, outcome.message
