"""spark-submit entry point: consumer-group tooling on one cluster.

    ./spark-submit.sh groups list     --config FILE [--group REGEX]
    ./spark-submit.sh groups describe --config FILE [--group REGEX] [--topic REGEX]
    ./spark-submit.sh groups copy     --config FILE --from OLD --to NEW [--to NEW2 ...]
                                      [--topic REGEX] [--allow-active-source] [--delete-source]
    ./spark-submit.sh groups reset    --config FILE --group REGEX (--all-topics | --topic T[:P,..])
                                      SPEC [--export]
    ./spark-submit.sh groups delete   --config FILE --group REGEX
    ./spark-submit.sh groups rollback --config FILE RUN_ID   (or --rollback RUN_ID)

SPEC is one of --to-earliest, --to-latest, --to-current, --to-offset N, --shift-by N,
--to-datetime ISO8601, --by-duration PnDTnHnMnS, --from-file CSV (kafka-consumer-groups
semantics; see ferry.groups.reset). Changing verbs are dry runs unless --execute; executed
changes go through the write-ahead ledger at ledger.path (intent before the write, outcome
after; dry runs of copy/reset/delete are not recorded, rollbacks are, dry or not), so
`groups rollback RUN_ID` undoes them. A copy only moves an existing group forward
(--allow-rewind to move it back).
Exit 0 when everything asked was done, 1 when something was not, 2 for usage.
"""

from __future__ import annotations

import sys
import time

from ferry import kafka
from ferry.cli import (
    ArgumentParser,
    Progress,
    add_common_arguments,
    check_regex,
    emit,
    emit_json,
    exit_process,
    run,
)
from ferry.config import load_config, require
from ferry.errors import EXIT_INCOMPLETE, EXIT_OK, NoGroupsError, UsageError
from ferry.groups import changes, describe, reset, selection
from ferry.session import build_session, start_session
from ferry.write import commit, rollback
from ferry.write.ledger import Ledger, new_run_id

CHANGE_COLUMNS = [
    "group",
    "source_group",
    "topic",
    "partition",
    "previous_offset",
    "new_offset",
    "status",
    "note",
]
LIST_COLUMNS = ["group", "state", "protocol_type", "members", "topics", "partitions"]
TOTAL_COLUMNS = ["group", "group_state", "partition_count", "lag", "time_lag_ms"]


def parse_args(argv: list[str]):  # noqa: ANN201
    parser = ArgumentParser(prog="groups", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, help_text: str, changes: bool = True) -> ArgumentParser:
        # Subparsers share the parser's class, so they also give one-line errors.
        sub = verbs.add_parser(name, help=help_text, description=help_text)
        add_common_arguments(sub)
        sub.add_argument("--quiet", action="store_true", help="no progress on stderr")
        if changes:
            sub.add_argument("--execute", action="store_true", help="act (default: dry run)")
        return sub

    sub = verb("list", "list groups with state and committed partitions", changes=False)
    sub.add_argument("--group", metavar="REGEX", help="only groups whose id fully matches")

    sub = verb("describe", "committed offsets, lag and time lag per partition", changes=False)
    sub.add_argument("--group", metavar="REGEX")
    sub.add_argument("--topic", metavar="REGEX")

    sub = verb("copy", "copy a group's committed offsets into new groups")
    sub.add_argument("--from", dest="source", required=True, metavar="OLD")
    sub.add_argument("--to", dest="targets", action="append", required=True, metavar="NEW")
    sub.add_argument("--topic", metavar="REGEX", help="copy only topics that fully match")
    sub.add_argument("--allow-active-source", action="store_true")
    sub.add_argument("--delete-source", action="store_true", help="delete OLD after the copy")
    sub.add_argument(
        "--allow-rewind",
        action="store_true",
        help="DANGEROUS: move a NEW group that is ahead of OLD back to OLD's offsets",
    )

    sub = verb("reset", "reset offsets like kafka-consumer-groups --reset-offsets")
    sub.add_argument("--group", metavar="REGEX")
    scope = sub.add_mutually_exclusive_group()
    scope.add_argument("--all-topics", action="store_true")
    scope.add_argument("--topic", action="append", metavar="T[:P,P]")
    spec = sub.add_mutually_exclusive_group(required=True)
    spec.add_argument("--to-earliest", action="store_true")
    spec.add_argument("--to-latest", action="store_true")
    spec.add_argument("--to-current", action="store_true")
    spec.add_argument("--to-offset", type=int, metavar="N")
    spec.add_argument("--shift-by", type=int, metavar="N")
    spec.add_argument("--to-datetime", metavar="ISO8601")
    spec.add_argument("--by-duration", metavar="PnDTnHnMnS")
    spec.add_argument("--from-file", metavar="CSV")
    sub.add_argument("--export", action="store_true", help="print the plan as CSV on stdout")

    sub = verb("delete", "delete Empty groups")
    sub.add_argument("--group", metavar="REGEX", required=True)

    sub = verb("rollback", "restore the offsets a copy, reset or delete run changed")
    sub.add_argument("run_id", metavar="RUN_ID", nargs="?")
    sub.add_argument("--rollback", dest="rollback_id", metavar="RUN_ID", help="same as RUN_ID")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    progress = Progress(not args.quiet)
    if args.verb == "rollback":
        return rollback_main(args, cfg, progress)
    require(cfg, "cluster")
    if getattr(args, "execute", False):
        require(cfg, "ledger.path")
    cluster = cfg.client("cluster")
    kafka.check_reachable(cluster)  # one clear error instead of a timeout mid-run
    handler = {
        "list": list_main,
        "describe": describe_main,
        "copy": copy_main,
        "reset": reset_main,
        "delete": delete_main,
    }[args.verb]
    return handler(args, cfg, cluster, progress)


def _print_summary(text: str, args) -> None:  # noqa: ANN001
    stream = (
        sys.stdout
        if args.output == "table" and not getattr(args, "export", False)
        else (sys.stderr)
    )
    print(text, file=stream)


def list_main(args, cfg, cluster, progress) -> int:  # noqa: ANN001
    names = selection.matching_groups(cluster, args.group)
    state = describe.fetch_groups(cluster, names)
    rows = []
    for group in names:
        info = state.infos[group]
        committed = state.committed.get(group, {})
        rows.append(
            {
                "group": group,
                "state": info.state,
                "protocol_type": info.protocol_type,
                "members": len(info.members),
                "topics": len({t for t, _ in committed}),
                "partitions": len(committed),
            }
        )
    emit(rows, LIST_COLUMNS, args.output)
    return EXIT_OK


def describe_main(args, cfg, cluster, progress) -> int:  # noqa: ANN001
    check_regex("--topic", args.topic)
    names = selection.matching_groups(cluster, args.group)
    progress(f"describing {len(names)} groups")
    state = describe.fetch_groups(cluster, names)
    rows = describe.position_rows(state, args.topic)
    if not rows:
        raise NoGroupsError(
            f"no committed or assigned partitions for the selected groups on {cluster.name}"
        )
    # The session starts while Kafka is read on the driver; neither waits for the other.
    session = start_session("ferry-groups-describe")
    positions_df, bounds_df, next_df = describe.read_positions(
        session, cluster, rows, cfg.reader, progress
    )
    describe_df = describe.with_lag(positions_df, bounds_df, next_df, int(time.time() * 1000))
    ordered = describe_df.orderBy("group", "topic", "partition")
    detail = [r.asDict() for r in ordered.collect()]
    totals = [r.asDict() for r in describe.group_totals(describe_df).orderBy("group").collect()]
    if args.output == "table":
        emit(detail, describe.DESCRIBE_COLUMNS, "table")
        print()
        emit(totals, TOTAL_COLUMNS, "table")
    elif args.output == "json":
        by_group = {t["group"]: {**t, "partitions": []} for t in totals}
        for row in detail:
            by_group[row["group"]]["partitions"].append(row)
        emit_json(list(by_group.values()))
    else:
        emit(detail, describe.DESCRIBE_COLUMNS, "csv")
    return EXIT_OK


def _execute(args, cfg, cluster, planned, action: str, progress) -> Ledger | None:  # noqa: ANN001
    """Write the planned through ferry.write.commit (write-ahead ledger) when --execute."""
    if not args.execute:
        return None
    spark = build_session(f"ferry-groups-{action}")
    run_ledger = Ledger(spark, cfg.ledger.path, new_run_id(action), action, True)
    _write(args, cfg, cluster, planned, run_ledger, progress)
    return run_ledger


def _write(args, cfg, cluster, planned, run_ledger, progress) -> None:  # noqa: ANN001
    writes = changes.group_writes(planned, cluster, getattr(args, "allow_rewind", False))
    written = {w.group for w in writes}
    kept = changes.ledger_rows([c for c in planned if c.group not in written], cluster, True)
    try:
        outcomes = commit.execute_writes(
            cluster,
            writes,
            kept,
            run_ledger,
            cfg.ledger.lease_ms,
            progress,
            cfg.admin.batch_groups,
        )
    except commit.OutcomeNotRecorded as exc:
        if exc.committed:
            print(
                "changed, but not in the ledger; the offsets these groups had before "
                "(restore with: groups reset --from-file FILE --execute):\n"
                + commit.restore_block(exc.committed),
                file=sys.stderr,
            )
        raise
    changes.record_outcomes(planned, outcomes)


def _finish(args, cfg, cluster, planned, action: str, run_ledger) -> int:  # noqa: ANN001
    """Output, summary and exit code shared by the changing verbs."""
    for change in planned:
        for warning in change.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    rows = changes.change_rows(planned, args.execute)
    if getattr(args, "export", False):
        with_group = len({c.group for c in planned}) > 1
        sys.stdout.write(
            reset.format_offsets_csv([t for c in planned for t in c.targets], with_group)
        )
    else:
        emit(rows, CHANGE_COLUMNS, args.output)
    suffix = ""
    if run_ledger is not None:
        suffix = f"; run {run_ledger.run_id}; ledger {run_ledger.path} via {run_ledger.writer}"
    failed = [c for c in planned if c.error is not None]
    for change in failed:
        print(f"not done: {change.group}: {change.error}", file=sys.stderr)
    verb = {"copy": "copied", "reset": "reset", "delete": "deleted"}[action]
    done = len(planned) - len(failed)
    if args.execute:
        summary = f"{done} of {len(planned)} groups {verb}{suffix}"
    else:
        summary = (
            f"{done} of {len(planned)} groups would be {verb} (dry run; re-run with --execute)"
        )
    _print_summary(summary, args)
    return EXIT_OK if not failed else EXIT_INCOMPLETE


def copy_main(args, cfg, cluster, progress) -> int:  # noqa: ANN001
    check_regex("--topic", args.topic)
    if len(set(args.targets)) != len(args.targets):
        raise UsageError("--to names a group twice")
    if args.delete_source and args.allow_active_source:
        raise UsageError("--delete-source cannot be combined with --allow-active-source")
    state = describe.fetch_groups(cluster, [args.source, *args.targets])
    planned = changes.plan_copy(
        args.source, args.targets, state, args.topic, args.allow_active_source, args.allow_rewind
    )
    run_ledger = _execute(args, cfg, cluster, planned, "copy", progress)
    if args.delete_source:
        if run_ledger is not None:
            deleted = changes.delete_source_change(cluster, args.source, planned)
            if deleted is None:
                print(f"warning: {args.source} kept: not every copy succeeded", file=sys.stderr)
            else:
                _write(args, cfg, cluster, [deleted], run_ledger, progress)
                planned = [*planned, deleted]
        else:
            plan = changes.plan_delete([args.source], state)
            planned = [*planned, *plan]
    return _finish(args, cfg, cluster, planned, "copy", run_ledger)


def reset_main(args, cfg, cluster, progress) -> int:  # noqa: ANN001
    spec, value = _reset_spec(args)
    chosen = selection.reset_selection(
        cluster, args.group, args.topic, args.all_topics, args.from_file
    )
    names, file_offsets = chosen.groups, chosen.file_offsets
    state = describe.fetch_groups(cluster, names)
    selection.check_scope(chosen.scope, state.topic_partitions)
    partitions = changes.reset_partitions(names, state, chosen.scope, file_offsets)
    keys = {k for v in partitions.values() if isinstance(v, list) for k in v}
    progress(f"resetting {len(names)} groups over {len(keys)} partitions")
    bounds = kafka.watermarks(cluster, keys)
    at_time = None
    if spec in ("to_datetime", "by_duration"):
        targets = dict.fromkeys(keys, value)
        at_time = kafka.offsets_for_timestamps(cluster, targets, bounds)
    planned = changes.plan_reset(partitions, state, spec, value, file_offsets, bounds, at_time)
    run_ledger = _execute(args, cfg, cluster, planned, "reset", progress)
    return _finish(args, cfg, cluster, planned, "reset", run_ledger)


def _reset_spec(args) -> tuple[str, object]:  # noqa: ANN001
    if args.to_earliest:
        return "to_earliest", None
    if args.to_latest:
        return "to_latest", None
    if args.to_current:
        return "to_current", None
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise UsageError("--to-offset must be >= 0")
        return "to_offset", args.to_offset
    if args.shift_by is not None:
        return "shift_by", args.shift_by
    try:
        if args.to_datetime is not None:
            when = reset.parse_datetime(args.to_datetime)
            return "to_datetime", reset.to_epoch_ms(when)
        if args.by_duration is not None:
            ago = reset.parse_duration(args.by_duration)
            return "by_duration", int(time.time() * 1000 - ago.total_seconds() * 1000)
    except reset.ResetError as exc:
        raise UsageError(str(exc)) from None
    return "from_file", None


def delete_main(args, cfg, cluster, progress) -> int:  # noqa: ANN001
    names = selection.matching_groups(cluster, args.group)
    state = describe.fetch_groups(cluster, names)
    planned = changes.plan_delete(names, state)
    run_ledger = _execute(args, cfg, cluster, planned, "delete", progress)
    return _finish(args, cfg, cluster, planned, "delete", run_ledger)


def rollback_main(args, cfg, progress) -> int:  # noqa: ANN001
    if args.run_id and args.rollback_id and args.run_id != args.rollback_id:
        raise UsageError("give the run id once: RUN_ID or --rollback RUN_ID")
    run_id = args.run_id or args.rollback_id
    if not run_id:
        raise UsageError("rollback needs the RUN_ID of a copy, reset or delete run")
    return rollback.rollback_job(cfg, "cluster", run_id, args.execute, args.output, progress)


if __name__ == "__main__":
    exit_process(run(main))
