"""Burrow's consumer lag evaluation rules (ferry.lag.rules), one rule or edge case per test, and how
the lag history becomes Burrow windows (ferry.lag.history)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from ferry.lag.rules import (
    GROUP_STATUSES,
    PARTITION_STATUSES,
    group_status,
    partition_complete,
    partition_status,
)

T0 = 1_700_000_000_000
STEP = 60_000  # one commit a minute


def window(offsets: list[int], lags: list[int | None], start: int = T0) -> list[dict | None]:
    """Commits one STEP apart starting at `start`, oldest first."""
    return [
        {"offset": off, "timestamp": start + i * STEP, "lag": lag}
        for i, (off, lag) in enumerate(zip(offsets, lags, strict=True))
    ]


def last_ts(entries: list[dict | None]) -> int:
    return [e for e in entries if e is not None][-1]["timestamp"]


# A moment shortly after the last commit: never STOP for a multi-entry window.
def soon(entries: list[dict | None]) -> int:
    return last_ts(entries) + 1_000


def test_status_constants() -> None:
    assert PARTITION_STATUSES == ("OK", "WARN", "STOP", "STALL", "REWIND")
    assert GROUP_STATUSES == ("OK", "WARN", "ERR")


# --- empty windows and completeness -------------------------------------------------------


def test_empty_window_is_ok_with_zero_complete() -> None:
    assert partition_status([], [5000], T0, current_lag=100) == "OK"
    assert partition_complete([]) == 0.0


def test_all_empty_slots_is_ok_with_zero_complete() -> None:
    slots: list[dict | None] = [None, None, None]
    assert partition_status(slots, [5000], T0, current_lag=100) == "OK"
    assert partition_complete(slots) == 0.0


def test_full_window_is_complete() -> None:
    assert partition_complete(window([1, 2, 3, 4], [0, 0, 0, 0])) == 1.0


def test_leading_empty_slots_lower_complete() -> None:
    slots = [None, None, *window([1000, 2000, 3000], [100, 150, 200])]
    assert partition_complete(slots) == pytest.approx(0.6)


def test_leading_empty_slots_are_ignored_by_the_rules() -> None:
    entries = window([1000, 2000, 3000], [100, 150, 200])
    padded = [None, None, *entries]
    now = soon(entries)
    assert partition_status(entries, [3200], now) == "WARN"
    assert partition_status(padded, [3200], now) == "WARN"
    # The span is taken from the first real commit, so padding cannot hide a STOP either.
    late = last_ts(entries) + 2 * STEP + 1
    assert partition_status(padded, [3200], late) == "STOP"


def test_interior_empty_slot_counts_against_complete_and_is_skipped() -> None:
    a, b = window([1000, 2000], [100, 150])
    slots = [a, None, b]
    assert partition_complete(slots) == pytest.approx(2 / 3)
    assert partition_status(slots, [2150], soon(slots)) == "WARN"


# --- current lag and allowed lag -----------------------------------------------------------


def test_default_current_lag_uses_last_broker_offset() -> None:
    stalled = window([1000, 1000, 1000], [10, 20, 30])
    now = soon(stalled)
    # Burrow takes the last broker sample, not the largest: [2000, 1000] means lag 0, not 1000.
    assert partition_status(stalled, [900, 1030], now) == "STALL"
    assert partition_status(stalled, [2000, 1000], now) == "OK"


def test_default_current_lag_is_floored_at_zero() -> None:
    stalled = window([1000, 1000, 1000], [10, 20, 30])
    # Broker sample older than the commit: negative lag would be nonsense, Burrow uses 0.
    assert partition_status(stalled, [950], soon(stalled)) == "OK"


def test_default_current_lag_without_broker_offsets_is_zero() -> None:
    stalled = window([1000, 1000, 1000], [10, 20, 30])
    assert partition_status(stalled, [], soon(stalled)) == "OK"


def test_explicit_current_lag_overrides_broker_offsets() -> None:
    stalled = window([1000, 1000, 1000], [10, 20, 30])
    now = soon(stalled)
    assert partition_status(stalled, [1500], now, current_lag=0) == "OK"
    assert partition_status(stalled, [1000], now, current_lag=30) == "STALL"


def test_current_lag_within_allowed_lag_is_ok() -> None:
    # Every historical lag is above both allowances, so only the current-lag gate differs.
    stalled = window([1000, 1000, 1000], [50, 60, 70])
    now = soon(stalled)
    assert partition_status(stalled, [1070], now, allowed_lag=30, current_lag=30) == "OK"
    assert partition_status(stalled, [1070], now, allowed_lag=29, current_lag=30) == "STALL"


def test_lag_within_allowed_lag_in_history_counts_as_zero() -> None:
    growing = window([1000, 2000, 3000, 4000], [5, 10, 20, 30])
    now = soon(growing)
    assert partition_status(growing, [4030], now, allowed_lag=0) == "WARN"
    assert partition_status(growing, [4030], now, allowed_lag=5) == "OK"
    assert partition_status(growing, [4030], now, allowed_lag=4) == "WARN"


def test_negative_allowed_lag_is_rejected() -> None:
    with pytest.raises(ValueError, match="allowed_lag"):
        partition_status(window([1], [1]), [2], T0, allowed_lag=-1)


# --- STOP ---------------------------------------------------------------------------------


# Burrow's own test vectors 1 and 2 (caching_test.go), its timeNow seconds turned into ms.
BURROW_VECTOR = [
    {"offset": 1000, "timestamp": 100_000, "lag": 0},
    {"offset": 2000, "timestamp": 200_000, "lag": 50},
    {"offset": 3000, "timestamp": 300_000, "lag": 100},
    {"offset": 4000, "timestamp": 400_000, "lag": 150},
    {"offset": 5000, "timestamp": 500_000, "lag": 200},
]


def test_stop_needs_silence_strictly_longer_than_the_window_span() -> None:
    # 400 s since the last commit == 400 s span: not stopped, and lag was zero -> OK.
    assert partition_status(BURROW_VECTOR, [5200], 900_000, current_lag=200) == "OK"
    # 500 s > 400 s: STOP, even though lag was zero at the start of the window.
    assert partition_status(BURROW_VECTOR, [5200], 1_000_000, current_lag=200) == "STOP"


def test_stopped_but_caught_up_is_ok() -> None:
    entries = window([1000, 2000, 3000], [50, 40, 0])
    long_after = last_ts(entries) + 100 * STEP
    assert partition_status(entries, [3000], long_after) == "OK"
    assert partition_status(entries, [3000], long_after, current_lag=0) == "OK"
    assert partition_status(entries, [3500], long_after) == "STOP"


def test_stop_delayed_while_broker_recently_at_commit() -> None:
    entries = window([1000, 2000, 3000], [50, 40, 30])
    long_after = last_ts(entries) + 100 * STEP
    # A broker offset <= the last commit means the consumer was caught up a moment ago.
    assert partition_status(entries, [3000, 3500], long_after) == "OK"
    assert partition_status(entries, [3001, 3500], long_after) == "STOP"


def test_stop_wins_over_rewind_and_stall() -> None:
    rewound = window([1000, 2000, 1500], [10, 20, 30])
    flat = window([1000, 1000, 1000], [10, 20, 30])
    long_after = last_ts(flat) + 100 * STEP
    assert partition_status(rewound, [1600], long_after) == "STOP"
    assert partition_status(flat, [1100], long_after) == "STOP"


# --- REWIND -------------------------------------------------------------------------------


def test_rewind_within_window() -> None:
    entries = window([1000, 2000, 1500, 1600, 1700], [300, 200, 700, 650, 600])
    assert partition_status(entries, [2300], soon(entries)) == "REWIND"


def test_rewind_recovered_within_window_is_not_rewind() -> None:
    # Back at 2000 after the dip: the rebalance re-commit lost nothing; lag falls -> OK.
    entries = window([1000, 2000, 1500, 2000, 2500], [300, 200, 700, 600, 100])
    assert partition_status(entries, [2600], soon(entries)) == "OK"


def test_rewind_rolled_out_of_window_is_ok() -> None:
    history = window([1000, 2000, 1500, 1600, 1700], [300, 200, 700, 650, 600])
    assert partition_status(history[:5], [2300], soon(history)) == "REWIND"
    # Sliding the same history one slot on drops the 2000 commit: no decrease left to see.
    assert partition_status(history[2:], [2300], soon(history)) == "OK"


def test_only_first_rewind_in_window_is_examined() -> None:
    # 1000 -> 900 recovers at 1000; the later 1100 -> 1050 dip is never checked (as in Burrow).
    entries = window([1000, 900, 1000, 1100, 1050], [100, 200, 150, 60, 110])
    assert partition_status(entries, [1160], soon(entries)) == "OK"


def test_rewind_wins_over_stall_and_warn_and_over_zero_lag_history() -> None:
    # Lag is zero at the start, which would make the window OK if REWIND came after rule 1.
    entries = window([5000, 5000, 0, 0], [0, 0, 5000, 5000])
    assert partition_status(entries, [5000], soon(entries)) == "REWIND"


# --- STALL --------------------------------------------------------------------------------


def test_stall_on_flat_window() -> None:
    entries = window([1000, 1000, 1000, 1000], [100, 150, 150, 200])
    assert partition_status(entries, [1200], soon(entries)) == "STALL"


def test_stall_on_single_entry() -> None:
    (entry,) = window([1000], [100])
    ts = entry["timestamp"]
    # A single commit spans 0 ms, so any later "now" is already STOP; at the same instant
    # (or with a broker sample at the commit) the one-entry window is flat -> STALL.
    assert partition_status([entry], [1100], ts) == "STALL"
    assert partition_status([entry], [1000, 1100], ts + STEP) == "STALL"
    assert partition_status([entry], [1100], ts + 1) == "STOP"


def test_single_entry_with_zero_lag_is_ok() -> None:
    (entry,) = window([1000], [0])
    assert partition_status([entry], [1100], entry["timestamp"]) == "OK"


def test_flat_window_with_zero_lag_somewhere_is_ok() -> None:
    entries = window([1000, 1000, 1000], [0, 50, 100])
    assert partition_status(entries, [1100], soon(entries)) == "OK"


def test_stall_wins_over_warn() -> None:
    # Flat offsets with rising lag match both rules; STALL is the more severe.
    entries = window([1000, 1000, 1000], [100, 200, 300])
    assert partition_status(entries, [1300], soon(entries)) == "STALL"


# --- WARN ---------------------------------------------------------------------------------


def test_warn_when_lag_never_decreases() -> None:
    entries = window([1000, 2000, 3000, 4000], [100, 100, 150, 200])
    assert partition_status(entries, [4200], soon(entries)) == "WARN"


def test_lag_dipping_once_is_ok() -> None:
    entries = window([1000, 2000, 3000, 4000], [100, 150, 140, 200])
    assert partition_status(entries, [4200], soon(entries)) == "OK"


def test_lag_reaching_zero_once_is_ok() -> None:
    entries = window([1000, 2000, 3000, 4000], [0, 100, 150, 200])
    assert partition_status(entries, [4200], soon(entries)) == "OK"


def test_unknown_lags_are_skipped() -> None:
    rising = window([1000, 2000, 3000], [100, None, 150])
    assert partition_status(rising, [3150], soon(rising)) == "WARN"
    falling = window([1000, 2000, 3000], [150, None, 100])
    assert partition_status(falling, [3100], soon(falling)) == "OK"
    # With no known lag at all nothing shows a decrease, so Burrow's rules give WARN.
    unknown = window([1000, 2000, 3000], [None, None, None])
    assert partition_status(unknown, [3100], soon(unknown)) == "WARN"


def test_progressing_consumer_with_falling_lag_is_ok() -> None:
    entries = window([1000, 2000, 3000, 4000], [400, 300, 200, 100])
    assert partition_status(entries, [4100], soon(entries)) == "OK"


# --- group status -------------------------------------------------------------------------


def part(
    topic: str, partition: int, status: str, lag: int, complete: float = 1.0, **extra: object
) -> dict:
    return {
        "topic": topic,
        "partition": partition,
        "status": status,
        "current_lag": lag,
        "complete": complete,
        **extra,
    }


def test_group_all_ok() -> None:
    parts = [part("a", 0, "OK", 5), part("a", 1, "OK", 7)]
    result = group_status(parts)
    assert result["status"] == "OK"
    assert result["complete"] == 1.0
    assert result["totallag"] == 12
    assert result["maxlag"] is parts[1]
    assert result["partition_count"] == 2
    assert set(result) == {
        "status",
        "complete",
        "maxlag",
        "totallag",
        "partitions",
        "partition_count",
    }


def test_group_warn_when_worst_is_warn() -> None:
    parts = [part("a", 0, "OK", 0), part("a", 1, "WARN", 10), part("a", 2, "OK", 1)]
    assert group_status(parts)["status"] == "WARN"


@pytest.mark.parametrize("bad", ["STOP", "STALL", "REWIND"])
def test_group_err_on_any_error_status(bad: str) -> None:
    parts = [part("a", 0, "WARN", 10), part("a", 1, bad, 0), part("a", 2, "OK", 1)]
    assert group_status(parts)["status"] == "ERR"


def test_group_complete_is_fraction_of_fully_complete_partitions() -> None:
    parts = [
        part("a", 0, "OK", 0, complete=1.0),
        part("a", 1, "OK", 0, complete=0.5),
        part("a", 2, "OK", 0, complete=1.0),
        part("a", 3, "OK", 0, complete=0.0),
    ]
    # Burrow counts complete partitions (2 of 4); an average would be 0.625.
    assert group_status(parts)["complete"] == 0.5


def test_group_maxlag_is_partition_with_largest_lag_including_extras() -> None:
    parts = [
        part("b", 0, "OK", 30, start={"offset": 1}, end={"offset": 9}),
        part("a", 0, "WARN", 80, start={"offset": 10}, end={"offset": 90}),
        part("a", 1, "OK", 20),
    ]
    result = group_status(parts)
    assert result["maxlag"] is parts[1]
    assert result["maxlag"]["end"] == {"offset": 90}
    assert result["totallag"] == 130


def test_group_maxlag_tie_goes_to_first_in_topic_partition_order() -> None:
    parts = [part("b", 0, "OK", 50), part("a", 3, "OK", 50), part("a", 1, "OK", 50)]
    assert group_status(parts)["maxlag"] is parts[2]


def test_group_partitions_sorted_numerically_without_mutating_input() -> None:
    parts = [part("b", 0, "OK", 0), part("a", 10, "OK", 0), part("a", 2, "OK", 0)]
    before = list(parts)
    result = group_status(parts)
    assert [(p["topic"], p["partition"]) for p in result["partitions"]] == [
        ("a", 2),
        ("a", 10),
        ("b", 0),
    ]
    assert parts == before


def test_group_without_partitions() -> None:
    assert group_status([]) == {
        "status": "OK",
        "complete": 0.0,
        "maxlag": None,
        "totallag": 0,
        "partitions": [],
        "partition_count": 0,
    }


def test_group_rejects_unknown_partition_status() -> None:
    with pytest.raises(ValueError, match="NOTFOUND"):
        group_status([part("a", 0, "NOTFOUND", 0)])


def test_group_from_evaluated_partitions() -> None:
    stalled = window([1000, 1000, 1000], [10, 20, 30])
    growing = window([1000, 2000, 3000], [100, 150, 200])
    now = soon(stalled)
    parts = [
        part("t", 0, partition_status(growing, [3200], now), 200, partition_complete(growing)),
        part(
            "t",
            1,
            partition_status([None, *stalled], [1030], now),
            30,
            partition_complete([None, *stalled]),
        ),
    ]
    assert [p["status"] for p in parts] == ["WARN", "STALL"]
    result = group_status(parts)
    assert result["status"] == "ERR"
    assert result["complete"] == 0.5
    assert result["maxlag"]["partition"] == 0
    assert result["totallag"] == 230


# ================================================================================ history
# ferry.lag.history: how snapshots become Burrow windows, on tiny inline DataFrames.

MIN = 60_000
CLUSTER = "k:9092"


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def ms(value: datetime) -> int:
    """Epoch ms of a collected timestamp (Spark hands out naive local datetimes)."""
    return round(value.timestamp() * 1000)


def snap(
    i: int,
    offset: int | None,
    end: int,
    *,
    group: str = "g",
    state: str = "STABLE",
    consuming: bool | None = None,
    topic: str = "t",
    partition: int = 0,
    host: str | None = None,
) -> tuple:
    """A history row for snapshot number i (one a minute from T0)."""
    is_consuming = state == "STABLE" if consuming is None else consuming
    lag = None if offset is None else end - offset
    return (
        at(T0 + i * MIN),
        CLUSTER,
        group,
        state,
        is_consuming,
        topic,
        partition,
        offset,
        0,
        end,
        lag,
        0,
        None,
        "client" if host else None,
        host,
    )


def history(spark, rows: list[tuple]):
    from ferry.lag.history import HISTORY_SCHEMA

    return spark.createDataFrame(rows, HISTORY_SCHEMA)


def entry_times(spark, rows: list[tuple]) -> list[tuple[int, int | None]]:
    """(snapshot index, entry time as minutes after T0) per row, oldest first."""
    from ferry.lag.evaluation import with_entry_time

    out = with_entry_time(history(spark, rows)).orderBy("snapshot_ms").collect()
    return [
        ((r.snapshot_ms - T0) // MIN, None if r.entry_ms is None else (r.entry_ms - T0) // MIN)
        for r in out
    ]


def test_active_snapshots_are_commits_at_snapshot_time(spark) -> None:
    rows = [snap(i, 3, 10 + i) for i in range(4)]
    assert entry_times(spark, rows) == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_inactive_offset_keeps_the_time_it_was_first_seen(spark) -> None:
    rows = [
        snap(0, 3, 10, state="EMPTY"),
        snap(1, 3, 11, state="EMPTY"),
        snap(2, 5, 12, state="EMPTY"),
        snap(3, 5, 13, state="EMPTY"),
    ]
    assert entry_times(spark, rows) == [(0, 0), (1, 0), (2, 2), (3, 2)]


def test_inactive_after_active_keeps_the_last_active_time(spark) -> None:
    # The consumer committed 7 while alive (snapshots 1 and 2), then left: 7 was last known
    # committed at snapshot 2, and stays so until the offset changes.
    rows = [
        snap(0, 3, 10),
        snap(1, 7, 11),
        snap(2, 7, 12),
        snap(3, 7, 13, state="EMPTY"),
        snap(4, 7, 14, state="EMPTY"),
        snap(5, 7, 15),
        snap(6, 7, 16, state="EMPTY"),
    ]
    assert entry_times(spark, rows) == [(0, 0), (1, 1), (2, 2), (3, 2), (4, 2), (5, 5), (6, 5)]


def test_an_offset_value_seen_again_later_is_a_new_commit(spark) -> None:
    rows = [
        snap(0, 3, 10, state="EMPTY"),
        snap(1, 5, 10, state="EMPTY"),
        snap(2, 3, 10, state="EMPTY"),
        snap(3, 3, 10, state="EMPTY"),
    ]
    assert entry_times(spark, rows) == [(0, 0), (1, 1), (2, 2), (3, 2)]


def test_nothing_committed_has_no_entry_time(spark) -> None:
    rows = [snap(0, None, 10), snap(1, None, 10, state="EMPTY"), snap(2, 4, 10, state="EMPTY")]
    assert entry_times(spark, rows) == [(0, None), (1, None), (2, 2)]


def test_entry_times_are_per_partition_and_group(spark) -> None:
    rows = [
        snap(0, 3, 10, state="EMPTY"),
        snap(1, 3, 10, state="EMPTY"),
        snap(0, 3, 10, state="EMPTY", partition=1),
        snap(1, 4, 10, state="EMPTY", partition=1),
        snap(1, 3, 10, state="EMPTY", group="h"),
    ]
    from ferry.lag.evaluation import with_entry_time

    out = with_entry_time(history(spark, rows)).collect()
    got = {
        (r.group, r.partition, (r.snapshot_ms - T0) // MIN): (r.entry_ms - T0) // MIN for r in out
    }
    assert got == {("g", 0, 0): 0, ("g", 0, 1): 0, ("g", 1, 0): 0, ("g", 1, 1): 1, ("h", 0, 1): 1}


def test_window_keeps_each_partitions_newest_snapshots(spark) -> None:
    from ferry.lag.evaluation import filter_window, with_entry_time

    rows = [snap(i, 3, 10, state="EMPTY") for i in range(5)] + [snap(4, 1, 2, partition=1)]
    out = filter_window(with_entry_time(history(spark, rows)), 3).collect()
    got = sorted((r.partition, (r.snapshot_ms - T0) // MIN, (r.entry_ms - T0) // MIN) for r in out)
    # The run started before the window: its entries keep the older time.
    assert got == [(0, 2, 0), (0, 3, 0), (0, 4, 0), (1, 4, 4)]


def test_filter_history_by_full_group_match_and_time(spark) -> None:
    from ferry.lag.history import filter_history

    rows = [snap(i, 3, 10, group=g) for g in ("orders", "orders-dlq", "pay") for i in range(3)]
    df = history(spark, rows)
    assert {r.group for r in filter_history(df, "orders").collect()} == {"orders"}
    assert {r.group for r in filter_history(df, "orders.*|pay").collect()} == {
        "orders",
        "orders-dlq",
        "pay",
    }
    until = filter_history(df, "pay", as_of_ms=T0 + MIN).collect()
    assert sorted(ms(r.snapshot_time) for r in until) == [T0, T0 + MIN]
    assert filter_history(df).count() == 9


def test_snapshot_columns_and_is_consuming(spark) -> None:
    from ferry.groups.describe import BOUNDS_SCHEMA, NEXT_RECORDS_SCHEMA, POSITIONS_SCHEMA, with_lag
    from ferry.lag.history import HISTORY_SCHEMA, with_snapshot_columns

    positions = spark.createDataFrame(
        [
            ("assigned", "STABLE", "t", 0, 5, "m1", "c1", "h1"),
            ("assigned", "STABLE", "t", 1, 5, None, None, None),  # not assigned: not committing
            ("no-members", "STABLE", "t", 0, 5, None, None, None),  # broker reports none
            ("rebalancing", "PREPARING_REBALANCE", "t", 0, 5, None, None, None),
            ("empty", "EMPTY", "t", 0, 5, None, None, None),
            ("unknown", None, "t", 0, 5, None, None, None),
        ],
        POSITIONS_SCHEMA,
    )
    bounds = spark.createDataFrame([("t", 0, 0, 9), ("t", 1, 0, 5)], BOUNDS_SCHEMA)
    nexts = spark.createDataFrame([("t", 0, 5, 5, T0 - 1000)], NEXT_RECORDS_SCHEMA)
    snapshot_df = with_snapshot_columns(with_lag(positions, bounds, nexts, T0), T0, CLUSTER)
    assert snapshot_df.schema == HISTORY_SCHEMA
    got = {(r.group, r.partition): r for r in snapshot_df.collect()}
    assert {k: r.is_consuming for k, r in got.items()} == {
        ("assigned", 0): True,
        ("assigned", 1): False,
        ("no-members", 0): True,
        ("rebalancing", 0): True,
        ("empty", 0): False,
        ("unknown", 0): False,
    }
    row = got[("assigned", 0)]
    assert (ms(row.snapshot_time), row.cluster, row.lag, row.time_lag_ms) == (T0, CLUSTER, 4, 1000)
    assert got[("assigned", 1)].lag == 0 and got[("assigned", 1)].time_lag_ms == 0


# --- evaluate_group: plain Python, no Spark ----------------------------------------------


def window_row(
    i: int,
    offset: int | None,
    end: int,
    *,
    entry: int | None = None,
    topic: str = "t",
    partition: int = 0,
    host: str | None = None,
) -> dict:
    """A windowed snapshot row as the grouped evaluation sees it (entry: commit snapshot)."""
    return {
        "cluster": CLUSTER,
        "group": "g",
        "topic": topic,
        "partition": partition,
        "snapshot_ms": T0 + i * MIN,
        "entry_ms": None if offset is None else T0 + (i if entry is None else entry) * MIN,
        "committed_offset": offset,
        "log_end_offset": end,
        "lag": None if offset is None else end - offset,
        "host": host,
        "client_id": "c" if host else None,
    }


def test_evaluate_group_windows_and_group_fields() -> None:
    from ferry.lag.evaluation import evaluate_group

    rows = [
        # p0: progressing with falling lag over 4 snapshots -> OK, complete 4/4.
        *[window_row(i, 10 * i, 10 * i + 8 - i, partition=0, host="h0") for i in range(4)],
        # p1: stalled since snapshot 1 (only 3 snapshots: one empty slot) -> STALL
        *[window_row(i, 5, 10 + i, partition=1) for i in range(1, 4)],
    ]
    out = {r["partition"]: r for r in evaluate_group(rows, 4, 0)}
    assert {p: r["status"] for p, r in out.items()} == {0: "OK", 1: "STALL"}
    assert {p: r["complete"] for p, r in out.items()} == {0: 1.0, 1: 0.75}
    assert {p: r["current_lag"] for p, r in out.items()} == {0: 5, 1: 8}
    assert {p: r["is_maxlag"] for p, r in out.items()} == {0: False, 1: True}
    p0 = out[0]
    assert (p0["owner"], p0["client_id"], p0["as_of_ms"]) == ("h0", "c", T0 + 3 * MIN)
    assert (p0["start_offset"], p0["start_committed_ms"], p0["start_lag"]) == (0, T0, 8)
    assert (p0["end_offset"], p0["end_observed_ms"], p0["end_lag"]) == (30, T0 + 3 * MIN, 5)
    for row in out.values():
        assert (row["group_status"], row["group_complete"]) == ("ERR", 0.5)
        assert (row["group_totallag"], row["group_partition_count"]) == (13, 2)


def test_evaluate_group_keeps_only_the_last_window_rows() -> None:
    from ferry.lag.evaluation import evaluate_group

    # Lag rose over the first snapshots and fell in the last two: WARN over 6, OK over 2.
    rows = [window_row(i, 10 * i, 10 * i + lag) for i, lag in enumerate([1, 2, 3, 4, 5, 3])]
    assert evaluate_group(rows, 6, 0)[0]["status"] == "OK"
    assert evaluate_group(rows[:5], 5, 0)[0]["status"] == "WARN"
    [row] = evaluate_group(rows, 2, 0)
    assert (row["status"], row["start_offset"], row["complete"]) == ("OK", 40, 1.0)


def test_evaluate_group_now_defaults_to_the_newest_snapshot() -> None:
    from ferry.lag.evaluation import evaluate_group

    # Offset 5 first seen at snapshot 0 and never again committed: entries keep time 0.
    rows = [window_row(i, 5, 10 + i, entry=0) for i in range(3)]
    [row] = evaluate_group(rows, 3, 0)
    assert (row["status"], row["as_of_ms"]) == ("STOP", T0 + 2 * MIN)
    # Evaluated at the first snapshot's own time nothing has been silent yet: STALL.
    [row] = evaluate_group(rows[:1], 3, 0)
    assert row["status"] == "STALL"
    # An active consumer's last entry is "now": never STOP as of its snapshot, but an explicit
    # now long after it is.
    active = [window_row(i, 5, 10 + i) for i in range(3)]
    assert evaluate_group(active, 3, 0)[0]["status"] == "STALL"
    assert evaluate_group(active, 3, 0, now_ms=T0 + 60 * MIN)[0]["status"] == "STOP"


def test_evaluate_group_drops_partitions_missing_from_the_newest_snapshot() -> None:
    from ferry.lag.evaluation import evaluate_group

    rows = [window_row(i, 5, 10, partition=0) for i in range(3)]
    rows += [window_row(i, 1, 10, partition=1) for i in range(2)]  # gone at snapshot 2
    out = evaluate_group(rows, 3, 0)
    assert [r["partition"] for r in out] == [0]
    assert out[0]["group_partition_count"] == 1 and out[0]["group_totallag"] == 5


def test_evaluate_group_uncommitted_partition_is_an_empty_window() -> None:
    from ferry.lag.evaluation import evaluate_group

    rows = [window_row(0, None, 10), window_row(1, None, 12), window_row(2, 4, 12)]
    [row] = evaluate_group(rows, 3, 0)
    assert (row["complete"], row["start_offset"], row["end_offset"]) == (pytest.approx(1 / 3), 4, 4)
    [row] = evaluate_group(rows[:2], 3, 0)
    assert (row["status"], row["complete"], row["current_lag"]) == ("OK", 0.0, 0)
    assert row["start_offset"] is None and row["end_committed_ms"] is None


def test_evaluate_group_allowed_lag() -> None:
    from ferry.lag.evaluation import evaluate_group

    rows = [window_row(i, 5, 8 + i) for i in range(3)]  # lags 3, 4, 5 at one offset
    assert evaluate_group(rows, 3, 2)[0]["status"] == "STALL"
    assert evaluate_group(rows, 3, 4)[0]["status"] == "OK"  # lag 4 in the window is "zero"
    assert evaluate_group(rows, 3, 5)[0]["status"] == "OK"  # current lag 5 is "zero"


# --- Spark evaluation end to end --------------------------------------------------------


def test_evaluate_history_statuses_and_schema(spark) -> None:
    from ferry.lag.evaluation import evaluate_history
    from ferry.lag.history import STATUS_SCHEMA

    rows = []
    for i in range(4):
        end = 10 + 4 * i
        rows += [
            snap(i, [2, 6, 12, 18][i], end, group="ok", host="h"),
            snap(i, [1, 2, 3, 4][i], end, group="warn"),
            snap(i, 3, end, group="stall"),
            snap(i, 5, end, group="stop", state="EMPTY"),
            snap(i, [5, 9, 4, 6][i], end, group="rewind", state="EMPTY"),
            snap(i, 3, end, group="stop-assigned-elsewhere", consuming=False),
        ]
    evaluated = T0 + 99 * MIN
    status_df = evaluate_history(history(spark, rows), 4, 0, evaluated)
    assert status_df.schema == STATUS_SCHEMA
    got = {r.group: r for r in status_df.collect()}
    assert {g: (r.status, r.group_status) for g, r in got.items()} == {
        "ok": ("OK", "OK"),
        "warn": ("WARN", "WARN"),
        "stall": ("STALL", "ERR"),
        "stop": ("STOP", "ERR"),
        "rewind": ("REWIND", "ERR"),
        # STABLE but not consuming this partition: its offset is not being committed.
        "stop-assigned-elsewhere": ("STOP", "ERR"),
    }
    ok = got["ok"]
    assert (ms(ok.evaluated_at), ms(ok.as_of), ok.window, ok.allowed_lag) == (
        evaluated,
        T0 + 3 * MIN,
        4,
        0,
    )
    assert (ok.start_offset, ms(ok.start_committed_at), ms(ok.start_observed_at)) == (2, T0, T0)
    assert (ok.end_offset, ok.end_lag, ok.owner, ok.client_id) == (18, 4, "h", "client")
    stop = got["stop"]
    assert (ms(stop.end_committed_at), ms(stop.end_observed_at)) == (T0, T0 + 3 * MIN)
    # A fixed now an hour on: everything with lag has stopped (ok was caught up "recently").
    late = evaluate_history(history(spark, rows), 4, 0, evaluated, now_ms=T0 + 63 * MIN)
    assert {r.group: r.status for r in late.collect()} == {
        "ok": "OK",
        "warn": "STOP",
        "stall": "STOP",
        "stop": "STOP",
        "rewind": "STOP",
        "stop-assigned-elsewhere": "STOP",
    }


def test_evaluate_history_shuffles_the_history_once(spark) -> None:
    from ferry.lag.evaluation import evaluate_history

    rows = [snap(i, 3, 10 + i, group=g) for i in range(3) for g in ("a", "b")]
    status_df = evaluate_history(history(spark, rows), 4, 0, T0)
    plan = status_df._jdf.queryExecution().executedPlan().toString()
    # The windows and the grouped evaluation all reuse the one hash by group.
    assert plan.count("Exchange hashpartitioning") == 1, plan
    assert "Exchange hashpartitioning(cluster#" in plan and "group#" in plan, plan


def test_status_rows_are_what_collect_gives_in_order(spark) -> None:
    from ferry.lag.evaluation import evaluate_history
    from ferry.lag.history import status_rows

    rows = [
        snap(i, o, 10 + i, group=g, partition=p)
        for i in range(3)
        for g, p, o in (("b", 0, 3), ("a", 1, 4), ("a", 0, 4 + i))
    ]
    status_df = evaluate_history(history(spark, rows), 4, 0, T0 + 7)
    collected = [
        r.asDict() for r in status_df.orderBy("cluster", "group", "topic", "partition").collect()
    ]
    assert [(r["group"], r["partition"]) for r in collected] == [("a", 0), ("a", 1), ("b", 0)]
    assert status_rows(status_df.toArrow()) == collected


# --- Burrow's JSON ------------------------------------------------------------------------


def status_row(
    partition: int, status: str, lag: int, *, is_maxlag: bool = False, group_status: str = "ERR"
) -> dict:
    return {
        "evaluated_at": at(T0),
        "as_of": at(T0),
        "cluster": CLUSTER,
        "group": "g",
        "topic": "t",
        "partition": partition,
        "status": status,
        "complete": 1.0,
        "current_lag": lag,
        "start_offset": 1,
        "start_committed_at": at(T0),
        "start_observed_at": at(T0),
        "start_lag": 3,
        "end_offset": 2,
        "end_committed_at": T0 + MIN,
        "end_observed_at": at(T0 + 2 * MIN),
        "end_lag": lag,
        "owner": None,
        "client_id": "c",
        "window": 10,
        "allowed_lag": 0,
        "group_status": group_status,
        "group_complete": 1.0,
        "group_totallag": 30,
        "group_partition_count": 2,
        "is_maxlag": is_maxlag,
    }


def test_burrow_responses_shape() -> None:
    from ferry.lag.burrow import burrow_responses

    rows = [status_row(1, "STALL", 20, is_maxlag=True), status_row(0, "OK", 10)]
    [answer] = burrow_responses(rows, host="ferry-host")
    stalled = {
        "topic": "t",
        "partition": 1,
        "owner": "",
        "client_id": "c",
        "status": "STALL",
        "start": {"offset": 1, "timestamp": T0, "observedAt": T0, "lag": 3},
        "end": {"offset": 2, "timestamp": T0 + MIN, "observedAt": T0 + 2 * MIN, "lag": 20},
        "current_lag": 20,
        "complete": 1.0,
    }
    assert answer == {
        "error": False,
        "message": "consumer status returned",
        "status": {
            "cluster": CLUSTER,
            "group": "g",
            "status": "ERR",
            "complete": 1.0,
            "partitions": [stalled],
            "partition_count": 2,
            "maxlag": stalled,
            "totallag": 30,
        },
        "request": {"url": f"/v3/kafka/{CLUSTER}/consumer/g/status", "host": "ferry-host"},
    }
    [everything] = burrow_responses(rows, show_all=True, host="h")
    assert [p["partition"] for p in everything["status"]["partitions"]] == [0, 1]
    assert everything["request"]["url"].endswith("/consumer/g/lag")


def test_burrow_responses_one_per_group_and_empty_windows() -> None:
    from ferry.lag.burrow import burrow_responses

    other = {**status_row(0, "OK", 0, is_maxlag=True, group_status="OK"), "group": "a"}
    other.update(start_offset=None, end_offset=None)
    answers = burrow_responses([status_row(0, "WARN", 5, is_maxlag=True), other], host="h")
    assert [a["status"]["group"] for a in answers] == ["a", "g"]
    assert answers[0]["status"]["partitions"] == []
    assert answers[0]["status"]["maxlag"]["start"] is None
    assert answers[1]["status"]["partitions"][0]["status"] == "WARN"


# --- lag-status --now ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000000", T0),
        ("2023-11-14T22:13:20Z", T0),
        ("2023-11-14T22:13:20", T0),
        ("2023-11-14T23:13:20+01:00", T0),
        ("2023-11-14T22:13:20.500Z", T0 + 500),
    ],
)
def test_lag_status_now_option(text: str, expected: int) -> None:
    from ferry.cli import parse_time

    assert parse_time(text, "--now") == expected


def test_lag_status_now_option_rejects_other_text() -> None:
    from ferry.cli import parse_time
    from ferry.errors import UsageError

    with pytest.raises(UsageError, match="--now 'yesterday'"):
        parse_time("yesterday", "--now")
