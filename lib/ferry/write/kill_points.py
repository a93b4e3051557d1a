"""Named instants of the write path at which a test can SIGKILL the running job, so that
"killed at any instant" is tested at the worst ones (between two files, inside one file's
replace, right after the ledger's intent) rather than at random.

`FERRY_KILL_AT=NAME` kills the process the first time it reaches NAME; `NAME#K` the K-th time
(a point inside a loop). Unset, a point costs one dictionary lookup. The process kills itself
with SIGKILL: no handler, `finally` or atexit runs, exactly as when a scheduler kills it.
"""

from __future__ import annotations

import os
import signal

ENV = "FERRY_KILL_AT"
_seen: dict[str, int] = {}


def kill_point(name: str) -> None:
    """SIGKILL this process when $FERRY_KILL_AT names this point (and its count, if given)."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    point, _, nth = wanted.partition("#")
    if point != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] == (int(nth) if nth else 1):
        os.kill(os.getpid(), signal.SIGKILL)
