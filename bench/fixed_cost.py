"""Fixed cost: the smallest `migrate` dry run against a trivial PySpark job, same run.

World: one topic with one partition of RECORDS records on a local source cluster, replicated to
a local destination cluster from offset REPLICATED_FROM (same keys, values and timestamps), and
one stopped group committed at COMMITTED. Then ROUNDS alternating rounds of, each a fresh JVM:

(a) `bench/trivial_job.py` (a session and `spark.range(10).count()`), submitted with exactly
    the spark-submit command `spark-submit.sh --print-command` gives for the migrate run below
    (same master, options, environment), with only the job file swapped;
(b) `./spark-submit.sh --master local[2] migrate --config … --quiet -o json` (dry run).

Then the scheduled rerun that has nothing to do: one untimed `migrate --execute` commits the
group, and ROUNDS more alternating rounds time (a) against (c) the same `migrate --execute`
again, which must find the group ALREADY_MIGRATED.

One untimed trivial run first warms the disk cache. Prints every run, the medians and the
ratios (b)/(a) (target <= 1.5x) and (c)/(a), then where one more dry run (progress on) spends
its time, from the arrival time of each progress line. Load from other processes only ever
adds time, and hits both jobs alike as the rounds alternate; the load average is printed
beside the result. The plan must be exact (destination offset COMMITTED - REPLICATED_FROM),
so a fast wrong answer fails the bench (exit 1).

    .venv/bin/python bench/fixed_cost.py [--rounds 3] [--records 300]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ferry.testing.brokers import local_brokers
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

ROOT = Path(__file__).resolve().parents[1]
TRIVIAL_JOB = ROOT / "bench" / "trivial_job.py"
MASTER = "local[2]"
TOPIC = "orders"
REPLICATED_FROM = 100
GROUP = "fixed-cost"
PROGRESS = re.compile(r"^\[\s*[\d.]+s\] (?P<msg>.*)$")


def build_world(src: dict, dst: dict, records: int) -> int:
    """Produce the world; returns the group's committed offset on the source."""
    create_topics(src, {TOPIC: 1})
    create_topics(dst, {TOPIC: 1})
    base = int(time.time() * 1000) - 3_600_000
    rows = [
        Record(f"k{i % 13}".encode(), f"v{i}".encode(), base + i * 1000) for i in range(records)
    ]
    produce(src, TOPIC, 0, rows)
    produce(dst, TOPIC, 0, rows[REPLICATED_FROM:])
    committed = records - records // 6
    commit_offsets(src, GROUP, {(TOPIC, 0): committed})
    return committed


def trivial_command(migrate_argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """The environment and spark-submit command `spark-submit.sh` would run for migrate, with
    the job file swapped for the trivial job."""
    printed = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--print-command", *migrate_argv],
        capture_output=True,
        text=True,
        check=True,
        env=_clean_env(),
    ).stdout
    words = shlex.split(printed)
    if words[0] != "env":
        raise SystemExit(f"unexpected --print-command output: {printed[:200]}")
    words = words[1:]
    env: dict[str, str] = {}
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    job = words.index(str(ROOT / "jobs" / "migrate.py"))
    return env, [*words[:job], str(TRIVIAL_JOB)]


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # FERRY_MASTER is for sessions built without spark-submit; the command names the master.
    env = {k: v for k, v in os.environ.items() if k != "FERRY_MASTER"}
    return {**env, **(extra or {})}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str, list[tuple[float, str]]]:
    """Run to completion; returns the elapsed time, stdout, and each stderr line with the time
    it arrived (seconds after the start)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    lines: list[tuple[float, str]] = []

    def drain() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            lines.append((time.monotonic() - t0, line.rstrip("\n")))

    reader = threading.Thread(target=drain)
    reader.start()
    stdout = proc.stdout.read()  # type: ignore[union-attr]
    proc.wait()
    reader.join()
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        tail = "\n".join(line for _, line in lines[-20:])
        raise SystemExit(f"{argv[-4:]} exited {proc.returncode}:\n{tail}")
    return elapsed, stdout, lines


def check_plan(stdout: str, expected: int, status: str = "READY") -> str | None:
    rows = json.loads(stdout)
    if len(rows) != 1:
        return f"expected one plan row, got {len(rows)}"
    row = rows[0]
    if row["destination_offset"] != expected or row["group_status"] != status:
        return f"plan row {row} (expected destination offset {expected}, {status})"
    return None


def alternate(
    rounds: int,
    name: str,
    trivial: tuple[list[str], dict[str, str]],
    job: list[str],
    check: Callable[[str], str | None],
) -> tuple[list[float], list[float], list[str]]:
    """`rounds` alternating runs of the trivial job and `job`: their times and what failed."""
    times: tuple[list[float], list[float]] = ([], [])
    failures = []
    for r in range(rounds):
        elapsed, _, _ = timed(trivial[0], _clean_env(trivial[1]))
        times[0].append(elapsed)
        elapsed, stdout, _ = timed(job, _clean_env())
        times[1].append(elapsed)
        if wrong := check(stdout):
            failures.append(f"{name} round {r + 1}: {wrong}")
        print(
            f"  {name} round {r + 1}: trivial {times[0][-1]:.1f}s, {name} {times[1][-1]:.1f}s",
            file=sys.stderr,
        )
    return times[0], times[1], failures


def breakdown(lines: list[tuple[float, str]], total: float) -> list[tuple[str, float]]:
    """Stages between the progress lines' arrival times (seconds after the submit started)."""
    marks = [(t, m["msg"]) for t, line in lines if (m := PROGRESS.match(line))]
    labels = {  # each progress line ends the stage named here
        "discovering groups": "JVM, Python driver and session start",
        "groups selected": "discover: admin calls on both clusters",
        "source: reading": "committed offsets as a DataFrame",
        "destination: step": "source read, its coverage check and the anchors (Spark jobs)",
        "destination: read": "destination read and the search's slice state",
        "destination: reading": "source read, anchors and destination window lookups",
        "matching anchors": "destination last timestamps (probes) and the plan's set-up",
    }
    out = []
    previous = 0.0
    for t, msg in marks:
        label = next((v for k, v in labels.items() if k in msg), msg)
        out.append((label, t - previous))
        previous = t
    out.append(("matching (a Spark job), ledger dry-run write, output, exit", total - previous))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=300)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferry-fixed-cost-"))
    (work / "logs").mkdir()  # the clusters' folders go in it
    with local_brokers("fixed-src", "fixed-dst", log_dir=work / "logs") as (src, dst):
        committed = build_world(src.config, dst.config, args.records)
        expected = committed - REPLICATED_FROM
        config = work / "migrate.yaml"
        config.write_text(
            f"source:\n  bootstrap.servers: {src.bootstrap}\n"
            f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
            f"ledger:\n  path: {work / 'ledger'}\n"
        )
        job_args = ["migrate", "--config", str(config), "--quiet", "-o", "json"]
        migrate_argv = [str(ROOT / "spark-submit.sh"), "--master", MASTER, *job_args]
        trivial_env, trivial_argv = trivial_command(["--master", MASTER, *job_args])
        print(
            f"world: 1 partition, {args.records} records, replicated from offset "
            f"{REPLICATED_FROM}; group {GROUP} at {committed}",
            file=sys.stderr,
        )
        load_before = os.getloadavg()[0]
        trivial = (trivial_argv, trivial_env)
        timed(trivial_argv, _clean_env(trivial_env))  # warm-up, not counted
        trivial_s, migrate_s, failures = alternate(
            args.rounds, "dry run", trivial, migrate_argv, lambda out: check_plan(out, expected)
        )
        verbose = [a for a in migrate_argv if a != "--quiet"]
        total, stdout, lines = timed(verbose, _clean_env())
        stages = breakdown(lines, total)
        execute = [*migrate_argv, "--execute"]
        _, stdout, _ = timed(execute, _clean_env())
        if wrong := check_plan(stdout, expected, "COMMITTED"):
            failures.append(f"execute: {wrong}")
        trivial2_s, rerun_s, more = alternate(
            args.rounds,
            "rerun",
            trivial,
            execute,
            lambda out: check_plan(out, expected, "ALREADY_MIGRATED"),
        )
        failures += more
        load_after = os.getloadavg()[0]

    def show(values: list[float]) -> str:
        return f"{statistics.median(values):6.1f}s  (runs: {', '.join(f'{v:.1f}' for v in values)})"

    median = statistics.median
    print(f"trivial PySpark job          : {show(trivial_s)}")
    print(f"migrate dry run, 1 group/1 p : {show(migrate_s)}")
    print(
        f"fixed cost, migrate / trivial: {median(migrate_s) / median(trivial_s):5.2f}x "
        "(target <= 1.5x)"
    )
    print(f"trivial PySpark job (again)  : {show(trivial2_s)}")
    print(f"rerun, ALREADY_MIGRATED      : {show(rerun_s)}")
    print(f"rerun / trivial              : {median(rerun_s) / median(trivial2_s):5.2f}x")
    print(f"load average                 : {load_before:.1f} before, {load_after:.1f} after")
    print(f"where one more migrate run spends its {total:.1f}s:")
    for label, seconds in stages:
        print(f"  {seconds:6.1f}s  {label}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
