"""Compare: every plan row against the offset its destination group has committed now — the
verdict, the difference in records, whether the group is live — then the per-group and total
summary and the exit code a scheduler acts on.

Pure: plan rows (their `previous_offset` is the destination's committed offset, read by
discovery), counted spans (`ferry.migrate.difference`) and group states in; audit rows and plain
dicts out.

Verdicts (`ferry.status.AuditVerdict`): EXACT (the same next record; offsets that hold no
record between the two count as nothing), BEHIND (|difference| records delivered again), AHEAD
(difference records skipped — unless the group is live on the destination: its consumers read
them there), NO_COMMIT, or the plan's own unresolved status with its note. Exit: 0 when no
partition of a group that is not live is AHEAD and nothing is unresolved, 75 when only PENDING
rows stand in the way, 1 otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ferry.errors import EXIT_INCOMPLETE, EXIT_OK, EXIT_TRY_AGAIN
from ferry.keys import TopicPartitionKey
from ferry.migrate.model import Plan
from ferry.migrate.spans import Count, row_span, signed_difference
from ferry.output import json_fields
from ferry.status import AuditVerdict, GroupState, PartitionStatus

# One row's fields, in this order in JSON and CSV (the first ten are the table output's).
ROW_COLUMNS = [
    "group",
    "topic",
    "partition",
    "committed_offset",
    "exact_offset",
    "difference",
    "verdict",
    "is_live",
    "group_state",
    "note",
    "is_counted",
    "members",
    "source_state",
]
TABLE_COLUMNS = ROW_COLUMNS[:10]

# What an unresolved plan row means, when the plan gave no note of its own.
STATUS_NOTES = {
    PartitionStatus.PENDING: "the destination has not been written past the matching window "
    "yet: run again once the replica has caught up",
    PartitionStatus.AMBIGUOUS: "several destination records match the last consumed one with "
    "equal context (raise matching.context)",
    PartitionStatus.NOT_FOUND: "the last consumed record is not on the destination within the "
    "matching window",
    PartitionStatus.INCONSISTENT: "the last consumed record and the next one are not side by "
    "side on the destination",
    PartitionStatus.NO_DESTINATION: "no such destination partition",
}

GROUP_COUNTERS = (
    "partitions",
    "exact",
    "behind",
    "ahead",
    "no_commit",
    "unresolved",
    "pending",
    "uncounted",
    "records_delivered_again",
    "records_skipped",
    "records_ahead_live",
)


def is_live(state: GroupState, members: int) -> bool:
    """The group is consuming on the destination: an active state, or members reported."""
    return state.is_active or members > 0


@dataclass
class GroupRows:
    """Audit rows as (group, the row without its group) pairs: ten thousand groups stopped at
    the same few thousand positions share the rows but for the group, so each distinct row is
    one dict (and one JSON text) however many groups have it; 640,000 rows as a dict each, and
    encoded one by one, took seconds."""

    pairs: list[tuple[str, dict]]

    def rows(self) -> list[dict]:
        """Every row as a dict of `ROW_COLUMNS`."""
        return [{"group": group, **row} for group, row in self.pairs]

    def json_texts(self) -> Iterator[str]:
        """Every row as the JSON text `output.json_row` gives it, each distinct row encoded
        once."""
        texts: dict[int, str] = {}
        last, head = None, ""
        for group, row in self.pairs:
            if (text := texts.get(id(row))) is None:
                text = texts[id(row)] = json_fields(row, ROW_COLUMNS[1:]) + "}"
            if group != last:
                last, head = group, '{"group": ' + json.dumps(group) + ", "
            yield head + text


def audit_rows(
    plan_rows: Iterable[Mapping] | Plan,
    counts: Mapping[tuple, Count],
    destination_states: Mapping[str, str],
    destination_members: Mapping[str, int],
    source_states: Mapping[str, str],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
) -> GroupRows:
    """One audit row per plan row (group × destination partition), as `GroupRows`: a row is
    worked out once per distinct (the group's states, plan row), and a group's states once.
    `plan_rows`: plan rows, or a `Plan`, whose rows are read from its shared positions rather
    than built one by one (640,000 rows: over a second)."""
    pairs = []
    about: dict[str, tuple[GroupState, int, bool, str]] = {}
    made: dict[tuple, dict] = {}
    for group, plan, previous in _plan_rows(plan_rows):
        if (known := about.get(group)) is None:
            state = GroupState.parse(destination_states.get(group))
            members = destination_members.get(group, 0)
            source = GroupState.parse(source_states.get(group)).value
            known = about[group] = (state, members, is_live(state, members), source)
        if previous is _ROW:  # a whole plan row
            key: tuple = (
                known,
                plan["dst_topic"],
                plan["dst_partition"],
                plan.get("previous_offset"),
                plan.get("destination_offset"),
                plan["status"],
                plan["is_resolved"],
                plan.get("note"),
            )
        else:  # a plan's shared position row and the group's offset there
            key = (known, id(plan), previous)
        if (row := made.get(key)) is None:
            if previous is not _ROW:
                plan = {**plan, "previous_offset": previous, "note": None}
            row = made[key] = _audit_row(plan, known, counts, bounds)
        pairs.append((group, row))
    return GroupRows(pairs)


_ROW = object()  # `_plan_rows`: the row is a whole plan row, not a shared position


def _plan_rows(plan_rows: Iterable[Mapping] | Plan) -> Iterator[tuple[str, Mapping, object]]:
    """(group, row, the group's destination offset there) in row order: a plan's exact rows
    as its shared position rows (`Plan.rows_of`'s order: by source topic and partition); plan
    rows, and groups with rows made outside matching, as whole rows (offset `_ROW`)."""
    if not isinstance(plan_rows, Plan):
        for row in plan_rows:
            yield row["group"], row, _ROW
        return
    plan = plan_rows
    for group in plan.groups():
        if plan.extra.get(group):
            for row in plan.rows_of(group):
                yield group, row, _ROW
            continue
        previous = plan.previous.get(group) or {}
        for (topic, partition), offset in sorted(plan.exact.get(group, {}).items()):
            position = plan.positions[(topic, partition, offset)]
            yield group, position, previous.get((position["dst_topic"], position["dst_partition"]))


def _audit_row(
    plan: Mapping,
    known: tuple[GroupState, int, bool, str],
    counts: Mapping[tuple, Count],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
) -> dict:
    """A plan row's audit row, without its group (ROW_COLUMNS order after `group`)."""
    state, members, live, source_state = known
    row = {
        "topic": plan["dst_topic"],
        "partition": plan["dst_partition"],
        "committed_offset": plan.get("previous_offset"),
        "exact_offset": None,
        "difference": None,
        "verdict": None,
        "is_live": live,
        "group_state": state.value,
        "note": None,
        "is_counted": None,
        "members": members,
        "source_state": source_state,
    }
    notes = [plan["note"]] if plan.get("note") else []
    if not plan["is_resolved"]:
        status = PartitionStatus(plan["status"])
        row["verdict"] = AuditVerdict.unresolved(status)
        notes = notes or [STATUS_NOTES.get(status, "")]
    else:
        row["exact_offset"] = plan["destination_offset"]
        verdict, difference, counted, more = _compare(plan, counts, live, bounds)
        row.update(verdict=verdict, difference=difference, is_counted=counted)
        notes += more
    row["note"] = "; ".join(n for n in notes if n) or None
    return row


def _compare(
    plan: Mapping,
    counts: Mapping[tuple, Count],
    live: bool,
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
) -> tuple[AuditVerdict, int | None, bool | None, list[str]]:
    """(verdict, difference, is_counted, notes) of a resolved plan row."""
    committed, exact = plan.get("previous_offset"), plan["destination_offset"]
    if committed is None:
        return AuditVerdict.NO_COMMIT, None, None, [
            "no committed offset on the destination: consumers would start at "
            "auto.offset.reset"
        ]
    if committed == exact:
        return AuditVerdict.EXACT, 0, True, []
    records, counted = counts[row_span(plan)]  # type: ignore[index]
    difference = signed_difference(committed, exact, records)
    notes = []
    start, end = bounds.get((plan["dst_topic"], plan["dst_partition"]), (None, None))
    is_outside = (start is not None and committed < start) or (end is not None and committed > end)
    if is_outside:
        before = start is not None and committed < start
        where = f"before the log start {start}" if before else f"past the log end {end}"
        notes.append(
            f"committed offset {committed} is {where}: consumers would reset per "
            "auto.offset.reset (difference counts the records in the log)"
        )
    if not counted:
        notes.append(
            f"not counted: {records} offsets apart, more than audit.max_count_offsets; the "
            "difference is the offset span, an upper bound on the records"
        )
    elif records == 0 and not is_outside:
        notes.append(
            f"offsets {min(committed, exact)}..{max(committed, exact) - 1} hold no record "
            "(transaction markers, compaction gaps): the same next record"
        )
        return AuditVerdict.EXACT, 0, True, notes
    if committed < exact:
        return AuditVerdict.BEHIND, difference, counted, notes
    if live:
        notes.append(
            "the group is live on the destination: its consumers have read these records "
            "there (expected, not a loss)"
        )
    return AuditVerdict.AHEAD, difference, counted, notes


def exit_code(rows: Sequence[Mapping]) -> int:
    """0 when no partition of a group that is not live is AHEAD and nothing is unresolved; 75
    when only PENDING rows stand in the way; 1 otherwise."""
    blocking = {r["verdict"] for r in rows if _blocks(r)}
    if not blocking:
        return EXIT_OK
    return EXIT_TRY_AGAIN if blocking == {AuditVerdict.PENDING} else EXIT_INCOMPLETE


def _blocks(row: Mapping) -> bool:
    verdict = AuditVerdict(row["verdict"])
    return verdict.is_unresolved or (verdict == AuditVerdict.AHEAD and not row["is_live"])


def summarize(rows: Sequence[Mapping] | GroupRows, groups: Iterable[str] = ()) -> dict:
    """{"groups": [one summary per group], "total": {...}} (see README, "audit"). `groups`
    adds groups that have no rows (no committed offsets on the selected topics)."""
    pairs = rows.pairs if isinstance(rows, GroupRows) else [(r["group"], r) for r in rows]
    by_group: dict[str, list[Mapping]] = {g: [] for g in groups}
    for group, r in pairs:
        by_group.setdefault(group, []).append(r)
    summaries = [_group_summary(g, rs) for g, rs in sorted(by_group.items())]
    total: dict = {
        "groups": len(summaries),
        "live_groups": sum(1 for s in summaries if s["is_live"]),
        **{c: sum(s[c] for s in summaries) for c in GROUP_COUNTERS},
        # each distinct row once: the verdicts decide, not how many groups share them
        "exit_code": exit_code(list({id(r): r for _g, r in pairs}.values())),
    }
    return {"groups": summaries, "total": total}


def _group_summary(group: str, rows: Sequence[Mapping]) -> dict:
    verdicts = [AuditVerdict(r["verdict"]) for r in rows]
    live = bool(rows) and rows[0]["is_live"]
    ahead = sum(r["difference"] or 0 for r in rows if r["verdict"] == AuditVerdict.AHEAD)
    return {
        "group": group,
        "group_state": rows[0]["group_state"] if rows else None,
        "is_live": live,
        "members": rows[0]["members"] if rows else None,
        "partitions": len(rows),
        "exact": verdicts.count(AuditVerdict.EXACT),
        "behind": verdicts.count(AuditVerdict.BEHIND),
        "ahead": verdicts.count(AuditVerdict.AHEAD),
        "no_commit": verdicts.count(AuditVerdict.NO_COMMIT),
        "unresolved": sum(1 for v in verdicts if v.is_unresolved),
        "pending": verdicts.count(AuditVerdict.PENDING),
        "uncounted": sum(1 for r in rows if r["is_counted"] is False),
        "records_delivered_again": -sum(
            r["difference"] or 0 for r in rows if r["verdict"] == AuditVerdict.BEHIND
        ),
        "records_skipped": 0 if live else ahead,
        "records_ahead_live": ahead if live else 0,
        "exit_code": exit_code(rows),
    }


def summary_lines(summary: Mapping) -> list[str]:
    """The summary as text, one line per group and a total line last (for table output)."""
    lines = [f"{s['group']}: {_describe(s)}" for s in summary["groups"]]
    t = summary["total"]
    lines.append(
        f"audited {_n(t['groups'], 'group')} ({t['live_groups']} live on the destination), "
        f"{_describe(t)}; exit {t['exit_code']}"
    )
    return lines


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _describe(s: Mapping) -> str:
    live = ", live" if s.get("is_live") else ""
    state = f"{s['group_state']}{live}: " if s.get("group_state") else ""
    if not s["partitions"]:
        return state + "no committed offsets on the selected topics"
    parts = [_n(s["partitions"], "partition"), f"{s['exact']} exact"]
    if s["behind"]:
        again = s["records_delivered_again"]
        parts.append(f"{s['behind']} behind ({_n(again, 'record')} delivered again)")
    if s["ahead"]:
        what = [f"{_n(s['records_skipped'], 'record')} skipped"] if s["records_skipped"] else []
        if s["records_ahead_live"]:
            what.append(
                f"{_n(s['records_ahead_live'], 'record')} read on the destination by its "
                "live consumers: expected"
            )
        parts.append(f"{s['ahead']} ahead ({', '.join(what)})")
    if s["no_commit"]:
        parts.append(f"{s['no_commit']} without a commit")
    if s["unresolved"]:
        pending = f", {s['pending']} PENDING" if s["pending"] else ""
        parts.append(f"{s['unresolved']} unresolved{pending}")
    if s["uncounted"]:
        parts.append(f"{s['uncounted']} not counted (upper bounds)")
    return state + ", ".join(parts)
