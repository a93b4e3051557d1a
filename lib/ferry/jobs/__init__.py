"""The jobs, each a module with `main(argv) -> exit code`: what `./spark-submit.sh JOB` runs
through its thin entry point jobs/JOB.py, and what the `ferry` command (ferry.command) runs
by name. Both call the same `main`, so the two ways in share every line below the session.
"""

from __future__ import annotations

# job name (as typed) -> the module holding its main
JOBS = {
    "audit": "ferry.jobs.audit",
    "decode-offsets": "ferry.jobs.decode_offsets",
    "groups": "ferry.jobs.groups",
    "lag-snapshot": "ferry.jobs.lag_snapshot",
    "lag-status": "ferry.jobs.lag_status",
    "migrate": "ferry.jobs.migrate",
}
