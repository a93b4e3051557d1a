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
migrate stages.
"""

from ferry.audit.compare import (
    ROW_COLUMNS,
    TABLE_COLUMNS,
    audit_rows,
    exit_code,
    is_live,
    summarize,
    summary_lines,
)
from ferry.audit.table import AUDIT_SCHEMA, append
from ferry.migrate.difference import count_records, row_span

__all__ = [
    "AUDIT_SCHEMA",
    "ROW_COLUMNS",
    "TABLE_COLUMNS",
    "append",
    "audit_rows",
    "count_records",
    "exit_code",
    "is_live",
    "row_span",
    "summarize",
    "summary_lines",
]
