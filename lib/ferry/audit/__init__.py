"""`audit`: how far the offsets a destination group has committed now (another tool's
translation, or an earlier run's) are from Ferry's exact translation, read-only.

The stages, top to bottom:

1. `ferry.migrate.discover` with `plan_active` (groups active on either side are planned,
   not refused) and `ferry.migrate.build_plan`: the exact plan, exactly as `migrate` makes it,
   reconcile mode included; each row carries the destination's committed offset.
2. `ferry.migrate.difference` (read): the records between each committed and exact offset
   on the destination — shared with `migrate`'s dry run, whose `difference` column for
   ALREADY_MIGRATED groups counts the same way.
3. `compare` (pure): one row per group × destination partition with its verdict, the
   summary per group and in total, and the exit code.
4. `table`: the rows appended to the Delta table at `audit.path` (`AUDIT_SCHEMA`).

A package of its own rather than a module of `ferry.migrate`: the audit is a job with its own
verdicts, summary, exit rule and table, built on the migrate stages without changing them
(the dependency runs one way, audit → migrate); the counting both jobs need lives with the
migrate stages. The names below are imported from their module on first use (`ferry.lazy`),
so `compare` is importable alone, without Spark.
"""

from ferry import lazy

_HOMES = {
    "AUDIT_SCHEMA": "ferry.audit.table",
    "ROW_COLUMNS": "ferry.audit.compare",
    "TABLE_COLUMNS": "ferry.audit.compare",
    "append": "ferry.audit.table",
    "audit_rows": "ferry.audit.compare",
    "count_records": "ferry.migrate.difference",
    "exit_code": "ferry.audit.compare",
    "is_live": "ferry.audit.compare",
    "row_span": "ferry.migrate.spans",
    "summarize": "ferry.audit.compare",
    "summary_lines": "ferry.audit.compare",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy.exports(__name__, _HOMES)
