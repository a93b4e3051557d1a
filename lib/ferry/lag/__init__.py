"""Lag history: `history` (the snapshot and status Delta tables), `evaluation` (Burrow's rules
over the history in Spark), `rules` (Burrow's partition and group status rules as plain
functions) and `burrow` (the status as Burrow's HTTP answers)."""
