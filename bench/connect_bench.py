"""Spark Connect against spark-submit: the same `migrate` dry run both ways, same world, same run.

World: fixed_cost.py's (one topic, one partition of RECORDS records on a local source cluster,
replicated to a local destination from offset 100, one stopped group). A Spark Connect server
(PySpark's own, local[2], ferry.testing.connect_server) is started once, as a platform's
endpoint would be up before any job. Then ROUNDS alternating rounds of:

(a) `./spark-submit.sh --master local[2] migrate --config … --quiet -o json` (a fresh JVM each);
(b) `ferry --remote sc://localhost:PORT migrate --config … --quiet -o json` (no JVM here).

One untimed run of each first (the disk cache; the server's first session and Python worker).
Prints every run, the medians and the ratio (b)/(a) (target <= 1.3x). Both plans must be exact
(destination offset = committed - 100), so a fast wrong answer fails the bench (exit 1).

    .venv/bin/python bench/connect_bench.py [--rounds 3] [--records 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixed_cost import (  # noqa: E402 - a bench beside this one
    MASTER,
    REPLICATED_FROM,
    build_world,
    check_plan,
    timed,
)

from ferry.testing.brokers import local_brokers  # noqa: E402
from ferry.testing.connect_server import connect_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FERRY = Path(sys.executable).parent / "ferry"


def _env() -> dict[str, str]:
    # FERRY_MASTER and SPARK_REMOTE would choose the session for both; each command names its own
    return {k: v for k, v in os.environ.items() if k not in ("FERRY_MASTER", "SPARK_REMOTE")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=300)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferry-connect-bench-"))
    (work / "logs").mkdir()
    with (
        local_brokers("connect-src", "connect-dst", log_dir=work / "logs") as (src, dst),
        connect_server(work / "server.log", master=MASTER) as url,
    ):
        committed = build_world(src.config, dst.config, args.records)
        expected = committed - REPLICATED_FROM
        config = work / "migrate.yaml"
        config.write_text(
            f"source:\n  bootstrap.servers: {src.bootstrap}\n"
            f"destination:\n  bootstrap.servers: {dst.bootstrap}\n"
            f"ledger:\n  path: {work / 'ledger'}\n"
        )
        job = ["migrate", "--config", str(config), "--quiet", "-o", "json"]
        ways = {
            "spark-submit": [str(ROOT / "spark-submit.sh"), "--master", MASTER, *job],
            "connect": [str(FERRY), "--remote", url, *job],
        }
        print(f"world: {args.records} records, group at {committed}; server {url}", file=sys.stderr)
        for argv in ways.values():  # untimed
            timed(argv, _env())
        times: dict[str, list[float]] = {name: [] for name in ways}
        failures = []
        for r in range(args.rounds):
            for name, argv in ways.items():
                elapsed, stdout, _ = timed(argv, _env())
                times[name].append(elapsed)
                if wrong := check_plan(stdout, expected):
                    failures.append(f"{name} round {r + 1}: {wrong}")
            print(
                f"  round {r + 1}: "
                + ", ".join(f"{name} {t[-1]:.1f}s" for name, t in times.items()),
                file=sys.stderr,
            )
    submit, connect = (statistics.median(times[n]) for n in ("spark-submit", "connect"))
    print(f"migrate dry run, median of {args.rounds}: spark-submit.sh {submit:.2f}s, "
          f"ferry --remote {connect:.2f}s: {connect / submit:.2f}x (target <= 1.3x); "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    for failure in failures:
        print(f"error: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
