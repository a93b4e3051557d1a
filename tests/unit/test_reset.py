"""Reset specs, clamping, scopes and the CSV format (kafka-consumer-groups semantics)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ferry.groups.reset import (
    ResetError,
    Target,
    format_offsets_csv,
    parse_datetime,
    parse_duration,
    parse_offsets_csv,
    parse_scope,
    resolve_targets,
    scoped_partitions,
)

BOUNDS = {("t", 0): (10, 100), ("t", 1): (0, 50), ("u", 0): (0, 0)}
COMMITTED = {("t", 0): 40, ("u", 0): 0}


def offsets(spec, value=None, parts=(("t", 0), ("t", 1)), at_time=None):
    targets = resolve_targets("g", spec, value, parts, COMMITTED, BOUNDS, at_time)
    return {(t.topic, t.partition): (t.new_offset, t.note) for t in targets}


def test_to_earliest_latest_current():
    assert offsets("to_earliest") == {("t", 0): (10, None), ("t", 1): (0, None)}
    assert offsets("to_latest") == {("t", 0): (100, None), ("t", 1): (50, None)}
    # a partition without a committed offset goes to log end, as with the stock tool
    assert offsets("to_current") == {("t", 0): (40, None), ("t", 1): (50, None)}


def test_to_current_keeps_a_committed_offset_outside_the_log():
    """As the stock tool: --to-current is the committed offset unchanged (the backup recipe
    exports it), noted when outside the log, never clamped."""
    low = resolve_targets("g", "to_current", None, [("t", 0)], {("t", 0): 3}, BOUNDS)
    assert [(t.new_offset, t.note) for t in low] == [(3, "kept 3, below log start 10")]
    high = resolve_targets("g", "to_current", None, [("t", 1)], {("t", 1): 60}, BOUNDS)
    assert [(t.new_offset, t.note) for t in high] == [(60, "kept 60, past log end 50")]


def test_to_offset_is_clamped_on_both_ends_and_says_so():
    assert offsets("to_offset", 5) == {
        ("t", 0): (10, "clamped from 5 to log start 10"),
        ("t", 1): (5, None),
    }
    assert offsets("to_offset", 70) == {
        ("t", 0): (70, None),
        ("t", 1): (50, "clamped from 70 to log end 50"),
    }


def test_shift_by():
    assert offsets("shift_by", -35, parts=[("t", 0)]) == {
        ("t", 0): (10, "clamped from 5 to log start 10")
    }
    assert offsets("shift_by", 7, parts=[("t", 0)]) == {("t", 0): (47, None)}
    with pytest.raises(ResetError, match=r"^group g: t\[1\] has no committed offset to shift$"):
        offsets("shift_by", 1)


def test_datetime_falls_back_to_log_end():
    assert offsets("to_datetime", None, at_time={("t", 0): 42, ("t", 1): None}) == {
        ("t", 0): (42, None),
        ("t", 1): (50, None),
    }


def test_from_file_and_unknown_partition():
    assert offsets("from_file", {("t", 0): 99, ("t", 1): 51}) == {
        ("t", 0): (99, None),
        ("t", 1): (50, "clamped from 51 to log end 50"),
    }
    with pytest.raises(ResetError, match=r"t\[7\] does not exist"):
        offsets("to_earliest", parts=[("t", 7)])


def test_previous_offset_is_kept():
    targets = resolve_targets("g", "to_latest", None, [("t", 0), ("t", 1)], COMMITTED, BOUNDS)
    assert [t.previous_offset for t in targets] == [40, None]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("P1D", timedelta(days=1)),
        ("PT30M", timedelta(minutes=30)),
        ("P1DT2H3M4S", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("pt0.5s", timedelta(milliseconds=500)),
    ],
)
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "P", "PT", "1D", "P1H", "P1DT", "PT-5M", "P1W"])
def test_parse_duration_rejects(text):
    with pytest.raises(ResetError, match="not an ISO-8601 duration"):
        parse_duration(text)


def test_parse_datetime_defaults_to_utc():
    utc = timezone.utc
    assert parse_datetime("2026-01-31T12:00:00") == datetime(2026, 1, 31, 12, tzinfo=utc)
    assert parse_datetime("2026-01-31T12:00:00Z") == datetime(2026, 1, 31, 12, tzinfo=utc)
    assert parse_datetime("2026-01-31T14:00:00+02:00") == datetime(2026, 1, 31, 12, tzinfo=utc)
    assert parse_datetime("2026-01-31T12:00:00.250") == datetime(
        2026, 1, 31, 12, 0, 0, 250000, tzinfo=utc
    )
    with pytest.raises(ResetError, match="not an ISO-8601 date-time"):
        parse_datetime("yesterday")


def test_parse_scope():
    assert parse_scope(["a", "b:1,0", "b:3", "a:2"]) == {"a": None, "b": (0, 1, 3)}
    for bad in ("b:x", ":1", "b:", "b:-1"):
        with pytest.raises(ResetError):
            parse_scope([bad])


def test_scoped_partitions():
    topics = {"t": 2, "u": 1, "v": 3}
    # --all-topics: the committed partitions only (t[1] has no commit), as the stock tool
    assert scoped_partitions(None, COMMITTED, topics) == [("t", 0), ("u", 0)]
    assert scoped_partitions({"v": None}, COMMITTED, topics) == [("v", 0), ("v", 1), ("v", 2)]
    assert scoped_partitions({"v": (2,)}, COMMITTED, topics) == [("v", 2)]
    with pytest.raises(ResetError, match="topic w does not exist"):
        scoped_partitions({"w": None}, COMMITTED, topics)
    with pytest.raises(ResetError, match="there is no partition 5"):
        scoped_partitions({"v": (5,)}, COMMITTED, topics)


def test_csv_round_trips_one_group_and_several():
    targets = [Target("g", "t", 1, None, 5), Target("g", "t", 0, 3, 7)]
    text = format_offsets_csv(targets, with_group=False)
    assert text == "t,0,7\nt,1,5\n"
    assert parse_offsets_csv(text) == {"": {("t", 0): 7, ("t", 1): 5}}
    many = targets + [Target("h", "u", 0, None, 9)]
    text = format_offsets_csv(many, with_group=True)
    assert text == "g,t,0,7\ng,t,1,5\nh,u,0,9\n"
    assert parse_offsets_csv(text) == {"g": {("t", 0): 7, ("t", 1): 5}, "h": {("u", 0): 9}}


@pytest.mark.parametrize(
    "text, message",
    [
        ("t,0,1\nt,x,2\n", r"^f.csv line 2: partition and offset must be integers"),
        ("t,0,1\n\nt,1\n", r"^f.csv line 3: expected topic,partition,offset"),
        ("t,0,1\ng,t,1,2\n", r"^f.csv line 2: 4 fields where earlier lines have 3"),
        ("t,0,1\nt,0,2\n", r"^f.csv line 2: t\[0\] appears twice"),
        ("t,0,-1\n", r"^f.csv line 1: partition and offset must be >= 0"),
        (",0,1\n", r"^f.csv line 1: empty group or topic"),
        ("\n\n", r"^f.csv has no offsets"),
    ],
)
def test_malformed_csv_names_the_line(text, message):
    with pytest.raises(ResetError, match=message):
        parse_offsets_csv(text, "f.csv")


def test_selection_reads_a_file_of_several_groups_narrowed_by_group(tmp_path):
    from ferry.errors import NoGroupsError, UsageError
    from ferry.groups.selection import check_scope, read_offsets_file, reset_selection

    plan = tmp_path / "plan.csv"
    plan.write_text("app-1,t,0,5\napp-2,t,1,7\nother,t,0,1\n")
    # A file of several groups needs no cluster to know its groups.
    chosen = reset_selection(None, "app-.*", ["t:0"], False, str(plan))  # type: ignore[arg-type]
    assert chosen.groups == ["app-1", "app-2"]
    assert chosen.scope == {"t": (0,)}
    assert chosen.file_offsets is not None and chosen.file_offsets["app-2"] == {("t", 1): 7}
    with pytest.raises(NoGroupsError, match="no group in .*plan.csv matches --group x.*"):
        reset_selection(None, "x.*", None, False, str(plan))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="cannot read --from-file .*missing.csv"):
        read_offsets_file(str(tmp_path / "missing.csv"))
    bad = tmp_path / "bad.csv"
    bad.write_text("t,0,5\nt,x,1\n")
    with pytest.raises(UsageError, match="line 2"):
        read_offsets_file(str(bad))
    with pytest.raises(UsageError, match="reset needs a scope"):
        reset_selection(None, "g", None, False, None)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="--topic 't:x'"):
        reset_selection(None, "g", ["t:x"], False, None)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="topic nope does not exist"):
        check_scope({"nope": None}, {"t": 2})
    with pytest.raises(UsageError, match="has 2 partitions; there is no partition 5"):
        check_scope({"t": (5,)}, {"t": 2})
    check_scope(None, {})
