"""Ferry's jobs through TLS and SASL on real Apache Kafka: one cluster whose client listener is
SASL_SSL with SCRAM-SHA-512, one whose listener is mutual TLS (`ssl.client.auth=required`),
their CA and certificates made at test time (`ferry.testing.security`).

Every config here names its secrets and files only as `${VAR}`s read from the environment, as
a user's `conf/` would: `migrate --execute` from the SASL_SSL cluster to the mutual-TLS one
lands exact (its reads forced through Spark's executors), `audit` finds it exact, `groups
describe` and `lag-snapshot` read both clusters. A wrong password and an untrusted CA each
fail every job in one line naming the cluster and the cause, exit 2 (a ConfigError: the same
run again cannot succeed, so a scheduler should not retry it), write nothing, and print no
secret. On the standalone Spark cluster (`make test-cluster`), `migrate --execute` reads on
executors with the certificate files spark-submit.sh shipped to them.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from ferry import kafka
from ferry.testing.brokers import keep_logs, start_broker
from ferry.testing.produce import Record, commit_offsets, create_topics, produce
from ferry.testing.security import mutual_tls, other_ca, sasl_ssl, stranger

from .jobrunner import ROOT, ledger_rows, run_job
from .test_cluster import completed_executors, migrate_on_cluster, standalone  # noqa: F401

# Two clusters of their own (TLS handshakes, SCRAM): `make test-slow`, beside the standalone test.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = 1_760_000_000_000

# What a user's conf/ would say: every secret and file an environment variable.
SASL_SECTION = {
    "security.protocol": "SASL_SSL",
    "ssl.ca.location": "${FERRY_TEST_SASL_CA}",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "${FERRY_TEST_SASL_USERNAME}",
    "sasl.password": "${FERRY_TEST_SASL_PASSWORD}",
}
MTLS_SECTION = {
    "security.protocol": "SSL",
    "ssl.ca.location": "${FERRY_TEST_MTLS_CA}",
    "ssl.certificate.location": "${FERRY_TEST_MTLS_CERTIFICATE}",
    "ssl.key.location": "${FERRY_TEST_MTLS_KEY}",
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """The SASL_SSL cluster and the mutual-TLS cluster, started together."""
    folder = tmp_path_factory.mktemp("security")
    setups = (sasl_ssl(folder / "sasl"), mutual_tls(folder / "mtls"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(start_broker, name, security=setup)
            for name, setup in zip(("sasl", "mtls"), setups, strict=True)
        ]
    brokers = [f.result() for f in futures if f.exception() is None]
    try:
        if len(brokers) < 2:
            raise next(f.exception() for f in futures if f.exception() is not None)
        yield {
            "sasl": brokers[0],
            "mtls": brokers[1],
            "sasl_setup": setups[0],
            "mtls_setup": setups[1],
            "other_ca": other_ca(folder / "other"),
            "stranger": stranger(folder / "stranger"),
        }
    finally:
        keep_logs(brokers, ROOT / "var" / "test-logs" / "security")
        for broker in brokers:
            broker.stop()


@pytest.fixture
def env(secured, monkeypatch):
    """The environment a user's shell or scheduler would give the jobs."""
    sasl, mtls = secured["sasl_setup"], secured["mtls_setup"]
    values = {
        "FERRY_TEST_SASL_CA": str(sasl.ca),
        "FERRY_TEST_SASL_USERNAME": sasl.username,
        "FERRY_TEST_SASL_PASSWORD": sasl.password,
        "FERRY_TEST_MTLS_CA": str(mtls.ca),
        "FERRY_TEST_MTLS_CERTIFICATE": str(mtls.client_certificate),
        "FERRY_TEST_MTLS_KEY": str(mtls.client_key),
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def section(broker, template: dict) -> dict:  # noqa: ANN001 - a LocalBroker
    return {"bootstrap.servers": broker.bootstrap, **template}


def write_yaml(path: Path, config: dict) -> str:
    text = yaml.safe_dump(config, sort_keys=False)
    assert "${FERRY_TEST_" in text  # the file names its secrets, never holds them
    path.write_text(text)
    return str(path)


def migrate_config(tmp: Path, secured, prefix: str, **extra: dict) -> str:  # noqa: ANN001
    """Source: the SASL_SSL cluster; destination: the mutual-TLS one; ledger and audit table
    beside the config. Reads run on the driver (they are small); `extra` sections are merged
    in (the standalone-cluster test sends every read to the executors)."""
    config = {
        "source": section(secured["sasl"], SASL_SECTION),
        "destination": section(secured["mtls"], MTLS_SECTION),
        "groups": {"include": [f"{prefix}-.*"]},
        "topics": {"include": [f"{prefix}-.*"]},
        "ledger": {"path": str(tmp / "ledger")},
        "audit": {"path": str(tmp / "audit")},
        "reader": {"timeout_ms": 10000},
    }
    for name, values in extra.items():
        config.setdefault(name, {}).update(values)
    return write_yaml(tmp / "migrate.yaml", config)


def one_cluster_config(tmp: Path, broker, template: dict, name: str) -> str:  # noqa: ANN001
    config = {
        "cluster": section(broker, template),
        "reader": {"timeout_ms": 10000},
        "ledger": {"path": str(tmp / f"{name}-ledger")},
        "history": {"path": str(tmp / f"{name}-history")},
    }
    return write_yaml(tmp / f"{name}.yaml", config)


def run_secured(env: dict, job: str, *argv: str):  # noqa: ANN201 - a JobResult
    """run_job, asserting the password reached neither stdout nor stderr."""
    result = run_job(job, *argv)
    password = env["FERRY_TEST_SASL_PASSWORD"]
    assert password not in result.stdout and password not in result.stderr, job
    return result


def stopped_group(secured, prefix: str) -> dict:  # noqa: ANN001
    """Topic t (2 partitions) on the SASL_SSL source, replicated from offset 5 to the mTLS
    destination; group g stopped at 30 / 12 on the source (exact destination: 25 / 7)."""
    src, dst = secured["sasl"], secured["mtls"]
    u = f"{prefix}{int(time.time() * 1000) % 10**8}"
    topic = f"{u}-t"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 2})
    for p in (0, 1):
        records = [Record(b"k", f"{p}-{i}".encode(), BASE + i * 10) for i in range(40)]
        produce(src.config, topic, p, records)
        produce(dst.config, topic, p, records[5:])
    group = f"{u}-g"
    commit_offsets(src.config, group, {(topic, 0): 30, (topic, 1): 12})
    return {"u": u, "topic": topic, "group": group}


@pytest.fixture(scope="module")
def world(secured):
    return stopped_group(secured, "s")


def committed(broker, group: str) -> dict:  # noqa: ANN001 - a LocalBroker
    return kafka.committed_offsets(kafka.Cluster("c", broker.config), [group])[group]


def test_migrate_and_audit_through_sasl_ssl_and_mutual_tls(secured, world, env, tmp_path):
    topic, group = world["topic"], world["group"]
    config = migrate_config(tmp_path, secured, world["u"])
    result = run_secured(env, "migrate", "--config", config, "--execute", "-o", "json")
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert {(r["src_partition"], r["destination_offset"], r["status"]) for r in plan} == {
        (0, 25, "MATCHED"),
        (1, 7, "MATCHED"),
    }
    assert committed(secured["mtls"], group) == {(topic, 0): 25, (topic, 1): 7}
    outcomes = [r for r in ledger_rows(tmp_path / "ledger") if r["phase"] == "outcome"]
    assert {(r["partition"], r["new_offset"]) for r in outcomes if r["is_committed"]} == {
        (0, 25),
        (1, 7),
    }

    audit = run_secured(env, "audit", "--config", config, "-o", "json")
    assert audit.code == 0, audit.stderr
    rows = {(r["group"], r["partition"]): r for r in json.loads(audit.stdout)["rows"]}
    assert {k: (r["committed_offset"], r["verdict"]) for k, r in rows.items()} == {
        (group, 0): (25, "EXACT"),
        (group, 1): (7, "EXACT"),
    }


@pytest.mark.parametrize("side", ["sasl", "mtls"])
def test_groups_describe_and_lag_snapshot(secured, world, env, tmp_path, side, spark):
    """Each cluster read alone: describe and snapshot a group committed there."""
    from ferry.lag import history

    broker = secured[side]
    template = SASL_SECTION if side == "sasl" else MTLS_SECTION
    group = f"{world['u']}-{side}-lag"
    commit_offsets(broker.config, group, {(world["topic"], 0): 4, (world["topic"], 1): 20})
    ends = {"sasl": 40, "mtls": 35}[side]
    config = one_cluster_config(tmp_path, broker, template, side)

    described = run_secured(
        env, "groups", "describe", "--config", config, "--group", group, "--quiet", "-o", "json"
    )
    assert described.code == 0, described.stderr
    [answer] = json.loads(described.stdout)
    assert {
        r["partition"]: (r["committed_offset"], r["log_end_offset"], r["lag"])
        for r in answer["partitions"]
    } == {0: (4, ends, ends - 4), 1: (20, ends, ends - 20)}

    snapshot = run_secured(env, "lag-snapshot", "--config", config, "--group", group, "--quiet")
    assert snapshot.code == 0, snapshot.stderr
    rows = history.read_history(spark, str(tmp_path / f"{side}-history")).collect()
    assert {r["partition"]: (r["committed_offset"], r["lag"]) for r in rows} == {
        0: (4, ends - 4),
        1: (20, ends - 20),
    }


# Each job as a user runs it: its name and arguments before --config.
JOBS = {
    "migrate": ("migrate", "--execute"),
    "audit": ("audit",),
    "groups describe": ("groups", "describe"),
    "lag-snapshot": ("lag-snapshot",),
}
# What each refusal must say (librdkafka's words for the cause, as the one line carries them).
CAUSES = {
    "password": "Authentication failed during authentication due to invalid credentials",
    "ca": "certificate verify failed",
    "certificate": "ssl/tls alert bad certificate",  # the TLS alert the broker sent
}


@pytest.mark.parametrize("bad", list(CAUSES))
@pytest.mark.parametrize("job", list(JOBS))
def test_refused_client_fails_in_one_line_and_writes_nothing(
    secured, env, monkeypatch, tmp_path, job, bad
):
    """A wrong SASL password (the SASL_SSL cluster), an untrusted CA (the mutual-TLS cluster
    checked against a CA that signed nothing) or a client certificate the mutual-TLS cluster
    does not trust: one line naming the cluster and the cause, exit 2, nothing written, no
    secret printed. Exit 2, not 1: like a missing ${VAR}, it is the config (or the secrets it
    reads) that must change; running again unchanged cannot succeed."""
    u = f"r{int(time.time() * 1000) % 10**8}"
    src, dst = secured["sasl"], secured["mtls"]
    topic, group = f"{u}-t", f"{u}-g"
    # What the run would migrate, audit, describe or snapshot had it been let in: a stopped
    # group on the source, and one on the destination for the one-cluster jobs.
    for broker in (src, dst):
        create_topics(broker.config, {topic: 1})
        produce(broker.config, topic, 0, [Record(b"k", b"v", BASE)])
    commit_offsets(src.config, group, {(topic, 0): 1})
    commit_offsets(dst.config, f"{u}-on-destination", {(topic, 0): 1})

    name, *verb = JOBS[job]
    if name in ("migrate", "audit"):
        config = migrate_config(tmp_path, secured, u)
        named = src if bad == "password" else dst
        section_name = "source" if bad == "password" else "destination"
        written = [tmp_path / "ledger", tmp_path / "audit"]
    else:
        named = src if bad == "password" else dst
        config = one_cluster_config(
            tmp_path, named, SASL_SECTION if bad == "password" else MTLS_SECTION, "one"
        )
        section_name = "cluster"
        verb += ["--group", f"{u}-.*"]
        written = [tmp_path / "one-ledger", tmp_path / "one-history"]
    secrets = [env["FERRY_TEST_SASL_PASSWORD"]]
    if bad == "password":
        secrets.append("wrong-" + secrets[0][::-1])
        monkeypatch.setenv("FERRY_TEST_SASL_PASSWORD", secrets[-1])
    elif bad == "ca":
        monkeypatch.setenv("FERRY_TEST_MTLS_CA", str(secured["other_ca"]))
    else:
        certificate, key = secured["stranger"]
        monkeypatch.setenv("FERRY_TEST_MTLS_CERTIFICATE", str(certificate))
        monkeypatch.setenv("FERRY_TEST_MTLS_KEY", str(key))

    result = run_job(name, *verb, "--config", config, "--quiet")
    output = result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        f"error: cannot connect to {section_name} ({named.bootstrap}): "
    ), lines[0]
    assert CAUSES[bad] in lines[0], lines[0]
    assert result.code == 2, result.stderr
    assert result.stdout == ""
    for secret in secrets:
        assert secret not in output
    for path in written:
        assert not path.exists(), f"{job} wrote {path}"
    assert committed(dst, group) == {}, "a refused run committed on the destination"


@pytest.mark.cluster
def test_migrate_on_a_standalone_cluster_ships_the_certificates(
    standalone, secured, env, tmp_path  # noqa: F811 - the fixture imported from test_cluster
):
    """`./spark-submit.sh --master spark://… migrate --execute` with every read on the
    executors (`reader.driver_max_offsets: 0`): the ${VAR}-named files are shipped with
    --files and the executors' readers open their copies, in their working directories."""
    dst = secured["mtls"]
    placed = stopped_group(secured, "c")
    u, topic, group = placed["u"], placed["topic"], placed["group"]
    config = migrate_config(tmp_path, secured, u, reader={"driver_max_offsets": 0})

    plan = migrate_on_cluster(standalone, config, tmp_path)
    assert {(r["src_partition"], r["destination_offset"], r["status"]) for r in plan} == {
        (0, 25, "MATCHED"),
        (1, 7, "MATCHED"),
    }
    assert committed(dst, group) == {(topic, 0): 25, (topic, 1): 7}

    executors = completed_executors(standalone, "ferry-migrate")
    shipped = {Path(v).name for k, v in env.items() if not k.endswith(("PASSWORD", "USERNAME"))}
    for executor in executors:
        assert shipped <= {f.name for f in executor.iterdir()}, executor
    # The reads ran there: the executors ran tasks (the driver reads nothing with 0).
    logs = "".join((e / "stderr").read_text(errors="replace") for e in executors)
    assert "Finished task" in logs
