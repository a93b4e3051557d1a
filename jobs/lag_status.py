"""spark-submit entry point of `lag-status` (./spark-submit.sh lag-status).

The job itself is ferry.jobs.lag_status, which the `ferry` command runs too
(`ferry lag-status`): one code path below the session.
"""

from ferry.cli import exit_process, run
from ferry.jobs.lag_status import main

if __name__ == "__main__":
    exit_process(run(main))
