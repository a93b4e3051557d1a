"""The guarded write path: `commit` (every change to a cluster's groups: write-ahead intent,
state check, forward rule, verified write, outcome), `ledger` (the Delta audit table those
steps append to) and `rollback` (restoring a run's previous offsets from its ledger rows)."""
