"""Named instants of the write path at which a test can SIGKILL the running job, so that
"killed at any instant" is tested at the worst ones (between two files, inside one file's
replace, right after the ledger's intent) rather than at random.

`FERRY_KILL_AT=NAME` kills the process the first time it reaches NAME; `NAME#K` the K-th time
(a point inside a loop). Unset, a point costs one dictionary lookup. The process kills itself
with SIGKILL: no handler, `finally` or atexit runs, exactly as when a scheduler kills it.

`FERRY_HOLD_AT=NAME` with `FERRY_HOLD_UNTIL=PATH` holds the process the first time it reaches
a hold point NAME instead: it creates `PATH.held` and waits until PATH exists (at most 10
minutes), so that a test can make something happen at that instant (a query's batch written
while the files are rewritten).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

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


HOLD_ENV, HOLD_UNTIL_ENV = "FERRY_HOLD_AT", "FERRY_HOLD_UNTIL"
_held: set[str] = set()


def hold_point(name: str) -> None:
    """Wait here the first time when $FERRY_HOLD_AT names this point (module docstring)."""
    if os.environ.get(HOLD_ENV) != name or name in _held:
        return
    _held.add(name)
    until = Path(os.environ[HOLD_UNTIL_ENV])
    Path(f"{until}.held").touch()
    deadline = time.monotonic() + 600
    while not until.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
