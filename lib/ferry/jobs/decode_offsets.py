"""The `decode-offsets` job: decode `__consumer_offsets` into Delta tables.

    ./spark-submit.sh decode-offsets --config FILE [--topic __consumer_offsets]
        [--from earliest|latest-snapshot] [-o table|json|csv] [--set KEY=VALUE ...]

Reads every partition of the topic from the `cluster` section, from log start to log end,
with `ferry.kafka.read` (on the driver, or through Spark when larger than
`reader.driver_max_offsets`) and decodes each record in Spark (see ferry.offsets_topic).
`--from earliest` (default) keeps every record: the full history. `--from latest-snapshot`
keeps only the latest record per partition and key, what log compaction converges to;
tombstones are kept as deletions.

Each run appends to three Delta tables, every row tagged with the run id: offset commits to
offsets.commits_path, group metadata to offsets.groups_path, and to offsets.quarantine_path
the records that are neither: `malformed` ones with the reason, `unsupported` (newer record
types) kept raw. All three paths are required, checked before anything is read: the job
writes tables and never prints records in their place. The output is a summary, one row per
kind with its record count.

Nothing is changed on the cluster, so there is no dry run. Exit 0 when the topic was read and
written entirely, malformed records included (they are in the quarantine table, and stderr
says how many and where); 1 when reading or writing failed; 2 for usage or config errors,
or a topic the cluster does not have.
"""

from __future__ import annotations

import sys

from pyspark import StorageLevel

from ferry import delta, kafka
from ferry.cli import (
    ArgumentParser,
    Progress,
    add_common_arguments,
    emit,
    print_summary,
)
from ferry.config import load_config, require
from ferry.errors import EXIT_OK, UsageError
from ferry.offsets_topic import decode, tables
from ferry.runtime import keep, release
from ferry.session import build_session
from ferry.write.ledger import new_run_id

DEFAULT_TOPIC = "__consumer_offsets"
SUMMARY_COLUMNS = ["kind", "records", "deletions", "path"]


def parse_args(argv: list[str]):  # noqa: ANN201
    parser = ArgumentParser(prog="decode-offsets", description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help=f"default {DEFAULT_TOPIC}")
    parser.add_argument(
        "--from",
        dest="read_from",
        choices=("earliest", "latest-snapshot"),
        default="earliest",
        help="every record (default), or only the latest per key as compaction keeps it",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    require(
        cfg, "cluster", "offsets.commits_path", "offsets.groups_path", "offsets.quarantine_path"
    )
    run_id = new_run_id("decode-offsets")
    progress = Progress(not args.quiet, "decode-offsets", run_id)
    cluster = kafka.Cluster.from_config(cfg, "cluster")

    partitions = kafka.list_topics(cluster, include_internal=True).get(args.topic)
    if partitions is None:
        raise UsageError(f"topic {args.topic} does not exist on {cluster.name}")
    bounds = kafka.watermarks(cluster, [(args.topic, p) for p in range(partitions)])
    ranges = [kafka.OffsetRange(t, p, s, e) for (t, p), (s, e) in sorted(bounds.items()) if e > s]
    total = sum(r.end - r.start for r in ranges)
    progress(f"reading up to {total} records from {partitions} partitions of {args.topic}")

    spark = build_session("ferry-decode-offsets")
    # On the driver or through Spark by size; an isolation.level in `cluster` wins over
    # reader.isolation_level.
    records_df = kafka.read(spark, cluster, ranges, columns=tables.INPUT_COLUMNS)
    decoded_df = tables.with_decoded(records_df)
    if args.read_from == "latest-snapshot":
        decoded_df = tables.filter_latest_per_key(decoded_df)
    # Counted once and written three times: keep the decoded rows instead of reading the
    # topic again for each table (where the session caches: else the same bounded ranges are
    # read again, the same records).
    decoded_df = keep(decoded_df, StorageLevel.MEMORY_AND_DISK)
    try:
        counts = tables.kind_counts(decoded_df)
        progress(f"decoded {sum(n for n, _ in counts.values())} records; writing")
        outputs = (
            (tables.filter_offset_commits, cfg.offsets.commits_path),
            (tables.filter_group_metadata, cfg.offsets.groups_path),
            (tables.filter_quarantine, cfg.offsets.quarantine_path),
        )
        writers = {
            delta.append(spark, select(decoded_df, run_id, args.read_from), path)
            for select, path in outputs
        }
    finally:
        release(decoded_df)

    paths = {
        decode.KIND_OFFSET_COMMIT: cfg.offsets.commits_path,
        decode.KIND_GROUP_METADATA: cfg.offsets.groups_path,
        decode.KIND_UNSUPPORTED: cfg.offsets.quarantine_path,
        decode.KIND_MALFORMED: cfg.offsets.quarantine_path,
    }
    rows = [
        {
            "kind": kind,
            "records": n,
            "deletions": deletions if kind in decode.DELETABLE_KINDS else None,
            "path": paths[kind],
        }
        for kind, (n, deletions) in counts.items()
    ]
    emit(rows, SUMMARY_COLUMNS, args.output)
    malformed = counts[decode.KIND_MALFORMED][0]
    if malformed:
        print(
            f"warning: {malformed} malformed records quarantined in {cfg.offsets.quarantine_path}"
            " (kind = malformed, column reason says why)",
            file=sys.stderr,
        )
    print_summary(
        f"{sum(r['records'] for r in rows)} records of {args.topic} decoded "
        f"({args.read_from}); run {run_id}; written via {', '.join(sorted(writers))}",
        args.output,
    )
    return EXIT_OK
