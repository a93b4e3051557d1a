"""MirrorMaker 2's group sync seen from outside (`ferry.testing.mm2` runs MM2): when it runs, and
a fault that makes it write its own translation over a migrated group.

MirrorCheckpointTask (Kafka 4.3.1) refreshes "idle" groups — it describes every group it syncs
on the destination and reads the committed offsets of those it finds Empty — and right after
syncs, every `sync.group.offsets.interval.seconds`. Only for a group that refresh found Empty
does the sync keep a destination offset at or past the translation; a group the refresh did not
find Empty (members at that moment, or the describe failed) gets the translation written as
is, and the broker takes it whenever the group has no members by then (KAFKA-19794).
`tests/integration/test_mm2_group_sync.py` stages both. `logged`, `wait_logged` and `sync_runs`
read MM2's log for those steps (its scheduler logs each run at INFO);
`fail_next_group_describe` makes one refresh's describe fail: the destination's `FaultProxy`
swallows it until MM2's admin call times out.
"""

from __future__ import annotations

import datetime as dt
import time

from ferry.testing.mm2 import MirrorMaker, MirrorMakerError
from ferry.testing.proxy import API_CONSUMER_GROUP_DESCRIBE, API_DESCRIBE_GROUPS, FaultProxy

# What MirrorCheckpointTask's scheduler names its two group-sync steps in the INFO line it logs
# after each run ("<step> took N ms").
REFRESH_STEP = "refreshing idle consumers group offsets at target cluster"
SYNC_STEP = "sync idle consumer group offset from source to target"
# MM2's admin clients on the destination give a call up after 4 s instead of 60 s, so a
# swallowed describe fails the refresh in seconds (`fail_next_group_describe`).
SHORT_DESTINATION_ADMIN_TIMEOUTS = {
    "destination.admin.default.api.timeout.ms": "4000",
    "destination.admin.request.timeout.ms": "2000",
}


def logged(mm: MirrorMaker, text: str, after: float = 0) -> list[float]:
    """The times (epoch seconds, from the log's own stamps) of MM2's log lines containing
    `text` stamped after `after`, in order."""
    return [t for t, _ in logged_lines(mm, text) if t > after]


def logged_lines(mm: MirrorMaker, text: str) -> list[tuple[float, str]]:
    """MM2's log lines containing `text`, in order, each with its time (epoch seconds, from
    the line's own stamp)."""
    try:
        lines = mm.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [
        (dt.datetime.strptime(line[1 : line.index("]")], "%Y-%m-%d %H:%M:%S,%f").timestamp(), line)
        for line in lines
        if text in line and line.startswith("[")
    ]


def wait_logged(
    mm: MirrorMaker, text: str, count: int = 1, after: float = 0, timeout_s: float = 120
) -> list[float]:
    """Until MM2 has logged `count` lines containing `text` stamped after `after` (epoch
    seconds); returns their times."""
    deadline = time.monotonic() + timeout_s
    while True:
        mm._check()
        times = logged(mm, text, after)
        if len(times) >= count:
            return times
        if time.monotonic() > deadline:
            raise MirrorMakerError(
                f"MirrorMaker 2 logged {len(times)} of {count} lines {text!r} in {timeout_s:g}s:"
                f" {mm.log_tail(8)}"
            )
        time.sleep(0.25)


def sync_runs(mm: MirrorMaker, after: float = 0) -> int:
    """How many group syncs (refresh, then sync) MM2 has run since `after` (epoch seconds)."""
    return len(logged(mm, f"{SYNC_STEP} took", after))


def fail_next_group_describe(
    mm: MirrorMaker, proxy: FaultProxy, wait_s: float = 10
) -> tuple[bool, float]:
    """Make the next refresh of MM2's group sync fail its describe of the destination groups,
    nothing else: every group describe that reaches the destination (either API:
    ConsumerGroupDescribe, or DescribeGroups for a classic group) is swallowed until MM2 logs
    that it gave up (its admin timeout, `SHORT_DESTINATION_ADMIN_TIMEOUTS`); every other
    request, MM2's sync write included, goes through. Returns whether a describe came within
    `wait_s` (a MirrorMaker whose group sync is off sends none, and nothing is staged) and when
    it came (epoch seconds)."""
    hung = [
        proxy.arm(api_key, "hang")
        for api_key in (API_CONSUMER_GROUP_DESCRIBE, API_DESCRIBE_GROUPS)
        for _ in range(_DESCRIBE_ATTEMPTS)
    ]
    try:
        deadline = time.monotonic() + wait_s
        while not any(event.is_set() for event in hung) and time.monotonic() < deadline:
            time.sleep(0.01)
        if not any(event.is_set() for event in hung):
            return False, time.time()
        started = time.time()
        wait_logged(mm, "Error querying for consumer group", after=started - 1, timeout_s=60)
        return True, started
    finally:
        proxy.disarm()


# More swallowed describes than MM2's admin client retries within its timeout.
_DESCRIBE_ATTEMPTS = 50
