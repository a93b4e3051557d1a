"""Apache Kafka's own `kafka-consumer-groups`, run against a local test cluster and parsed.

The conformance suite (tests/integration/test_conformance.py) holds `groups describe` and
`groups reset` to the real tool: `ConsumerGroupCommand` from the `kafka-tools` jar that
`ferry.testing.artifacts` fetches with the brokers, run as its own JVM (what the
`kafka-consumer-groups.sh` script runs). One JVM start costs seconds on a shared machine, so
the helpers here take several groups per call (`--group` repeated) and `run_many` runs
independent invocations side by side.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ferry.testing.artifacts import KAFKA, classpath

MAIN = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
# A client JVM: small heap, fast start (no JIT tiers beyond C1 for a run of seconds).
JVM_OPTIONS = ("-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
DESCRIBE_HEADER = (
    "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID"
).split()


class ToolError(RuntimeError):
    """The tool exited non-zero or printed something this parser does not know."""


@dataclass(frozen=True)
class ToolRun:
    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class DescribedPartition:
    """One row of `--describe`; None where the tool prints `-`."""

    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


def command(bootstrap: str, *args: str) -> list[str]:
    return [
        "java",
        *JVM_OPTIONS,
        # The tool logs through log4j2 to stderr; only its errors matter here.
        "-Dlog4j2.level=ERROR",
        "-Duser.timezone=UTC",
        "-cp",
        classpath(KAFKA),
        MAIN,
        "--bootstrap-server",
        bootstrap,
        *args,
    ]


def run(bootstrap: str, *args: str, timeout_s: float = 120) -> ToolRun:
    """One invocation; the tool's output as it printed it (exit code not judged here)."""
    done = subprocess.run(
        command(bootstrap, *args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "KAFKA_HEAP_OPTS": ""},
    )
    return ToolRun(tuple(args), done.returncode, done.stdout, done.stderr)


def run_many(
    bootstrap: str, invocations: Sequence[Sequence[str]], workers: int = 3
) -> list[ToolRun]:
    """Several independent invocations at once (each is mostly JVM start-up)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda a: run(bootstrap, *a), invocations))


def _value(cell: str) -> str | None:
    return None if cell == "-" else cell


def _number(cell: str) -> int | None:
    return None if cell == "-" else int(cell)


def parse_describe(stdout: str) -> list[DescribedPartition]:
    """The rows of `--describe` (one or several groups): each group's block is a header line
    and one line per partition, columns separated by spaces; the tool's remarks ("has no
    active members") are skipped."""
    rows = []
    header = False
    for line in stdout.splitlines():
        cells = line.split()
        if not cells:
            header = False
            continue
        if cells == DESCRIBE_HEADER:
            header = True
            continue
        if not header:
            continue  # a remark such as "Consumer group 'g' has no active members."
        if len(cells) != len(DESCRIBE_HEADER):
            raise ToolError(f"unexpected --describe line: {line!r}")
        group, topic, partition, current, end, lag, consumer, host, client = cells
        rows.append(
            DescribedPartition(
                group,
                topic,
                int(partition),
                _number(current),
                _number(end),
                _number(lag),
                _value(consumer),
                _value(host),
                _value(client),
            )
        )
    return rows


def describe(bootstrap: str, groups: Iterable[str]) -> tuple[list[DescribedPartition], ToolRun]:
    """`--describe` of the groups in one run: the parsed rows and the run itself."""
    args = ["--describe"] + [a for g in groups for a in ("--group", g)]
    done = run(bootstrap, *args)
    return parse_describe(done.stdout), done


def reset_args(groups: Iterable[str], scope: Sequence[str], spec: Sequence[str]) -> list[str]:
    """`--reset-offsets --dry-run --export` of the groups for one scope and spec."""
    return [
        "--reset-offsets",
        *[a for g in groups for a in ("--group", g)],
        *scope,
        *spec,
        "--dry-run",
        "--export",
    ]


def parse_export(stdout: str, group: str | None = None) -> dict[tuple[str, str, int], int]:
    """An `--export` CSV: `group,topic,partition,offset` (several groups) or
    `topic,partition,offset` (one group, named by `group`) → {(group, topic, partition): offset}.
    Lines that are not CSV rows (warnings the tool prints on stdout) are skipped."""
    out = {}
    for line in stdout.splitlines():
        cells = line.strip().split(",")
        if len(cells) == 4 and cells[2].isdigit() and cells[3].lstrip("-").isdigit():
            out[(cells[0], cells[1], int(cells[2]))] = int(cells[3])
        elif len(cells) == 3 and cells[1].isdigit() and cells[2].lstrip("-").isdigit():
            if group is None:
                raise ToolError("a topic,partition,offset export needs the group it is for")
            out[(group, cells[0], int(cells[1]))] = int(cells[2])
    return out


def reset_from_file(bootstrap: str, groups: Sequence[str], path: str, execute: bool) -> ToolRun:
    """`--reset-offsets --from-file PATH` for the groups, executed or dry."""
    args = [
        "--reset-offsets",
        *[a for g in groups for a in ("--group", g)],
        "--from-file",
        path,
        "--execute" if execute else "--dry-run",
    ]
    return run(bootstrap, *args)


def warnings(done: ToolRun) -> list[str]:
    """The tool's own remarks about a run (clamps, errors), from both streams."""
    lines = (done.stdout + "\n" + done.stderr).splitlines()
    return [line for line in lines if line.startswith(("Warn", "Error", "WARN", "ERROR"))]


def offsets_only(rows: Iterable[DescribedPartition]) -> Mapping[tuple[str, str, int], int | None]:
    return {(r.group, r.topic, r.partition): r.current_offset for r in rows}
