"""The `lag-snapshot` job: append one lag snapshot of every selected group to the history.

    ./spark-submit.sh lag-snapshot --config FILE [--group REGEX] [--quiet]

One row per group × topic × partition (committed offset, log end offset, lag, time lag, group
state) goes to the Delta table at history.path; run it every few minutes from a scheduler and
evaluate with `lag-status`. Groups are those matching groups.include / groups.exclude and, when
given, --group. Exit 0 when the snapshot was appended, 1 when there was nothing to snapshot or
a cluster call failed, 2 for usage or config errors.
"""

from __future__ import annotations

import time

from ferry import kafka
from ferry.cli import (
    ArgumentParser,
    Progress,
    add_common_arguments,
    check_regex,
)
from ferry.config import load_config, require
from ferry.errors import EXIT_OK, NoGroupsError
from ferry.groups import describe, selection
from ferry.lag import history
from ferry.session import start_session


def parse_args(argv: list[str]):  # noqa: ANN201
    parser = ArgumentParser(prog="lag-snapshot", description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, output=False)
    parser.add_argument("--group", metavar="REGEX", help="only groups whose id fully matches")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    require(cfg, "cluster", "history.path")
    check_regex("--group", args.group)
    cluster = kafka.Cluster.from_config(cfg, "cluster")
    kafka.check_reachable(cluster)  # one clear error instead of a timeout mid-run
    progress = Progress(not args.quiet, "lag-snapshot")

    names = selection.matching_groups(cluster, args.group, cfg.groups)
    state = describe.fetch_groups(cluster, names)
    rows = describe.position_rows(state)
    if not rows:
        raise NoGroupsError(
            f"no committed or assigned partitions for the selected groups on {cluster.name}"
        )
    progress(
        f"snapshot of {len(names)} groups: {len(rows)} group partitions over "
        f"{len({(r['topic'], r['partition']) for r in rows})} partitions"
    )
    # The session starts while Kafka is read on the driver; neither waits for the other.
    session = start_session("ferry-lag-snapshot")
    # Watermarks are asked after the committed offsets, so lag is never negative (at worst it
    # counts records produced in between); the snapshot is stamped once the reads are done.
    positions_df, bounds_df, next_df = describe.read_positions(
        session, cluster, rows, cfg.reader, progress
    )
    spark = session()
    snapshot_ms = int(time.time() * 1000)
    describe_df = describe.with_lag(positions_df, bounds_df, next_df, snapshot_ms)
    history_df = history.with_snapshot_columns(
        describe_df, snapshot_ms, cfg.cluster["bootstrap.servers"]
    )
    writer = history.append_history(spark, history_df, cfg.history.path)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(snapshot_ms / 1000))
    stamp += f".{snapshot_ms % 1000:03d}Z"
    print(
        f"snapshot {stamp}: {len(rows)} partitions of {len({r['group'] for r in rows})} groups "
        f"appended to history {cfg.history.path} via {writer}"
    )
    return EXIT_OK
