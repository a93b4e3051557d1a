"""Lag history: `history` (the snapshot table and its evaluation in Spark) and `rules`
(Burrow's partition and group status rules as plain functions)."""
