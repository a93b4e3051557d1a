"""spark-submit entry point of `lag-snapshot` (./spark-submit.sh lag-snapshot).

The job itself is ferry.jobs.lag_snapshot, which the `ferry` command runs too
(`ferry lag-snapshot`): one code path below the session.
"""

from ferry.cli import exit_process, run
from ferry.jobs.lag_snapshot import main

if __name__ == "__main__":
    exit_process(run(main))
