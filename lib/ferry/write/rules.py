"""The forward rule: whether writing a group's target offsets over the ones it has moves it
forward. Pure (plain mappings in, a decision out), so the plan-time decisions
(`ferry.migrate.decision`, `ferry.groups.changes`) and the check right before each write
(`ferry.write.commit`) apply the same rule without importing the write path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ferry.keys import TopicPartitionKey

DECISION_ALREADY = "already"
DECISION_FORWARD = "forward"
DECISION_MIXED = "mixed"


def _names(keys: Sequence[TopicPartitionKey], limit: int = 4) -> str:
    shown = ", ".join(f"{t}[{p}]" for t, p in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def forward_decision(
    targets: Mapping[TopicPartitionKey, int],
    current: Mapping[TopicPartitionKey, int],
    allow_rewind: bool = False,
) -> tuple[str, str | None]:
    """Whether writing `targets` over `current` moves a group forward.

    `already`: at or past the targets on every partition — nothing to write (with
    `allow_rewind`, only when equal everywhere). `forward`: nowhere ahead, so the write only
    moves offsets forward (or sets missing ones). `mixed`: ahead on some partitions and behind
    on others — refused, with the reason naming both, unless `allow_rewind`."""
    if not current:  # nothing committed yet (most groups of a cutover): no partition to sort
        return (DECISION_FORWARD if targets else DECISION_ALREADY), None
    ahead = sorted(k for k, o in targets.items() if current.get(k) is not None and current[k] > o)
    behind = sorted(k for k, o in targets.items() if current.get(k) is None or current[k] < o)
    if not behind and (not ahead or not allow_rewind):
        return DECISION_ALREADY, None
    if not ahead or allow_rewind:
        return DECISION_FORWARD, None
    return DECISION_MIXED, (
        f"destination group is ahead of the plan on {_names(ahead)} and behind on "
        f"{_names(behind)}; refused (--allow-rewind moves it back)"
    )
