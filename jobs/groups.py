"""spark-submit entry point of `groups` (./spark-submit.sh groups).

The job itself is ferry.jobs.groups, which the `ferry` command runs too
(`ferry groups`): one code path below the session.
"""

from ferry.cli import exit_process, run
from ferry.jobs.groups import main

if __name__ == "__main__":
    exit_process(run(main))
