"""`spark-submit.sh` as users run it: usage errors, and a real job through spark-submit with the
library shipped to the executors as a zip."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from ferry.testing.produce import commit_offsets, create_topics

from .jobrunner import ROOT

pytestmark = pytest.mark.integration

SCRIPT = ROOT / "spark-submit.sh"


def submit(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_usage_lists_the_jobs_and_exits_2():
    for args in ((), ("no-such-job",), ("--master",)):
        result = submit(*args)
        assert result.returncode == 2, args
        assert "jobs: decode-offsets groups lag-snapshot lag-status migrate" in result.stderr
    assert "unknown job 'no-such-job'" in submit("no-such-job").stderr


def test_a_job_runs_through_spark_submit(cluster, unique, tmp_path):
    topic, group = f"{unique}-t", f"{unique}-g"
    create_topics(cluster.config, {topic: 2})
    commit_offsets(cluster.config, group, {(topic, 0): 0, (topic, 1): 0})
    config = tmp_path / "groups.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {cluster.bootstrap}
            """
        )
    )
    result = submit("--master", "local[1]", "groups", "list", "--config", str(config),
                    "--group", group, "-o", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {
            "group": group,
            "state": "EMPTY",
            "protocol_type": "consumer",
            "members": 0,
            "topics": 1,
            "partitions": 2,
        }
    ]
    assert "Traceback" not in result.stderr and "INFO" not in result.stderr

    # spark-submit merges a Python driver's stderr into stdout; spark-submit.sh keeps progress
    # on stderr, so `-o json` output stays machine-readable
    described = submit("groups", "describe", "--config", str(config), "--group", group, "-o",
                       "json")  # fmt: skip
    assert described.returncode == 0, described.stderr
    [answer] = json.loads(described.stdout)
    assert answer["group"] == group and answer["lag"] == 0
    assert "describing 1 groups" in described.stderr

    bad = submit("groups", "list", "--config", str(tmp_path / "missing.yaml"))
    assert bad.returncode == 2
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot read config file"), bad.stderr
    assert "Traceback" not in bad.stderr
