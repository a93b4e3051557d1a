"""What `notebooks/ferry_overview.ipynb` shows, as functions: load Ferry's Delta tables, shape
them for plotting, and draw the plots. The notebook only calls these.

Tables (any may be missing; a missing one is a panel saying so, never an error):
- the migration ledger (`ledger.path`, `ferry.write.ledger.LEDGER_SCHEMA`);
- the lag history (`history.path`, `ferry.lag.history.HISTORY_SCHEMA`) and the evaluated
  statuses (`history.status_path`, `ferry.lag.history.STATUS_SCHEMA`);
- the decoded offset commits (`offsets.commits_path`,
  `ferry.offsets_topic.tables.OFFSET_COMMITS_SCHEMA`);
- the audits (`audit.path`: one row per audit run × group × partition with `verdict` and
  `difference` = committed − exact offset, in records).

`tables` loads and shapes: pure `with_*`/`filter_*` transforms that aggregate on Spark, so a
history of thousands of groups arrives at the driver as a few hundred points per plotted
group, then one collect per panel. `charts` draws: `plot_*` take the collected pandas frames
and return a matplotlib Figure. Plots show the `top` groups by their latest total lag (or by
rows, for commits; by records off, for audits) so they stay readable.
"""

from ferry.overview.charts import (  # noqa: F401 - the notebook's one import
    OUTCOME_STYLES,
    STATUS_COLOURS,
    plot_audit,
    plot_commit_rate,
    plot_lag,
    plot_migrations,
    plot_status_timeline,
)
from ferry.overview.tables import (  # noqa: F401
    NO_OUTCOME,
    OverviewPaths,
    audit_latest,
    audit_over_time,
    commit_rate,
    filter_latest_audit,
    filter_top_audit_groups,
    filter_top_groups,
    lag_over_time,
    load_tables,
    migration_groups,
    migration_outcomes,
    paths_from_config,
    status_timeline,
    with_audit_by_group,
    with_commit_rate,
    with_group_lag_over_time,
    with_group_outcomes,
    with_group_status_timeline,
    with_run_outcomes,
)
