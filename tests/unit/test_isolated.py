"""ferry.kafka.isolated: calls in a worker process that the caller outlives. The crash is
staged with SIGSEGV, as librdkafka's AdminClient dies on an offset fetch answered
NOT_COORDINATOR (the worker is a real process; no Kafka is needed to kill it)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ferry.errors import ClusterError
from ferry.kafka import isolated


def crash_until(counter: str, crashes: int) -> int:
    """Dies with SIGSEGV the first `crashes` times it is called (counted in a file)."""
    path = Path(counter)
    seen = int(path.read_text()) if path.exists() else 0
    path.write_text(str(seen + 1))
    if seen < crashes:
        os.kill(os.getpid(), signal.SIGSEGV)
    return os.getpid()


def crash_before(counter: str, ready_at: float) -> int:
    """Dies with SIGSEGV while `time.monotonic()` is before `ready_at` (a coordinator that
    takes that long to load); counts its calls in a file."""
    path = Path(counter)
    path.write_text(str(int(path.read_text() if path.exists() else 0) + 1))
    if time.monotonic() < ready_at:
        os.kill(os.getpid(), signal.SIGSEGV)
    return os.getpid()


def fail(text: str) -> None:
    raise ValueError(text)


def kept(value: list) -> int:
    """How often this worker's resident copy of `value` was called."""
    mine = isolated.resident(value)
    mine.append(1)
    return len(mine)


def test_a_call_runs_in_another_process_and_its_errors_come_back():
    assert isolated.run("pid", os.getpid, retry_s=5) != os.getpid()
    with pytest.raises(ValueError, match="no such group"):
        isolated.run("fail", fail, "no such group", retry_s=5)


def test_a_worker_that_crashes_mid_call_is_replaced_and_the_call_repeated(tmp_path):
    counter = tmp_path / "calls"
    before = len(isolated.crashes())
    pid = isolated.run("crash twice", crash_until, str(counter), 2, retry_s=30)
    assert counter.read_text() == "3"
    assert pid in isolated.workers()
    assert isolated.crashes()[before:] == ["exit -11", "exit -11"]


def test_crashes_are_retried_with_backoff_until_the_coordinator_is_ready(tmp_path):
    # A coordinator that answers NOT_COORDINATOR for 6 s: five immediate attempts (a worker
    # starts in 0.3 s to 1 s) would all have crashed; backoff within the budget waits it out.
    counter = tmp_path / "calls"
    started = time.monotonic()
    pid = isolated.run("slow coordinator", crash_before, str(counter), started + 6.0, retry_s=20)
    took = time.monotonic() - started
    calls = int(counter.read_text())
    assert pid in isolated.workers() and took >= 6.0
    # 0.2 + 0.4 + 0.8 + 1.6 + 3.2 s of waits (plus worker starts) reach 6 s: backoff, not a spin
    assert 2 <= calls <= 6, calls


def test_crashing_every_time_fails_after_the_budget_with_one_line_naming_the_call(tmp_path):
    counter = tmp_path / "n"
    started = time.monotonic()
    with pytest.raises(ClusterError) as raised:
        isolated.run(
            "source (h:9092): fetch committed offsets", crash_until, str(counter), 99, retry_s=2
        )
    took = time.monotonic() - started
    message = str(raised.value)
    calls = int(counter.read_text())
    assert "\n" not in message
    assert message.startswith(
        "source (h:9092): fetch committed offsets failed (retried for 2s): "
        f"the Kafka client crashed {calls} times (exit -11; librdkafka issue 5040"
    ), message
    # Waits of 0.2, 0.4, 0.8 s between attempts, none past the 2 s budget: at most four
    # attempts (fewer when starting workers is slow), each after the waits before it.
    assert 2 <= calls <= 4 and took < 2 + 1.5, (calls, took)
    assert took >= (0.2, 0.6, 1.4)[calls - 2], (calls, took)


def test_a_shared_deadline_bounds_the_crash_retries(tmp_path):
    started = time.monotonic()
    with pytest.raises(ClusterError, match="crashed once"):
        isolated.run(
            "c: fetch", crash_until, str(tmp_path / "n"), 99, retry_s=60, deadline=started + 0.1
        )
    assert time.monotonic() - started < 2


def test_a_worker_keeps_what_it_holds_between_calls():
    first = isolated.run("kept", kept, ["same"], retry_s=5)
    assert isolated.run("kept", kept, ["same"], retry_s=5) == first + 1
    assert isolated.run("kept", kept, ["other"], retry_s=5) == 2
