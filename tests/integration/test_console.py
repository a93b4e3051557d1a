"""The console and the Spark UI of a real run, as a scheduler and an operator see them.

A `migrate --execute` through `./spark-submit.sh` (local master; its reads through Spark, so
its stages are Spark jobs of some seconds each) with its stderr read from a pipe, as a
scheduler reads it, each line stamped on arrival. Its progress lines must arrive as they are
written, not when a later stage has begun (a block-buffering filter on stderr, such as mawk
reading a pipe, delivered a run's lines together at its end). Its event log says what the
Spark UI and the History Server show for each Spark job: the description naming the Ferry
job, its run id and the stage the progress line announced.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import ROOT, write_migrate_config

pytestmark = pytest.mark.integration

SCRIPT = ROOT / "spark-submit.sh"
STAMPED = re.compile(r"^\[\s*(?P<s>\d+\.\d)s\] (?P<message>.*)$")
BASE = 1_760_000_000_000
# A line crosses two pipes (the console filter's and this one) in milliseconds; half a second
# leaves room for a busy machine's scheduling. A line held back until a later stage arrives
# seconds after that stage's own line was written.
CROSSING_S = 0.5


@dataclass
class Line:
    arrived_s: float  # time.monotonic() when this process read it
    text: str


@dataclass
class WatchedRun:
    code: int
    stdout: str
    lines: list[Line]
    events: Path

    @property
    def stderr(self) -> str:
        return "".join(f"{line.text}\n" for line in self.lines)


def watch(
    args: list[str], env: dict[str, str], timeout_s: float = 600
) -> tuple[int, str, list[Line]]:
    """Run ./spark-submit.sh ARGS with stdout and stderr on pipes; every stderr line with the
    moment it was read."""
    proc = subprocess.Popen(
        [str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
        env=env, cwd=ROOT,
    )  # fmt: skip
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    lines: list[Line] = []
    deadline = time.monotonic() + timeout_s
    try:
        # unbuffered: readline returns as soon as a line is in the pipe
        while raw := proc.stderr.readline():  # type: ignore[union-attr]
            lines.append(Line(time.monotonic(), raw.decode("utf-8", "replace").rstrip("\n")))
            assert time.monotonic() < deadline, "the run did not end"
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=60)
    return code, b"".join(out).decode(), lines


def watched_migrate(clusters, work: Path, *job_args: str) -> WatchedRun:  # noqa: ANN001
    """One migrate run with its console and event log: two groups on two topics, the
    destination a replica from offset 5."""
    src, dst = clusters
    prefix = f"console-{os.getpid()}-{time.time_ns() % 10**9}"
    topics = {f"{prefix}-a": 2, f"{prefix}-b": 1}
    create_topics(src.config, topics)
    create_topics(dst.config, topics)
    for topic, partitions in topics.items():
        for p in range(partitions):
            records = [Record(b"k", f"{topic}-{p}-{i}".encode(), BASE + i * 10) for i in range(60)]
            produce(src.config, topic, p, records)
            produce(dst.config, topic, p, records[5:])
    commit_offsets(src.config, f"{prefix}-g1", {(f"{prefix}-a", 0): 30, (f"{prefix}-a", 1): 12})
    commit_offsets(src.config, f"{prefix}-g2", {(f"{prefix}-b", 0): 40})
    # reads through Spark (not on the driver), so the run has Spark jobs to describe
    config = write_migrate_config(work, src, dst, prefix, reader={"driver_max_offsets": 0})
    events = work / "events"
    events.mkdir()
    env = {**os.environ, "FERRY_LOG_DIR": str(work / "log")}
    code, stdout, lines = watch(
        ["--master", "local[2]", "--conf", "spark.eventLog.enabled=true",
         "--conf", "spark.eventLog.compress=false", "--conf", f"spark.eventLog.dir=file://{events}",
         "migrate", "--config", config, "--execute", "-o", "json", *job_args],
        env,
    )  # fmt: skip
    return WatchedRun(code, stdout, lines, events)


@pytest.fixture(scope="module")
def watched_run(clusters, tmp_path_factory) -> WatchedRun:
    return watched_migrate(clusters, tmp_path_factory.mktemp("console"))


def progress_lines(lines: list[Line]) -> list[tuple[float, float, str]]:
    """(stamp in the job's clock, arrival in ours, message) of every progress line."""
    found = []
    for line in lines:
        m = STAMPED.match(line.text)
        if m:
            found.append((float(m["s"]), line.arrived_s, m["message"]))
    return found


def late_lines(lines: list[Line]) -> list[str]:
    """Progress lines that reached the console after the next one was written. Both clocks
    are monotonic; the job's stamps count from its start, so the offset between them is
    estimated from the line that crossed fastest (no line arrives before it is written)."""
    stamped = progress_lines(lines)
    offset = min(arrived - stamp for stamp, arrived, _ in stamped)
    late = []
    for (stamp, arrived, message), (next_stamp, _, next_message) in zip(
        stamped, stamped[1:], strict=False
    ):
        written_next = next_stamp + offset  # when the job had gone on, in our clock
        if arrived - written_next > CROSSING_S:
            late.append(
                f"{message!r} (stamped {stamp:.1f}s) arrived {arrived - written_next:.1f}s after "
                f"{next_message!r} was written"
            )
    return late


def test_progress_reaches_a_piped_console_as_it_is_written(watched_run):
    """What a scheduler reading the run's stderr sees: each progress line before the job has
    gone on to its next stage."""
    assert watched_run.code == 0, watched_run.stderr
    stamped = progress_lines(watched_run.lines)
    assert len(stamped) >= 5, watched_run.stderr
    span = stamped[-1][0] - stamped[0][0]
    assert span > 3 * CROSSING_S, f"the run's stages took {span:.1f}s: too fast to tell"
    assert late_lines(watched_run.lines) == [], watched_run.stderr
    # the console is Ferry's: no Java, no Spark logging
    assert not re.search(r"\b(WARN|INFO)\b|^\tat ", watched_run.stderr, re.M), watched_run.stderr


def test_late_lines_are_told_apart():
    """The check itself: lines that all arrive at the end, as a block-buffered filter
    delivers them, are late; lines that arrive as stamped are not."""
    stamps = [0.0, 0.2, 3.1, 7.4, 9.0]
    live = [Line(100.0 + s + 0.01, f"[{s:6.1f}s] stage {i}") for i, s in enumerate(stamps)]
    held = [Line(109.02, line.text) for line in live]
    assert late_lines(live) == []
    assert len(late_lines(held)) == 3  # all but the last (no next) and the one before it


def job_descriptions(events: Path) -> list[str | None]:
    """Each Spark job's description (spark.job.description) from the run's event log."""
    descriptions = []
    for log in events.rglob("*"):
        if not log.is_file():
            continue
        for raw in log.read_text().splitlines():
            if '"SparkListenerJobStart"' in raw:
                properties = json.loads(raw).get("Properties") or {}
                descriptions.append(properties.get("spark.job.description"))
    return descriptions


def test_every_spark_job_names_the_ferry_job_its_run_and_its_stage(watched_run):
    """The Spark UI's and the History Server's job pages: `migrate run RUN_ID: STAGE`, where
    STAGE is the progress line the console showed when the job started."""
    assert watched_run.code == 0, watched_run.stderr
    [run_id] = re.findall(r"\brun (migrate-\S+);", watched_run.stderr)
    descriptions = job_descriptions(watched_run.events)
    assert len(descriptions) >= 2, descriptions
    prefix = f"migrate run {run_id}: "
    assert [d for d in descriptions if not (d or "").startswith(prefix)] == [], descriptions
    said = {message for _, _, message in progress_lines(watched_run.lines)}
    stages = {d.removeprefix(prefix) for d in descriptions if d}
    assert stages <= said, (stages, said)
    assert any(s.startswith("source: reading") for s in stages), stages
    assert len(stages) >= 2, stages


@pytest.mark.slow
def test_progress_reaches_a_piped_console_as_it_is_written_under_verbose(clusters, tmp_path):
    """--verbose leaves stderr unfiltered (Spark's own logging on it too): the driver's lines
    still arrive as written."""
    run = watched_migrate(clusters, tmp_path, "--verbose")
    assert run.code == 0, run.stderr[-5000:]
    assert len(progress_lines(run.lines)) >= 5, run.stderr[-5000:]
    assert re.search(r"\bINFO\b", run.stderr)  # Spark's console logging, as asked
    assert late_lines(run.lines) == [], run.stderr[-5000:]
