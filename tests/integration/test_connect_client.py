"""Ferry installed beside a Connect-only client, run against a server with serverless's limits.

A virtualenv holding only `pyspark-client` (the shape of a Databricks serverless task's Python,
which has Databricks Connect and never the full PySpark) gets Ferry's base install, with its
dependencies resolved by pip; nothing may pull the full PySpark or delta-spark into it. Its
`ferry` runs the jobs through a real local Connect server (PySpark's own, as test_connect.py's)
whose gRPC interceptor gives it the limits of Databricks serverless (ferry.testing
.connect_server, `limits=True`): `persist` refused, `spark.app.id` and Delta's settings
refused, `spark.sql.shuffle.partitions` read as `auto`. Each `-o json` output and exit code
is the classic run's on a twin world (test_connect.py's worlds), and migrate stays exact.

The virtualenv is kept in ~/.cache/ferry ($FERRY_CACHE), made once (`make test-slow` makes it
before the tests; made here when missing, which needs PyPI); each run installs this checkout's
Ferry into it again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.testing.produce import read_committed

from .jobrunner import run_job
from .test_connect import build_world, document, plain

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLIENT = "pyspark-client==4.2.0"
CACHE = Path(os.environ.get("FERRY_CACHE") or Path.home() / ".cache" / "ferry")
CLIENT_VENV = CACHE / f"{CLIENT.replace('==', '-')}-venv"


def pip(venv: Path, *args: str) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", *args, "--disable-pip-version-check"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
    return done.stdout


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Path:  # noqa: ANN001
    """The client virtualenv with this checkout's Ferry installed anew (its base install:
    pip resolves the dependencies, offline once they are there). Built from a copy of
    setup.py and lib/, so the checkout's build/ is left alone."""
    if not (CLIENT_VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(CLIENT_VENV)], check=True)
        pip(CLIENT_VENV, "install", "-q", CLIENT, "setuptools>=70.1")
    source = tmp_path_factory.mktemp("ferry-source")
    shutil.copy(ROOT / "setup.py", source)
    shutil.copytree(ROOT / "lib", source / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    pip(CLIENT_VENV, "uninstall", "-q", "-y", "ferry")
    pip(CLIENT_VENV, "install", "-q", "--no-build-isolation", str(source))
    return CLIENT_VENV


def client_env(**extra: str) -> dict[str, str]:
    """This environment without what would point the client at this checkout or a server."""
    drop = ("PYTHONPATH", "SPARK_REMOTE", "SPARK_HOME", "PYSPARK_PYTHON")
    return {k: v for k, v in os.environ.items() if k not in drop} | extra


def ferry(venv: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "ferry"), *args], capture_output=True, text=True, timeout=300,
        env=client_env(), check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def limited(tmp_path_factory):  # noqa: ANN201
    """A Connect server with serverless's limits; yields its URL and its log."""
    from ferry.testing.connect_server import connect_server

    log = tmp_path_factory.mktemp("limited") / "server.log"
    with connect_server(log, limits=True) as url:
        yield url, log


def test_the_client_holds_no_full_pyspark_and_runs_without_it(client, tmp_path):
    listed = {line.split()[0].lower() for line in pip(client, "list").splitlines()[2:]}
    assert {"pyspark-client", "ferry", "deltalake", "confluent-kafka"} <= listed, listed
    assert not listed & {"pyspark", "delta-spark", "py4j", "pyspark-connect"}, listed
    classic = subprocess.run(
        [str(client / "bin" / "python"), "-c", "import pyspark.core"], capture_output=True,
        text=True, env=client_env(), check=False,
    )  # fmt: skip
    assert classic.returncode == 1 and "No module named 'pyspark.core'" in classic.stderr
    version = ferry(client, "--version")
    assert (version.returncode, version.stdout) == (0, "ferry 0.1.0 (pyspark-client 4.2.0)\n")
    assert version.stderr == ""
    helped = ferry(client, "--help")
    assert helped.returncode == 2 and "jobs: audit" in helped.stderr, helped.stderr
    # a local session needs the full PySpark: one line naming the extra, before any work
    config = tmp_path / "c.yaml"
    config.write_text("source: {bootstrap.servers: 'localhost:1'}\n")
    local = ferry(client, "migrate", "--config", str(config))
    assert local.returncode == 2, local.stderr
    assert local.stderr.startswith("error: a local or spark-submit Spark session needs the full")
    assert "pip install 'ferry[spark]'" in local.stderr
    assert len(local.stderr.strip().splitlines()) == 1, local.stderr


def test_every_job_from_the_client_through_serverless_limits_as_classic(
    client, limited, clusters, spark, tmp_path_factory
):
    # Twin worlds: the classic runs in this process on one, the client's through the limited
    # server on the other (execute runs change a world); each pair's JSON compared made plain.
    url, log = limited
    stamp = int(time.time() * 1000) % 10**8
    worlds = {way: build_world(clusters, tmp_path_factory.mktemp(way), f"cl{stamp}{way[-2:]}")
              for way in ("classic", "client")}  # fmt: skip
    last: dict = {}  # the last pair of runs' stderr (classic, client)

    def both(job: str, *args: str, config: str = "ok") -> tuple[object, object]:
        runs = {}
        for way, world in worlds.items():
            argv = [a.replace("{dir}", str(world["dir"])).replace("{u}", world["u"]) for a in args]
            argv += ["--config", world[config], "--quiet"]
            if way == "classic":
                k = run_job(job, *argv)
                runs[way] = (k.code, k.stdout, k.stderr)
            else:
                c = ferry(client, "--remote", url, job, *argv)
                runs[way] = (c.returncode, c.stdout, c.stderr)
        (k_code, k_out, k_err), (c_code, c_out, c_err) = runs["classic"], runs["client"]
        last["stderr"] = (k_err, c_err)
        assert c_code == k_code, (job, args, k_code, k_err, c_err)
        assert "Traceback" not in c_err, c_err
        if "-o" not in args or not k_out.strip():
            return k_code, None
        k_json = plain(document(k_out), worlds["classic"]["u"])
        assert plain(document(c_out), worlds["client"]["u"]) == k_json, (job, args)
        return k_code, k_json

    code, rows = both("migrate", "-o", "json", config="all")
    assert code == 75 and {r["group_status"] for r in rows} >= {"PENDING"}, last["stderr"]
    # every record read through Spark, by the server's workers: kept without a cache
    spark_reads = ("--set", "reader.driver_max_offsets=0")
    code, rows = both("migrate", "--execute", "-o", "json", *spark_reads)
    assert code == 0 and {r["group_status"] for r in rows} == {"COMMITTED"}, last["stderr"]
    [run_id] = [w.rstrip(";") for w in last["stderr"][1].split() if w.startswith("migrate-")]
    for world in worlds.values():
        u = world["u"]
        committed = read_committed(clusters[1].config, f"{u}-ok-a", f"{u}-")
        assert committed == {(f"{u}-ok-shift", 0): 15, (f"{u}-ok-shift", 1): 30}
    # the run's rollback, planned from the ledger's rows (kept without a cache)
    rollback = ferry(client, "--remote", url, "migrate", "--config", worlds["client"]["ok"],
                     "--rollback", run_id, "--quiet")  # fmt: skip
    assert rollback.returncode == 0 and "Traceback" not in rollback.stderr, rollback.stderr
    assert f"{worlds['client']['u']}-ok-a" in rollback.stdout, rollback.stdout
    assert both("audit", "-o", "json")[1]
    assert both("groups", "describe", "--group", "{u}-.*", "-o", "json", config="all")[1]
    assert both("lag-snapshot")[0] == 0
    assert both("lag-status", "--all-partitions", "-o", "json")[1]
    offsets = ["--set", "offsets.commits_path={dir}/commits",
               "--set", "offsets.groups_path={dir}/gm",
               "--set", "offsets.quarantine_path={dir}/q"]  # fmt: skip
    code, _ = both("decode-offsets", "--topic", "{u}-ok-shift", *offsets)
    assert code == 0
    # the server did refuse: caching, and the settings the runs asked for
    said = log.read_text(errors="replace")
    assert "ServerlessLimits refused: [NOT_SUPPORTED_WITH_SERVERLESS]" in said
    assert "ServerlessLimits refused: [CONFIG_NOT_AVAILABLE] Configuration spark.app.id" in said
