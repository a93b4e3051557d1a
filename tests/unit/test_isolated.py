"""ferry.kafka.isolated: calls in a worker process that the caller outlives. The crash is
staged with SIGSEGV, as librdkafka's AdminClient dies on an offset fetch answered
NOT_COORDINATOR (the worker is a real process; no Kafka is needed to kill it)."""

from __future__ import annotations

import os
import signal
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


def fail(text: str) -> None:
    raise ValueError(text)


def kept(value: list) -> int:
    """How often this worker's resident copy of `value` was called."""
    mine = isolated.resident(value)
    mine.append(1)
    return len(mine)


def test_a_call_runs_in_another_process_and_its_errors_come_back():
    assert isolated.run("pid", os.getpid) != os.getpid()
    with pytest.raises(ValueError, match="no such group"):
        isolated.run("fail", fail, "no such group")


def test_a_worker_that_crashes_mid_call_is_replaced_and_the_call_repeated(tmp_path):
    counter = tmp_path / "calls"
    pid = isolated.run("crash twice", crash_until, str(counter), 2)
    assert counter.read_text() == "3"
    assert pid in isolated.workers()


def test_crashing_every_time_fails_with_one_line_naming_the_call(tmp_path):
    with pytest.raises(ClusterError) as raised:
        isolated.run("source: fetch committed offsets", crash_until, str(tmp_path / "n"), 99)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("source: fetch committed offsets: the Kafka client crashed")
    assert f"{isolated.CRASH_ATTEMPTS} times" in message
    assert (tmp_path / "n").read_text() == str(isolated.CRASH_ATTEMPTS)


def test_a_worker_keeps_what_it_holds_between_calls():
    first = isolated.run("kept", kept, ["same"])
    assert isolated.run("kept", kept, ["same"]) == first + 1
    assert isolated.run("kept", kept, ["other"]) == 2
