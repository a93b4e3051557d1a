"""The `groups` job: consumer-group tooling on one cluster.

    ./spark-submit.sh groups list     --config FILE [--group REGEX]
    ./spark-submit.sh groups describe --config FILE [--group REGEX] [--topic REGEX]
    ./spark-submit.sh groups copy     --config FILE --from OLD --to NEW [--to NEW2 ...]
                                      [--topic REGEX] [--allow-active-source] [--delete-source]
    ./spark-submit.sh groups reset    --config FILE --group REGEX (--all-topics | --topic T[:P,..])
                                      SPEC [--export] [--new-run]
    ./spark-submit.sh groups delete   --config FILE --group REGEX
    ./spark-submit.sh groups rollback --config FILE RUN_ID   (or --rollback RUN_ID)

SPEC is one of --to-earliest, --to-latest, --to-current, --to-offset N, --shift-by N,
--to-datetime ISO8601, --by-duration PnDTnHnMnS, --from-file CSV, with kafka-consumer-groups
semantics. Changing verbs are dry runs unless --execute, which writes through the ledger
(docs/jobs/groups.md). Exit 0 when everything asked was done, 1 when something was not, 2 for
usage. A relative reset run again after a run of it that was killed or left a group not done
finishes that run's plan (--new-run shifts again anyway).
"""

from __future__ import annotations

import time
from functools import partial

from ferry import delta, kafka
from ferry.cli import ArgumentParser, Progress, add_common_arguments
from ferry.config import load_config, require
from ferry.groups import apply, describe, finish, plans, reset, selection
from ferry.session import build_session, start_session
from ferry.write import rollback
from ferry.write.ledger import Ledger, new_run_id


def parse_args(argv: list[str]):  # noqa: ANN201
    parser = ArgumentParser(prog="groups", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(name: str, help_text: str, changes: bool = True) -> ArgumentParser:
        # Subparsers share the parser's class, so they also give one-line errors.
        sub = verbs.add_parser(name, help=help_text, description=help_text)
        add_common_arguments(sub)
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
    new_run = "shift from where the groups are now, even after a killed or incomplete run"
    sub.add_argument("--new-run", action="store_true", help=f"--shift-by/--by-duration: {new_run}")

    sub = verb("delete", "delete Empty groups")
    sub.add_argument("--group", metavar="REGEX", required=True)

    sub = verb("rollback", "restore the offsets a copy, reset or delete run changed")
    sub.add_argument("run_id", metavar="RUN_ID", nargs="?")
    sub.add_argument("--rollback", dest="rollback_id", metavar="RUN_ID", help="same as RUN_ID")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    progress = Progress(not args.quiet, f"groups {args.verb}")
    if args.verb == "rollback":
        run_id = rollback.given_run_id(args.run_id, args.rollback_id)
        return rollback.rollback_job(cfg, "cluster", run_id, args.execute, args.output, progress)
    require(cfg, "cluster", *(["ledger.path"] if getattr(args, "execute", False) else []))
    cluster = kafka.Cluster.from_config(cfg, "cluster")
    kafka.check_reachable(cluster)  # one clear error instead of a timeout mid-run
    if args.verb in ("copy", "describe"):
        selection.check_regex("--topic", args.topic)
    if args.verb in ("list", "describe"):
        return describe.list_or_describe(
            cluster, args.verb, args.group, getattr(args, "topic", None), cfg.reader,
            args.output, progress, partial(start_session, "ferry-groups-describe"),
        )  # fmt: skip
    if args.verb == "copy":
        apply.check_copy(args.targets, args.delete_source, args.allow_active_source)
    if args.verb == "reset":  # a bad spec or file is refused before a session starts
        spec, value = reset.chosen_spec(vars(args), int(time.time() * 1000))
        chosen = selection.reset_selection(cluster, args.group, args.topic, args.all_topics,
                                           args.from_file)  # fmt: skip
        finish.check_new_run(spec, args.new_run)
    # A relative reset reads the ledger, a dry run too: it may finish a killed run's plan.
    relative = args.verb == "reset" and spec in finish.RELATIVE
    spark, ledger, rerun = None, None, None
    if args.execute or (relative and cfg.ledger.path and delta.exists(cfg.ledger.path)):
        spark = build_session(f"ferry-groups-{args.verb}")
    if relative:
        cluster_id = cluster.conf.get("bootstrap.servers")
        command = finish.command_key(cluster_id, spec, vars(args), chosen)
        rerun = finish.prepare(spark, cfg.ledger.path, command, value, cluster_id,
                               chosen.groups, args.new_run)  # fmt: skip
        value = rerun.value
    if args.execute:
        run_id = new_run_id(args.verb)
        ledger = (rerun.ledger(spark, cfg.ledger.path, run_id) if rerun
                  else Ledger(spark, cfg.ledger.path, run_id, args.verb, True))  # fmt: skip
        progress.run_id = ledger.run_id
    write = partial(apply.write, cluster=cluster, run_ledger=ledger, lease_ms=cfg.ledger.lease_ms,
                    batch_groups=cfg.admin.batch_groups, progress=progress,
                    allow_rewind=getattr(args, "allow_rewind", False),
                    ignore_claims=rerun.ignore_claims if rerun else ())  # fmt: skip
    if args.verb == "copy":
        planned = apply.copy(cluster, args.source, args.targets, args.topic,
                             args.allow_active_source, args.allow_rewind, args.delete_source,
                             write if ledger else None)  # fmt: skip
    elif args.verb == "reset":
        unfinished = rerun.unfinished if rerun else None
        planned = write(apply.plan_reset(cluster, chosen, spec, value, progress, unfinished))
    else:
        names = selection.matching_groups(cluster, args.group)
        planned = write(plans.plan_delete(names, describe.fetch_groups(cluster, names)))
    export = getattr(args, "export", False)
    return apply.report(planned, args.verb, args.execute, args.output, export, ledger)
