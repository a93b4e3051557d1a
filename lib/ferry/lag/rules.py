"""Consumer lag evaluation after LinkedIn Burrow's rules, in plain Python (no Spark).

The one source of truth for the rules: `ferry.lag.evaluation` builds each partition's window
from the lag history and calls these functions in its grouped Spark evaluation.

Written from Burrow's `core/internal/evaluator/caching.go` (`evaluatePartitionStatus`,
`calculatePartitionStatus`, the `checkIf*` / `isLagAlwaysNotZero` rules and
`evaluateConsumerStatus`) and `core/internal/storage/inmemory.go` (how `CurrentLag` is
derived), at linkedin/Burrow commit ced55ba9.

A partition is judged on a window of committed offsets, oldest first. Empty slots (None) are
ignored; only the non-empty entries ("the window") are evaluated. `partition_status` applies,
in this order, the first rule that matches:

1. Empty window (no non-empty entries) -> OK; nothing can be judged.
2. Current lag <= `allowed_lag` -> OK. No rule below can fire while the consumer is (within
   the allowance) caught up, so a stopped consumer with no lag is OK.
3. STOP: now - last commit timestamp > last - first commit timestamp (strictly greater), unless
   some broker offset seen over the window is <= the last committed offset (the consumer was
   caught up moments ago, so Burrow delays the alert).
4. REWIND: find the first entry whose offset is lower than its predecessor's; REWIND unless a
   later entry (from that one on) reaches the predecessor's offset again ("recovered"). A rewind
   that has rolled out of the window is invisible, hence OK. Like Burrow only the first rewind
   in the window is examined.
5. Only if no entry's lag is <= `allowed_lag` (entries with unknown lag are skipped; all
   unknown counts as "never zero"):
   a. STALL: every offset in the window is the same. A single entry is trivially flat, so it
      is STALL when it gets this far (it needs now == its timestamp, or a broker offset at or
      below it, to escape rule 3).
   b. WARN: lag never decreases from one known lag to the next.
6. Otherwise OK.

`allowed_lag` is Burrow's evaluator `allowed-lag` (default 0): it is compared both to the current
lag (rule 2) and to each entry's lag (rule 5), where "lag <= allowed_lag" counts as zero.

`group_status` follows `evaluateConsumerStatus`: status is the worst partition status with
STOP/STALL/REWIND all reported as ERR; `complete` is the fraction of partitions whose own
`complete` is exactly 1.0 (not an average), 0.0 with no partitions; `maxlag` is the partition
with the highest current lag; `totallag` sums current lags.

Deviations from Burrow:
- Time is taken in milliseconds (`now_ms`); Burrow uses whole seconds * 1000.
- None slots anywhere are dropped; Burrow's ring buffer only ever has them at the start, where
  it trims them. `partition_complete` is the fraction of non-empty slots, which equals Burrow's
  value for leading empties; an all-empty window gives 0.0 where Burrow computes 1/len.
- No `minimum-complete` gate: Burrow's default of 0 always evaluates, which is what this does.
- Default current lag is last broker offset - last committed offset, floored at 0 as Burrow's
  storage does; with no broker offsets at all it is 0 (Burrow always has one).
- Ties for `maxlag` go to the first partition in (topic, partition) order; Burrow walks a Go
  map, so its pick among equals is arbitrary.
"""

from __future__ import annotations

from typing import Any

from ferry.status import GROUP_LAG_STATUSES, PARTITION_LAG_STATUSES, LagStatus

PARTITION_STATUSES = PARTITION_LAG_STATUSES
GROUP_STATUSES = GROUP_LAG_STATUSES


def partition_complete(offsets: list[dict | None]) -> float:
    """Fraction of the window's slots that hold a commit (0.0 for an empty window)."""
    if not offsets:
        return 0.0
    filled = sum(1 for entry in offsets if entry is not None)
    return filled / len(offsets)


def partition_status(
    offsets: list[dict | None],
    broker_offsets: list[int],
    now_ms: int,
    allowed_lag: int = 0,
    current_lag: int | None = None,
) -> LagStatus:
    """Burrow status of one partition: OK, WARN, STOP, STALL or REWIND (see module docstring)."""
    if allowed_lag < 0:
        raise ValueError(f"allowed_lag must be >= 0, got {allowed_lag}")
    window = [entry for entry in offsets if entry is not None]
    if not window:
        return LagStatus.OK
    if current_lag is None:
        current_lag = _default_current_lag(window, broker_offsets)
    if current_lag <= allowed_lag:
        return LagStatus.OK

    if _stopped(window, now_ms) and not _recent_lag_zero(window, broker_offsets):
        return LagStatus.STOP

    # Checked before the zero-lag rule: a consumer at zero lag that rewinds to earliest would
    # otherwise look OK (zero lag in history), then OK again once that history ages out.
    rewind_at = _rewind_index(window)
    if rewind_at is not None and not _rewind_recovered(window, rewind_at):
        return LagStatus.REWIND

    if _lag_always_nonzero(window, allowed_lag):
        if _stalled(window):
            return LagStatus.STALL
        if _lag_not_decreasing(window):
            return LagStatus.WARN
    return LagStatus.OK


def group_status(partitions: list[dict]) -> dict:
    """Aggregate evaluated partitions into Burrow's group result.

    Each partition dict needs `topic`, `partition`, `status`, `current_lag` and `complete`; any
    other keys (e.g. `start`, `end`) ride along unchanged, so `maxlag` is the input dict itself.
    """
    ordered = sorted(partitions, key=lambda p: (p["topic"], p["partition"]))
    status = LagStatus.OK
    maxlag: dict | None = None
    total_lag = 0
    fully_complete = 0
    for part in ordered:
        if part["status"] not in PARTITION_STATUSES:
            raise ValueError(f"unknown partition status {part['status']!r}")
        group_level = LagStatus(part["status"]).for_group
        if GROUP_STATUSES.index(group_level) > GROUP_STATUSES.index(status):
            status = group_level
        # Strictly greater keeps the first of equal lags, making the pick deterministic.
        if maxlag is None or part["current_lag"] > maxlag["current_lag"]:
            maxlag = part
        total_lag += part["current_lag"]
        if part["complete"] == 1.0:
            fully_complete += 1
    count = len(ordered)
    result: dict[str, Any] = {
        "status": status,
        "complete": fully_complete / count if count else 0.0,
        "maxlag": maxlag,
        "totallag": total_lag,
        "partitions": ordered,
        "partition_count": count,
    }
    return result


def _default_current_lag(window: list[dict], broker_offsets: list[int]) -> int:
    if not broker_offsets:
        return 0
    # Broker offsets are only sampled periodically, so a commit can be ahead of the last one.
    return max(broker_offsets[-1] - window[-1]["offset"], 0)


def _stopped(window: list[dict], now_ms: int) -> bool:
    first_ts = window[0]["timestamp"]
    last_ts = window[-1]["timestamp"]
    return now_ms - last_ts > last_ts - first_ts


def _recent_lag_zero(window: list[dict], broker_offsets: list[int]) -> bool:
    last_offset = window[-1]["offset"]
    return any(broker <= last_offset for broker in broker_offsets)


def _rewind_index(window: list[dict]) -> int | None:
    for i in range(1, len(window)):
        if window[i]["offset"] < window[i - 1]["offset"]:
            return i
    return None


def _rewind_recovered(window: list[dict], rewind_at: int) -> bool:
    # Rebalances can re-commit a slightly older offset; reaching the pre-rewind offset again
    # means no work was actually lost.
    previous = window[rewind_at - 1]["offset"]
    return any(entry["offset"] >= previous for entry in window[rewind_at:])


def _lag_always_nonzero(window: list[dict], allowed_lag: int) -> bool:
    return not any(
        entry.get("lag") is not None and entry["lag"] <= allowed_lag for entry in window
    )


def _stalled(window: list[dict]) -> bool:
    first = window[0]["offset"]
    return all(entry["offset"] == first for entry in window)


def _lag_not_decreasing(window: list[dict]) -> bool:
    lags = [entry["lag"] for entry in window if entry.get("lag") is not None]
    return all(later >= earlier for earlier, later in zip(lags, lags[1:], strict=False))
