"""Pure decision logic: forward-only writes, group statuses and exit codes, the restore block,
durations and one-line errors."""

from __future__ import annotations

import pytest

from ferry.cli import parse_span
from ferry.errors import UsageError, one_line
from ferry.migrate.decision import decide, exit_code
from ferry.migrate.model import Plan
from ferry.status import GroupState, GroupStatus
from ferry.write import commit, rules

A0, A1 = ("a", 0), ("a", 1)


@pytest.mark.parametrize(
    ("targets", "current", "allow_rewind", "expected"),
    [
        ({A0: 10, A1: 20}, {}, False, rules.DECISION_FORWARD),  # a new group
        ({A0: 10, A1: 20}, {A0: 5}, False, rules.DECISION_FORWARD),  # one partition unset
        ({A0: 10, A1: 20}, {A0: 10, A1: 20}, False, rules.DECISION_ALREADY),
        ({A0: 10, A1: 20}, {A0: 11, A1: 20}, False, rules.DECISION_ALREADY),  # moved on
        ({A0: 10, A1: 20}, {A0: 11, A1: 19}, False, rules.DECISION_MIXED),
        ({A0: 10, A1: 20}, {A0: 11}, False, rules.DECISION_MIXED),  # unset counts as behind
        ({A0: 10, A1: 20}, {A0: 11, A1: 19}, True, rules.DECISION_FORWARD),
        ({A0: 10, A1: 20}, {A0: 11, A1: 21}, True, rules.DECISION_FORWARD),  # rewinds
        ({A0: 10, A1: 20}, {A0: 10, A1: 20}, True, rules.DECISION_ALREADY),  # nothing to do
    ],
)
def test_forward_decision(targets, current, allow_rewind, expected):
    decision, reason = rules.forward_decision(targets, current, allow_rewind)
    assert decision == expected
    assert (reason is not None) == (decision == rules.DECISION_MIXED)


def test_mixed_reason_names_the_partitions():
    _, reason = rules.forward_decision({A0: 10, A1: 20}, {A0: 11, A1: 19})
    assert reason == (
        "destination group is ahead of the plan on a[0] and behind on a[1]; "
        "refused (--allow-rewind moves it back)"
    )


def _row(group: str, partition: int, status: str, offset: int | None, previous: int | None):
    return {
        "group": group,
        "src_topic": "a",
        "src_partition": partition,
        "dst_topic": "a",
        "dst_partition": partition,
        "destination_offset": offset,
        "previous_offset": previous,
        "status": status,
        "is_resolved": status in ("MATCHED", "MATCHED_NEXT", "EMPTY"),
    }


def _plan(rows: list[dict], notes: dict) -> Plan:
    """A plan of rows made outside matching (each row as given)."""
    extra: dict[str, list[dict]] = {}
    for row in rows:
        extra.setdefault(row["group"], []).append(row)
    return Plan({}, {}, {}, extra, notes)


def _position(partition: int, offset: int, status: str, destination: int | None) -> dict:
    return {
        "src_topic": "a",
        "src_partition": partition,
        "committed_offset": offset,
        "dst_topic": "a",
        "dst_partition": partition,
        "destination_offset": destination,
        "status": status,
        "is_resolved": status in ("MATCHED", "MATCHED_NEXT", "EMPTY"),
    }


def test_groups_get_their_positions_results_and_are_all_or_nothing():
    # Positions are matched once; "g" and "h" share a[0]@5, only "g" is also at a[1]@7,
    # which is PENDING: "g" waits whole, "h" is written, each with its own previous offsets.
    positions = {
        ("a", 0, 5): _position(0, 5, "MATCHED", 9),
        ("a", 1, 7): _position(1, 7, "PENDING", None),
    }
    plan = Plan(positions, {"g": {A0: 5, A1: 7}, "h": {A0: 5}}, {"h": {A0: 3}})
    assert [r["group"] for r in plan.rows] == ["g", "g", "h"]
    assert plan.rows_of("h") == [
        {"group": "h", **positions[("a", 0, 5)], "previous_offset": 3, "note": None}
    ]
    decisions = decide(plan, allow_rewind=False)
    assert decisions["g"].status == "PENDING" and decisions["g"].offsets == {}
    assert decisions["h"].status == "READY" and decisions["h"].offsets == {A0: 9}
    plan.rows_of("h")[0]["note"] = "changed"  # rows are fresh: the plan is not
    assert plan.rows_of("h")[0]["note"] is None


def test_decide_gives_each_group_one_status():
    plan = _plan(
        [
            _row("ready", 0, "MATCHED", 10, None),
            _row("moved", 0, "MATCHED", 10, 12),
            _row("mixed", 0, "MATCHED", 10, 12),
            _row("mixed", 1, "MATCHED", 10, 8),
            _row("pending", 0, "PENDING", None, None),
            _row("pending", 1, "MATCHED", 4, None),
            _row("ambiguous", 0, "AMBIGUOUS", None, None),
            _row("ambiguous", 1, "PENDING", None, None),
        ],
        {
            "active": (GroupStatus.REFUSED, "source group is STABLE"),
            "idle": (GroupStatus.NOTHING_TO_MIGRATE, "no committed offsets on the selected topics"),
        },
    )
    decisions = decide(plan, allow_rewind=False)
    statuses = {g: d.status for g, d in decisions.items()}
    assert statuses == {
        "ready": "READY",
        "moved": "ALREADY_MIGRATED",
        "mixed": "REFUSED",
        "pending": "PENDING",
        "ambiguous": "UNRESOLVED",
        "active": "REFUSED",
        "idle": "NOTHING_TO_MIGRATE",
    }
    assert decisions["ready"].offsets == {A0: 10} and decisions["moved"].offsets == {}
    assert decide(plan, allow_rewind=True)["mixed"].status == "READY"


@pytest.mark.parametrize(
    ("statuses", "code"),
    [
        ({"a": "COMMITTED", "b": "ALREADY_MIGRATED", "c": "NOTHING_TO_MIGRATE"}, 0),
        ({"a": "READY"}, 0),
        ({"a": "COMMITTED", "b": "PENDING"}, 75),
        ({"a": "CLAIMED", "b": "PENDING"}, 75),
        ({"a": "PENDING", "b": "REFUSED"}, 1),
        ({"a": "UNKNOWN"}, 1),
        ({"a": "FAILED", "b": "COMMITTED"}, 1),
    ],
)
def test_exit_code(statuses, code):
    assert exit_code(statuses) == code


def test_restore_block_is_from_file_csv():
    outcomes = [
        commit.WriteOutcome("g1", "COMMITTED", True, None, {A1: 7, A0: 5}),
        commit.WriteOutcome("g2", "COMMITTED", True, None, {}),
    ]
    assert commit.restore_block(outcomes).splitlines() == [
        "group,topic,partition,offset",
        "g1,a,0,5",
        "g1,a,1,7",
        "(no offsets before this run: g2: delete to undo)",
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("1h", 3600), ("500ms", 0.5), ("PT5M", 300), ("p1dt1s", 86401)],
)
def test_parse_span(text, seconds):
    assert parse_span(text, "--wait") == seconds


def test_parse_span_names_the_option():
    with pytest.raises(UsageError, match=r"^--wait 'soon' is not a duration"):
        parse_span("soon", "--wait")


def test_one_line_digs_out_the_cause():
    wrapped = RuntimeError(
        "An error occurred while calling o83.count.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: boom\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(x.scala:1)"
    )
    assert one_line(wrapped) == (
        "An error occurred while calling o83.count. Job aborted due to stage failure: boom"
    )
    ours = RuntimeError("Traceback...\nferry.kafka_source.KafkaReadError: timed out reading x[0]\n")
    assert one_line(ours) == "timed out reading x[0]"


@pytest.mark.parametrize(
    ("client_name", "state", "is_inactive"),
    [
        ("EMPTY", GroupState.EMPTY, True),
        ("DEAD", GroupState.DEAD, True),
        ("STABLE", GroupState.STABLE, False),
        ("PREPARING_REBALANCING", GroupState.PREPARING_REBALANCE, False),
        ("COMPLETING_REBALANCING", GroupState.COMPLETING_REBALANCE, False),
        ("UNKNOWN", GroupState.UNKNOWN, False),
        ("SOMETHING_NEW", GroupState.UNKNOWN, False),
    ],
)
def test_inactive_rule_is_kafka_consumer_groups(client_name, state, is_inactive):
    parsed = GroupState.parse(client_name)
    assert parsed is state and parsed.is_inactive is is_inactive
    assert parsed.is_active is (not is_inactive and state is not GroupState.UNKNOWN)


def test_statuses_print_and_serialize_as_their_names():
    import json

    assert f"{GroupStatus.READY}" == str(GroupStatus.READY) == "READY"
    assert json.dumps({"s": GroupStatus.ALREADY_MIGRATED}) == '{"s": "ALREADY_MIGRATED"}'
    assert GroupState.PREPARING_REBALANCE.title == "PreparingRebalance"
