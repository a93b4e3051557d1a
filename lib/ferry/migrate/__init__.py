"""Exact consumer-group migration between two clusters, as stages the data walks through
once, top to bottom:

1. `discover` (driver, admin API): selected groups, states and committed offsets on both
   clusters, watermarks.
2. `extract` (data source): the source records around every committed offset, each range
   read once.
3. `search`: the destination records around where every anchor's timestamp lands, read
   outward one Spark job per step until each anchor is decided or its window is read.
4. `plan` (`ferry.migrate.matching`, pure transforms): anchors, candidates, context scores, one plan
   row per group × source partition.
5. `decision` (pure): per group READY, ALREADY_MIGRATED, PENDING, REFUSED, ... and the exit code
   a scheduler acts on.
6. `load`: write READY groups through `ferry.write.commit` (write-ahead ledger, claims, checks right
   before each write, read-back), record dry runs, export CSV.
"""

from ferry.migrate.decision import GroupDecision, decide, exit_code
from ferry.migrate.discover import Discovery, discover
from ferry.migrate.load import (
    OUTPUT_COLUMNS,
    commit_groups,
    dry_run_differences,
    export_csv,
    ledger_rows,
    output_rows,
    record_dry_run,
    summary,
)
from ferry.migrate.plan import Plan, build_plan, replan_pending
from ferry.migrate.ranges import merge_intervals

__all__ = [
    "OUTPUT_COLUMNS",
    "Discovery",
    "GroupDecision",
    "Plan",
    "build_plan",
    "commit_groups",
    "decide",
    "discover",
    "dry_run_differences",
    "exit_code",
    "export_csv",
    "ledger_rows",
    "merge_intervals",
    "output_rows",
    "record_dry_run",
    "replan_pending",
    "summary",
]
