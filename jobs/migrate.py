"""spark-submit entry point of `migrate` (./spark-submit.sh migrate).

The job itself is ferry.jobs.migrate, which the `ferry` command runs too
(`ferry migrate`): one code path below the session.
"""

from ferry.cli import exit_process, run
from ferry.jobs.migrate import main

if __name__ == "__main__":
    exit_process(run(main))
