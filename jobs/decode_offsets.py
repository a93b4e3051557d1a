"""spark-submit entry point of `decode-offsets` (./spark-submit.sh decode-offsets).

The job itself is ferry.jobs.decode_offsets, which the `ferry` command runs too
(`ferry decode-offsets`): one code path below the session.
"""

from ferry.cli import exit_process, run
from ferry.jobs.decode_offsets import main

if __name__ == "__main__":
    exit_process(run(main))
