"""The shipped environment on YARN is uploaded once per content: `spark-submit.sh` puts
build/ferry-env.tar.gz on the cluster's filesystem as
/user/$USER/.ferry/env/ferry-env-<sha256>.tar.gz when it is missing and names that copy in
--archives, so spark-submit uploads it with no job, and a second submit uploads nothing.
Each run's result file (cluster mode) is deleted once read, and one left by a deletion cut
short is removed by a later job.
Against a real single-node YARN + HDFS (`ferry.testing.yarn`). Run by `make test-cluster`.
"""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
import time
from collections.abc import Iterator

import pytest

from ferry.result import fs_shell
from ferry.testing.produce import Record, commit_offsets, create_topics, produce
from ferry.testing.yarn import Yarn, yarn_cluster

from .jobrunner import ROOT
from .test_yarn import submit

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.yarn]

ARCHIVE = ROOT / "build" / "ferry-env.tar.gz"


@pytest.fixture(scope="module")
def yarn(tmp_path_factory) -> Iterator[Yarn]:
    with yarn_cluster(tmp_path_factory.mktemp("yarn-env")) as cluster:
        yield cluster


def hdfs(yarn: Yarn, *args: str) -> str:
    done = fs_shell(*args)  # HADOOP_CONF_DIR: the MiniCluster's
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_second_submit_uploads_the_environment_no_more(
    yarn, cluster, unique, tmp_path, monkeypatch
):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(yarn.conf_dir))
    sha = hashlib.sha256(ARCHIVE.read_bytes()).hexdigest()
    user = os.environ.get("USER") or os.popen("id -un").read().strip()
    env_dir = f"/user/{user}/.ferry/env"
    copy = f"{env_dir}/ferry-env-{sha}.tar.gz"
    staging = f"{tmp_path}/staging"
    topic, group = f"{unique}-t", f"{unique}-g"
    create_topics(cluster.config, {topic: 1})
    produce(cluster.config, topic, 0, [Record(b"k", b"v", None) for _ in range(3)])
    commit_offsets(cluster.config, group, {(topic, 0): 2})
    config = tmp_path / "groups.yaml"
    config.write_text(textwrap.dedent(f"cluster:\n  bootstrap.servers: {cluster.bootstrap}\n"))
    # A result file whose deletion was cut short two days ago: a job writing its own removes it.
    results = f"/user/{user}/.ferry/results"
    stale = f"{results}/ferry-groups-{unique}-stale.json"
    hdfs(yarn, "-mkdir", "-p", results)
    two_days_ago = time.strftime("%Y%m%d:%H%M%S", time.localtime(time.time() - 2 * 86400))
    hdfs(yarn, "-touch", "-m", "-t", two_days_ago, stale)
    runs = []
    for _ in range(2):
        # Spark's own uploads for the application kept where the test can list them.
        done = submit(yarn, tmp_path, "--conf", "spark.yarn.preserve.staging.files=true",
                      "--conf", f"spark.yarn.stagingDir={yarn.fs}{staging}",
                      "groups", "list", "--config", str(config), "--group", group,
                      "-o", "json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        # the job's own output, from a driver started by the environment's launcher
        assert group in done.stdout and isinstance(json.loads(done.stdout), list | dict)
        listed = hdfs(yarn, "-ls", env_dir).splitlines()
        stat = hdfs(yarn, "-stat", "%Y %b", copy).strip()
        runs.append((done.stderr, [x.split()[-1] for x in listed if x.startswith("-")], stat))

    (first_err, first_files, first_stat), (second_err, second_files, second_stat) = runs
    assert first_err.count(f"uploading the Python environment to {yarn.fs}{copy}") == 1
    assert "uploading" not in second_err
    assert first_files == second_files == [copy]  # no temporary copy left behind
    assert first_stat == second_stat  # the same file: not written again
    assert int(first_stat.split()[1]) == ARCHIVE.stat().st_size
    # spark-submit itself uploaded the library and the job for each application, never the
    # environment (it named the cluster's copy).
    staged = [x.split()[-1] for x in hdfs(yarn, "-ls", "-R", staging).splitlines()]
    assert sum(p.endswith("/ferry-lib.zip") for p in staged) == 2, staged
    assert not [p for p in staged if "ferry-env" in p], staged
    # Each run's result file is deleted once read (in the background), the stale one by a job.
    deadline = time.monotonic() + 60
    while left := [x for x in hdfs(yarn, "-ls", results).splitlines() if x.endswith(".json")]:
        assert time.monotonic() < deadline, left
        time.sleep(1)
