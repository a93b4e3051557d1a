"""spark-submit entry point of `audit` (./spark-submit.sh audit).

The job itself is ferry.jobs.audit, which the `ferry` command runs too
(`ferry audit`): one code path below the session.
"""

from ferry.cli import exit_process, run
from ferry.jobs.audit import main

if __name__ == "__main__":
    exit_process(run(main))
