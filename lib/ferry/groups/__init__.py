"""Single-cluster group tooling: `describe` (positions, lag, time lag), `plans` (copy, reset
and delete plans, pure), `apply` (the changing verbs, written through `ferry.write`), `reset`
(targets and `--from-file` CSV), `selection` (which groups, topics and file offsets a verb acts
on) and `positions` (each position's next record, read one span of nearby positions at a
time)."""
