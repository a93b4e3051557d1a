"""What a failure of Spark itself means, in one line for the operator: out of memory in the
driver or an executor, a lost executor or its shuffle data, a driver JVM that went away or
stopped answering (ferry.driver_watch) — each naming the cause and what to change. Read from
the text Py4J carries from the JVM, pyspark's own exceptions and the run's log file; used by
ferry.cli's error line."""

from __future__ import annotations

import os
import re
import traceback

from ferry.errors import WRAPPED_ERROR


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def is_spark_exception(exc: BaseException) -> bool:
    return (type(exc).__module__ or "").startswith(("py4j", "pyspark"))


def _is_py4j_connection_error(exc: BaseException) -> bool:
    """A socket error raised inside Py4J: the driver JVM at the other end is gone."""
    if not isinstance(exc, ConnectionError):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return any("/py4j/" in frame.filename for frame in frames)


def from_spark(exc: BaseException) -> bool:
    """The failure came out of a Spark job (a task failed, the JVM raised or went away)."""
    return any(is_spark_exception(e) or _is_py4j_connection_error(e) for e in _chain(exc))


# What Spark failures say, in the text Py4J carries from the JVM (the Java exception and its
# causes) or in pyspark's own exceptions.
_OUT_OF_MEMORY = re.compile(
    r"(?:[\w$]+\.)*\w*MemoryError\b(?:: [^\n]*)?"
    r"|Not enough memory to build and broadcast the table"
    r"|Unable to acquire \d+ bytes of memory[^\n]*"
    r"|exceeding (?:physical |virtual )?memory limits"
    r"|OOMKilled|possible container OOM"
)
_LOST_TASK = re.compile(
    r"Lost task [\d.]+ in stage (?P<stage>[\d.]+) \(TID \d+\) "
    r"\(\S+ executor (?P<executor>[^)\s]+)\): (?P<cause>[^\n]*)"
)
_EXECUTOR_LOST = re.compile(
    r"ExecutorLostFailure \((?P<what>[^)]*)\)(?: Reason: (?P<reason>[^\n]*))?"
)
_FETCH_FAILED = re.compile(r"FetchFailed(?:Exception)?\b")
_TOO_LITTLE_MEMORY = re.compile(
    r"\[INVALID_(?P<which>DRIVER|EXECUTOR)_MEMORY\] (?P<msg>[^\n]*?must be at least \d+)"
)
# The driver JVM went away under the job: the Py4J connection broke, or Spark stopped its
# context (the JVM was exiting) while a job was running.
_JVM_GONE = re.compile(
    r"Answer from Java side is empty|Error while (?:sending or )?receiving"
    r"|An error occurred while trying to connect to the Java server"
    r"|SparkContext was shut down|Cannot call methods on a stopped SparkContext"
)
_FEWER_GROUPS = "or select fewer groups (--group, or groups.include in the config)"
_RAISE = {
    "driver": "raise spark-submit.sh's --driver-memory (Spark's default: 1g)",
    "executor": "raise spark-submit.sh's --executor-memory (for a container killed over its "
    "limit: --conf spark.executor.memoryOverhead)",
}


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _gone_cause() -> str:
    """Why the driver JVM went away, as far as its log file says: Spark logs the error that
    ended it there before the JVM exits."""
    path = os.environ.get("FERRY_LOG_FILE")
    if not path:
        return ""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 4_000_000))
            tail = log.read().decode("utf-8", "replace")
    except OSError:
        return ""
    found = _OUT_OF_MEMORY.search(tail)
    return found.group(0) if found else ""


def spark_failure(exc: BaseException) -> str | None:
    """One line for a failure of Spark itself — out of memory, a lost executor, a failed
    stage, a driver JVM that went away — naming the cause and what to change; None when `exc`
    did not come out of Spark, or Spark only carried an error of Ferry's own from a task."""
    if not from_spark(exc):
        return None
    chain = _chain(exc)
    text = "\n".join(str(e) for e in chain)
    small = _TOO_LITTLE_MEMORY.search(text)
    if small:
        where = small["which"].lower()
        return f"Spark refused its {where} memory ({small['msg']} bytes): {_RAISE[where]}"
    lost = _LOST_TASK.search(text)
    stage = f" in stage {lost['stage']}" if lost else ""
    # Local masters run tasks in the driver's own JVM, as "executor driver".
    executor = lost["executor"] if lost else None
    where = "executor" if executor not in (None, "driver") else "driver"
    memory = _OUT_OF_MEMORY.search(text)
    executor_lost = _EXECUTOR_LOST.search(text)
    if memory:
        cause = memory.group(0)
        if executor_lost and memory.start() > executor_lost.start():
            # killed over its memory limit: the executor's lost reason says so
            where, cause = "executor", executor_lost["reason"]
        place = "the driver"
        if where == "executor":
            place = f"executor {executor}" if executor else "an executor"
        during = f", in a task of stage {lost['stage']}" if lost else ""
        if "Task serialization failed" in text:
            during = ", serializing a task"
        return (
            f"Spark ran out of memory in {place} ({_first_line(cause)}{during}): "
            f"{_RAISE[where]}, {_FEWER_GROUPS}"
        )
    if executor_lost:
        return (
            f"Spark lost an executor{stage} ({_first_line(executor_lost.group(0))}): most often "
            f"it ran out of memory: {_RAISE['executor']}, {_FEWER_GROUPS}"
        )
    if _FETCH_FAILED.search(text):
        return (
            f"Spark lost shuffle data{stage} (FetchFailed: the executor that held it went "
            f"away, most often out of memory): {_RAISE['executor']}, {_FEWER_GROUPS}"
        )
    if _JVM_GONE.search(text) or any(
        type(e).__name__ == "Py4JNetworkError" or _is_py4j_connection_error(e) for e in chain
    ):
        cause = _gone_cause()
        if cause:
            return (
                f"Spark's driver ran out of memory and stopped ({_first_line(cause)}): "
                f"{_RAISE['driver']}, {_FEWER_GROUPS}"
            )
        return (
            "Spark's driver JVM stopped during the run (why: its log file); if it ran out of "
            f"memory, {_RAISE['driver']}, {_FEWER_GROUPS}"
        )
    if WRAPPED_ERROR.search(text):
        return None  # an error of Ferry's own, raised in a task: one_line digs it out
    if lost:
        return f"a Spark task failed{stage} on executor {executor}: {_first_line(lost['cause'])}"
    return None


def unanswered_line(grace: float) -> str:
    """The line of a run ended by ferry.driver_watch: the driver JVM ran out of memory and
    stopped answering."""
    cause = _first_line(_gone_cause()) or "java.lang.OutOfMemoryError"
    path = os.environ.get("FERRY_LOG_FILE")
    details = f" (details: {path})" if path else ""
    return (
        f"Spark ran out of memory in the driver ({cause}) and its JVM stopped answering for "
        f"{grace:.0f} s: {_RAISE['driver']}, {_FEWER_GROUPS}{details}"
    )
