"""A run whose driver JVM ran out of memory ends, even when that JVM then stops answering.

spark-submit.sh starts a client-mode driver JVM with `-XX:OnOutOfMemoryError` creating the file
$FERRY_OOM_MARKER at the JVM's first OutOfMemoryError. Most runs end by themselves once the
error reaches the Python driver (ferry.cli's one line, exit code 1). But the error can land
in one of Spark's own threads instead — the one stopping the context, one answering Py4J —
and leave the driver waiting for an answer that never comes: a scheduled run that hangs until
someone kills it (seen with a 48 MiB driver, tests/integration/test_spark_failure.py).

The watch gives the run $FERRY_OOM_GRACE_S seconds (default 60) from the marker's appearance
to end by itself, then ends it with the same kind of line and exit code 1. Never in the middle
of a batch of offset writes (ferry.write.commit.write_batch, which talks to Kafka, not the
JVM): it waits for the batch to end. What the run leaves is what any stopped run leaves (an
intent without outcome keeps its groups CLAIMED; `migrate --rollback` reads it).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType

DEFAULT_GRACE_S = 60.0
POLL_S = 0.5


def is_unstoppable(frame: FrameType | None) -> bool:
    """Whether a stack (its innermost frame) is inside a step that must run to its end: a
    batch of offset writes. Imported when asked (after an OutOfMemoryError), not with the CLI."""
    from ferry.write.commit import write_batch

    while frame is not None:
        if frame.f_code is write_batch.__code__:
            return True
        frame = frame.f_back
    return False


def grace_s(environ: Mapping[str, str]) -> float:
    """$FERRY_OOM_GRACE_S, or the default when unset or not a positive number."""
    try:
        value = float(environ.get("FERRY_OOM_GRACE_S", ""))
    except ValueError:
        return DEFAULT_GRACE_S
    return value if value > 0 else DEFAULT_GRACE_S


def start(line: Callable[[float], str]) -> None:
    """Watch for $FERRY_OOM_MARKER (set by spark-submit.sh) on a daemon thread; `line(grace)`
    is the error (after "error: ") a run ended by the watch prints. Nothing without the
    variable (a run not started by spark-submit.sh, a cluster-mode driver)."""
    marker = os.environ.get("FERRY_OOM_MARKER", "")
    if not marker:
        return
    grace = grace_s(os.environ)
    thread = threading.Thread(
        target=_watch, args=(marker, grace, line), name="ferry-oom-watch", daemon=True
    )
    thread.start()


def forget() -> None:
    """Remove the marker as the run ends (it lives in the temporary directory)."""
    marker = os.environ.get("FERRY_OOM_MARKER", "")
    if marker:
        try:
            os.unlink(marker)
        except OSError:
            pass


def _watch(marker: str, grace: float, line: Callable[[float], str]) -> None:
    while not os.path.exists(marker):
        time.sleep(POLL_S)
    deadline = time.monotonic() + grace
    main = threading.main_thread().ident
    while time.monotonic() < deadline or is_unstoppable(sys._current_frames().get(main)):
        time.sleep(POLL_S)
    try:
        print(f"error: {line(grace)}", file=sys.stderr, flush=True)
    finally:
        forget()
        os._exit(1)
