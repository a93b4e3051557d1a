"""The tests' Flink job (`flink_job/FlinkCountJob.java`): a KafkaSource with a uid, a count per
key in keyed state and a file sink, on a local mini-cluster in a JVM of its own, compiled once
against Ferry's Flink jars (`ferry.flink.tool.compiled`). Stopped with a savepoint once enough
records reached the sink, or run until the sink goes quiet."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ferry.flink.tool import compiled, java_command

MAIN = "ferry.testing.flink.FlinkCountJob"
SOURCES = [Path(__file__).parent / "flink_job" / "FlinkCountJob.java"]


class FlinkJobError(RuntimeError):
    """The job failed (its `FAILED` line) or ended without an answer."""


def _run(*args: str, timeout_s: float) -> str:
    classes = compiled(SOURCES, "flink-test-job")
    done = subprocess.run(
        java_command(classes, MAIN, *args), capture_output=True, text=True, timeout=timeout_s
    )
    answers = [line for line in done.stdout.splitlines() if line.split(" ")[0].isupper()]
    if done.returncode != 0 or not answers:
        said = answers[-1] if answers else " ".join(done.stderr.split()[-60:])
        raise FlinkJobError(f"Flink job {args[4]} ({done.returncode}): {said}")
    return answers[-1]


def stop_with_savepoint(
    bootstrap: str, topic: str, sink: Path, after: int, savepoints: Path, restore: str = "-"
) -> str:
    """Run until `after` lines are in `sink`, stop with a savepoint under `savepoints`; its
    path."""
    line = _run(
        bootstrap, topic, str(sink), restore, "stop", str(after), str(savepoints), timeout_s=600
    )
    return line.removeprefix("SAVEPOINT ").removeprefix("file:")


def run_until_quiet(
    bootstrap: str,
    topic: str,
    sink: Path,
    restore: str,
    expect: int,
    quiet_s: int = 8,
    group: str | None = None,
) -> str:
    """Run (restored from `restore`) until `sink` holds `expect` lines and stays quiet
    `quiet_s` seconds (or 3 × that without them); "DONE n", or raises on the job's failure.
    `group`: the source under a new uid from that group's committed offsets (`--into-group`)."""
    extra = [group] if group else []
    return _run(bootstrap, topic, str(sink), restore, "run", str(expect), str(quiet_s), *extra,
                timeout_s=600)  # fmt: skip
