"""Exact consumer-group migration between two clusters, as stages the data walks through
once, top to bottom:

1. `discover` (driver, admin API): selected groups, states and committed offsets on both
   clusters, watermarks.
2. `extract` (data source): the source records around every committed offset, each range
   read once; `anchors` (driver): each position's anchor among the offsets read.
3. `search`: the destination records around where every anchor's timestamp lands
   (`lookups`), read outward step by step until each anchor is decided or its window is read;
   each step one read and one Spark job that matches the positions read in it (`slices`).
4. `plan` (`ferry.migrate.matching`, pure transforms): candidates, context scores, one row
   per position, given to every group × source partition at it.
5. `decision` (pure): per group READY, ALREADY_MIGRATED, PENDING, REFUSED, ... and the exit code
   a scheduler acts on.
6. `load`: write READY groups through `ferry.write.commit` (write-ahead ledger, claims, checks right
   before each write, read-back), record dry runs, export CSV.

The names below are imported from their stage on first use (`ferry.lazy`): importing one stage
does not load the others, and the pure ones (`decision`, `ranges`) load no Spark.
"""

from ferry import lazy

_HOMES = {
    "OUTPUT_COLUMNS": "ferry.migrate.load",
    "Discovery": "ferry.migrate.discover",
    "GroupDecision": "ferry.migrate.decision",
    "Plan": "ferry.migrate.model",
    "build_plan": "ferry.migrate.plan",
    "commit_groups": "ferry.migrate.load",
    "decide": "ferry.migrate.decision",
    "discover": "ferry.migrate.discover",
    "dry_run_differences": "ferry.migrate.load",
    "emit_plan": "ferry.migrate.load",
    "exit_code": "ferry.migrate.decision",
    "export_csv": "ferry.migrate.load",
    "ledger_rows": "ferry.migrate.load",
    "merge_intervals": "ferry.migrate.ranges",
    "output_json": "ferry.migrate.load",
    "output_rows": "ferry.migrate.load",
    "record_dry_run": "ferry.migrate.load",
    "replan_pending": "ferry.migrate.plan",
    "summary": "ferry.migrate.load",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy.exports(__name__, _HOMES)
