"""Config loading: every error class is one line naming the key; the examples in conf/ load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ferry.config import ALL_KEYS, ConfigError, load_config, parse_set, require, require_shared

CONF = Path(__file__).resolve().parents[2] / "conf"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ferry.yaml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str, overrides=(), env=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), overrides, env or {})
    message = str(info.value)
    assert "\n" not in message
    return message


def test_cluster_sections_pass_through_unchanged(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            """
source:
  bootstrap.servers: a:9092
  security.protocol: SASL_SSL
  sasl.mechanism: SCRAM-SHA-512
  sasl.username: ferry
  sasl.password: ${PW}
  ssl.ca.location: /etc/ca.pem
  enable.ssl.certificate.verification: false
  socket.timeout.ms: 5000
destination: {bootstrap.servers: "b:9092"}
""",
        ),
        env={"PW": "s3cret"},
    )
    assert dict(cfg.source) == {
        "bootstrap.servers": "a:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "ferry",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/etc/ca.pem",
        "enable.ssl.certificate.verification": "false",
        "socket.timeout.ms": "5000",
    }
    assert dict(cfg.destination) == {"bootstrap.servers": "b:9092"}


def test_defaults():
    cfg = load_config(None, ["cluster.bootstrap.servers=x:1"], {})
    assert cfg.matching.window_before_ms == 60000 and cfg.matching.window_after_ms == 60000
    assert cfg.matching.context == 16 and cfg.matching.hash == ("key", "value")
    assert cfg.groups.matches("anything") and cfg.source is None
    assert cfg.history.window == 10 and cfg.history.allowed_lag == 0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("matching:\n  contxt: 3\n", "unknown config key 'matching.contxt' (did you mean "
         "'matching.context'?)"),
        ("matchin:\n  context: 3\n", "unknown config key 'matchin' (did you mean 'matching'?)"),
        ("ledger:\n  pth: /x\n", "unknown config key 'ledger.pth' (did you mean 'ledger.path'?)"),
        ("zzz: 1\n", "unknown config key 'zzz'"),
    ],
)
def test_unknown_keys_name_the_path_and_the_nearest_key(tmp_path, text, expected):
    assert error_of(tmp_path, text) == expected


def test_missing_required_keys_are_named(tmp_path):
    cfg = load_config(write(tmp_path, "source: {bootstrap.servers: 'a:1'}\n"), env={})
    with pytest.raises(ConfigError, match=r"^missing required config key 'destination'$"):
        require(cfg, "source", "destination", "ledger.path")
    with pytest.raises(ConfigError, match=r"^missing required config key 'ledger.path'$"):
        require(cfg, "source", "ledger.path")
    assert (
        error_of(tmp_path, "destination: {client.id: ferry}\n")
        == "missing required config key 'destination.bootstrap.servers'"
    )


def test_environment_variables(tmp_path):
    text = "ledger:\n  path: ${ROOT}/ledger-$${NOT_EXPANDED}\n"
    cfg = load_config(write(tmp_path, text), env={"ROOT": "/data"})
    assert cfg.ledger.path == "/data/ledger-${NOT_EXPANDED}"
    assert error_of(tmp_path, "source:\n  bootstrap.servers: a\n  sasl.password: ${NOPE}\n") == (
        "environment variable NOPE is not set (used by source.sasl.password)"
    )


def test_set_overrides_the_file(tmp_path):
    text = "source: {bootstrap.servers: 'a:1'}\nmatching: {context: 4}\n"
    cfg = load_config(
        write(tmp_path, text),
        [
            "matching.context=8",
            "source.bootstrap.servers=b:2",
            "source.sasl.username=u",
            "groups.include=[a.*, b]",
        ],
        {},
    )
    assert cfg.matching.context == 8
    assert dict(cfg.source) == {"bootstrap.servers": "b:2", "sasl.username": "u"}
    assert cfg.groups.include == ("a.*", "b")
    assert parse_set("topics.rename=[]") == (["topics", "rename"], [])
    with pytest.raises(ConfigError, match="must look like key=value"):
        parse_set("matching.context")
    with pytest.raises(ConfigError, match="has an empty key"):
        parse_set("matching..context=1")
    assert error_of(tmp_path, "", ["matching.context=-1"]) == (
        "matching.context must be an integer >= 0, got -1"
    )
    assert error_of(tmp_path, "", ["matching.context=65536"]) == (
        "matching.context must be at most 65535 records, got 65536"
    )
    assert error_of(tmp_path, "ledger: /x\n", ["ledger.path.x=1"]) == (
        "--set 'ledger.path.x=1': ledger is not a section"
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("groups:\n  include: ['(']\n", r"^groups.include\[0\] is not a valid regex '\('"),
        ("matching:\n  window_after_ms: soon\n", r"^matching.window_after_ms must be an integer"),
        ("matching:\n  context: true\n", r"^matching.context must be an integer"),
        ("matching:\n  hash: [value, body]\n", r"^matching.hash must be a non-empty list"),
        ("matching:\n  hash: []\n", r"^matching.hash must be a non-empty list"),
        ("matching:\n  ignore_headers: 3\n", r"^matching.ignore_headers must be a list of strings"),
        ("reader:\n  isolation_level: dirty\n", r"^reader.isolation_level must be read_committed"),
        ("reader:\n  max_records_per_task: 0\n", r"^reader.max_records_per_task must be an int"),
        ("history:\n  window: 0\n", r"^history.window must be an integer >= 1"),
        ("ledger:\n  path: [a]\n", r"^ledger.path must be a string"),
        ("matching: 3\n", r"^matching must be a mapping"),
        ("source: [a]\n", r"^source must be a mapping of librdkafka client properties"),
        ("source:\n  bootstrap.servers: a\n  x: {y: 1}\n", r"^source.x must be a single value"),
        ("topics:\n  rename: [{match: a}]\n", r"^topics.rename\[0\] must have exactly the keys"),
        ("topics:\n  rename: [{match: '(', replace: x}]\n", r"^topics.rename\[0\].match is not a"),
        (
            "topics:\n  rename: [{match: '^(a)$', replace: 'x.\\2'}]\n",
            r"^topics.rename\[0\].replace is not a valid template",
        ),
        ("- a\n- b\n", r"the top level must be a mapping of sections$"),
        ("a: [1\n", r"ferry.yaml line 2: "),
    ],
)
def test_invalid_values_are_named(tmp_path, text, expected):
    assert re.search(expected, error_of(tmp_path, text))


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match=r"^cannot read config file .*missing.yaml"):
        load_config(tmp_path / "missing.yaml")


def test_topic_rename_first_match_wins(tmp_path):
    text = """
topics:
  rename:
    - {match: '^orders\\.(?P<region>eu|us)$', replace: 'orders-\\g<region>'}
    - {match: '^(.*)$', replace: 'src.\\1'}
"""
    topics = load_config(write(tmp_path, text), env={}).topics
    assert topics.destination_topic("orders.eu") == "orders-eu"
    assert topics.destination_topic("payments") == "src.payments"
    assert load_config(None, env={}).topics.destination_topic("payments") == "payments"


def test_selection_is_a_full_match_minus_excludes(tmp_path):
    text = "groups:\n  include: ['app-.*', billing]\n  exclude: ['.*-test']\n"
    groups = load_config(write(tmp_path, text), env={}).groups
    assert [g for g in ["app-1", "app-1-test", "billing", "billing2", "x-app-1"] if
            groups.matches(g)] == ["app-1", "billing"]


@pytest.mark.parametrize("name", ["migrate.yaml", "groups.yaml", "lag.yaml", "decode-offsets.yaml"])
def test_example_configs_load(name):
    env = {
        "SOURCE_KAFKA_PASSWORD": "x",
        "KAFKA_USER": "u",
        "KAFKA_PASSWORD": "p",
        "FERRY_SOURCE_BOOTSTRAP": "old:9092",
        "FERRY_DESTINATION_BOOTSTRAP": "new:9092",
    }
    assert load_config(CONF / name, env=env) is not None


def test_every_key_is_documented_in_an_example():
    documented = "\n".join(p.read_text() for p in CONF.glob("*.yaml"))
    for key in ALL_KEYS:
        leaf = key.split(".")[-1]
        assert re.search(rf"^\s*{re.escape(leaf)}:", documented, re.M), key


def test_cluster_deploy_mode_refuses_the_jobs_tables_on_the_containers_disk():
    """spark-submit.sh sets FERRY_DEPLOY_MODE=cluster for a driver in YARN's or Kubernetes'
    container: a table there would be gone with the container. Only the tables the job opens
    are looked at (`require`, `require_shared`): the shipped migrate.yaml's audit.path, on local
    disk, does not stop `migrate`, which never writes it."""
    cluster = {"FERRY_DEPLOY_MODE": "cluster"}
    for setting in ("ledger.path=/var/ferry/ledger", "history.path=file:///h", "audit.path=rel",
                    "offsets.commits_path=/c", "history.status_path=/s"):  # fmt: skip
        key = setting.split("=")[0]
        cfg = load_config(None, [setting], env=cluster)  # loading alone refuses nothing
        with pytest.raises(ConfigError, match=f"^{key} .* local disk"):
            require(cfg, key, env=cluster)
        with pytest.raises(ConfigError, match=f"^{key} .* local disk"):
            require_shared(cfg, key, env=cluster)
        require(cfg, key, env={})  # client mode: the driver's disk is this machine's
    for shared in ("hdfs:///user/ferry/ledger", "s3a://bucket/ledger", "abfss://c@a/ledger"):
        cfg = load_config(None, [f"ledger.path={shared}"], env=cluster)
        require(cfg, "ledger.path", env=cluster)
    shipped = load_config(
        CONF / "migrate.yaml",
        ["ledger.path=hdfs:///user/ferry/ledger"],
        env={"FERRY_SOURCE_BOOTSTRAP": "a:9092", "FERRY_DESTINATION_BOOTSTRAP": "b:9092",
             **cluster},
    )  # fmt: skip
    assert shipped.audit.path == "/data/ferry/audit"
    require(shipped, "source", "destination", "ledger.path", env=cluster)  # migrate's
    with pytest.raises(ConfigError, match="^audit.path /data/ferry/audit is on"):
        require_shared(shipped, "audit.path", env=cluster)  # audit's
    require_shared(load_config(None, [], env=cluster), "audit.path", env=cluster)  # unset
