"""Groups of both protocols an Apache Kafka 4 cluster holds side by side — classic and the
consumer protocol (KIP-848, `group.protocol=consumer`) — on two real local clusters.

For each protocol: a live consumer's group is reported with its member (member id, client id,
host) and refused by `migrate --execute`, `groups reset --execute` and `groups copy --execute`
with a line naming the group and its state; `lag-snapshot` records it Stable and consuming;
once the consumer has closed it is Empty, snapshotted so, and migrated exactly. A group in the
middle of a rebalance is refused too: classic groups report PreparingRebalance; a KIP-848
group reconciling its assignment is reported by confluent-kafka (librdkafka 2.16, whose group
states are the classic ones) as Unknown, which the inactive rule refuses as well.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml
from deltalake import DeltaTable

from ferry import kafka
from ferry.testing.produce import commit_offsets, create_topics, produce

from .jobrunner import group_statuses, run_job
from .test_migrate import committed, replicate, unique_records, write_config

pytestmark = pytest.mark.integration

PROTOCOLS = ("classic", "consumer")
SHIFT = 4  # the destination holds records[SHIFT:]: destination offset = source offset - SHIFT
HOST = "/127.0.0.1"  # how the broker names a consumer on this machine


def live_consumer(config: dict, group: str, topic: str, protocol: str, client_id: str):  # noqa: ANN201
    """A consumer of `group` speaking `protocol`, subscribed to `topic`, once it has its
    assignment (a live member: the group has members and is Stable)."""
    from confluent_kafka import Consumer

    settings = {
        **config,
        "group.id": group,
        "group.protocol": protocol,
        "client.id": client_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "log_level": "3",
    }
    if protocol == "classic":  # the consumer protocol leaves these to the broker
        settings |= {"session.timeout.ms": 30000, "partition.assignment.strategy": "range"}
    consumer = Consumer(settings)
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        if time.monotonic() > deadline:
            consumer.close()
            raise AssertionError(f"{protocol} consumer of {group} got no assignment in 30 s")
        consumer.poll(0.2)
    return consumer


def wait_for_state(cluster, group: str, states: set[str], poll=None) -> str:  # noqa: ANN001
    """The group's state once it is one of `states` (15 s at most); `poll` is called between
    looks (a consumer that must keep talking to the group)."""
    check = kafka.Cluster("check", cluster.config)
    deadline = time.monotonic() + 15
    while True:
        state = kafka.describe_groups(check, [group])[group].state.value
        if state in states or time.monotonic() > deadline:
            return state
        if poll is not None:
            poll()
        else:
            time.sleep(0.1)


def one_cluster_config(tmp_path, cluster, unique: str) -> str:
    """A config for the one-cluster jobs (groups, lag-snapshot) on `cluster`."""
    config = {
        "cluster": {"bootstrap.servers": cluster.bootstrap},
        "groups": {"include": [f"{unique}-.*"]},
        "reader": {"timeout_ms": 10000},
        "ledger": {"path": str(tmp_path / "groups-ledger")},
        "history": {"path": str(tmp_path / "history")},
    }
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def job(name: str, config: str, *argv: str):  # noqa: ANN201
    if name == "groups":
        return run_job("groups", argv[0], "--config", config, "--quiet", *argv[1:])
    return run_job(name, "--config", config, "--quiet", *argv)


def listed(config: str, group: str) -> dict:
    result = job("groups", config, "list", "--group", group, "-o", "json")
    assert result.code == 0, result.stderr
    [row] = json.loads(result.stdout)
    return row


def snapshot_rows(tmp_path, group: str, snapshot: int) -> list[dict]:
    """The history rows of `group` in the `snapshot`-th lag-snapshot run (0-based)."""
    rows = DeltaTable(str(tmp_path / "history")).to_pyarrow_table().to_pylist()
    times = sorted({r["snapshot_time"] for r in rows})
    return sorted(
        (r for r in rows if r["group"] == group and r["snapshot_time"] == times[snapshot]),
        key=lambda r: r["partition"],
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_live_group_is_refused_by_its_members_and_migrated_once_empty(
    clusters, tmp_path, unique, protocol
):
    src, dst = clusters
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 2})
    for p in range(2):
        records = unique_records(f"{protocol}{p}", 20)
        produce(src.config, topic, p, records)
        produce(dst.config, topic, p, replicate(records, SHIFT))
    live_src, live_dst = f"{unique}-src", f"{unique}-dst"  # live on the source, destination
    seed = f"seed-{unique}"  # a stopped group outside the selection, for `groups copy`
    src_offsets = {(topic, 0): 12, (topic, 1): 9}
    dst_group_offsets = {(topic, 0): 15, (topic, 1): 6}
    commit_offsets(src.config, live_dst, dst_group_offsets)
    commit_offsets(src.config, seed, {(topic, 0): 3})
    migrate = write_config(tmp_path, src, dst, unique)
    one = one_cluster_config(tmp_path, src, unique)
    client_id = f"{unique}-client"

    from confluent_kafka import TopicPartition

    on_src = live_consumer(src.config, live_src, topic, protocol, client_id)
    on_dst = live_consumer(dst.config, live_dst, topic, protocol, f"{client_id}-dst")
    try:
        # The live consumer commits its own position, as consumers do.
        on_src.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(src_offsets.items())],
            asynchronous=False,
        )
        member_id = on_src.memberid()
        assert member_id

        # Described with its member, Stable.
        row = listed(one, live_src)
        assert (row["state"], row["members"], row["protocol_type"]) == ("STABLE", 1, "consumer")
        described = job("groups", one, "describe", "--group", live_src, "-o", "json")
        assert described.code == 0, described.stderr
        [group] = json.loads(described.stdout)
        assert group["group_state"] == "STABLE"
        assert [
            (r["partition"], r["committed_offset"], r["member_id"], r["client_id"], r["host"])
            for r in group["partitions"]
        ] == [(p, src_offsets[(topic, p)], member_id, client_id, HOST) for p in (0, 1)]

        # Refused: by migrate on either side, by reset and by copy; nothing written.
        refused = job("migrate", migrate, "--execute", "-o", "json")
        assert refused.code == 1, refused.stderr
        assert group_statuses(refused) == {live_src: "REFUSED", live_dst: "REFUSED"}
        assert (
            f"not migrated: {live_src}: source group is STABLE, not Empty; stop its consumers"
            in refused.stderr
        )
        assert (
            f"not migrated: {live_dst}: destination group is STABLE, not Empty; never moved"
            in refused.stderr
        )
        reset = job("groups", one, "reset", "--group", live_src, "--all-topics",
                    "--to-earliest", "--execute")  # fmt: skip
        assert reset.code == 1
        assert (
            f"Assignments can only be reset if the group '{live_src}' is inactive, "
            "but the current state is Stable." in reset.stderr
        )
        copy = job("groups", one, "copy", "--from", seed, "--to", live_src, "--execute")
        assert copy.code == 1
        assert f"not done: {live_src}: group {live_src} is STABLE, not Empty; refused" in (
            copy.stderr
        )
        assert committed(src, live_src) == src_offsets
        assert committed(dst, live_src) == {} and committed(dst, live_dst) == {}

        # Snapshotted as a consuming group, each partition with its member.
        assert job("lag-snapshot", one).code == 0
        assert [
            (r["group_state"], r["is_consuming"], r["member_id"], r["client_id"], r["host"])
            for r in snapshot_rows(tmp_path, live_src, 0)
        ] == [("STABLE", True, member_id, client_id, HOST)] * 2
    finally:
        on_src.close()
        on_dst.close()

    assert wait_for_state(src, live_src, {"EMPTY"}) == "EMPTY"
    assert wait_for_state(dst, live_dst, {"EMPTY", "DEAD"}) in ("EMPTY", "DEAD")
    row = listed(one, live_src)
    assert (row["state"], row["members"]) == ("EMPTY", 0)

    assert job("lag-snapshot", one).code == 0
    assert [
        (r["group_state"], r["is_consuming"], r["member_id"], r["committed_offset"])
        for r in snapshot_rows(tmp_path, live_src, 1)
    ] == [("EMPTY", False, None, src_offsets[(topic, p)]) for p in (0, 1)]

    done = job("migrate", migrate, "--execute", "-o", "json")
    assert done.code == 0, done.stderr
    assert group_statuses(done) == {live_src: "COMMITTED", live_dst: "COMMITTED"}
    assert committed(dst, live_src) == {tp: o - SHIFT for tp, o in src_offsets.items()}
    assert committed(dst, live_dst) == {tp: o - SHIFT for tp, o in dst_group_offsets.items()}


# What confluent-kafka reports for a group whose new member waits on an old one: the classic
# protocol's PreparingRebalance, and for KIP-848's Reconciling (the old member has not yet
# given up the partitions the new one is to get) a state its enum cannot name.
REBALANCING = {"classic": ("PREPARING_REBALANCE", "PreparingRebalance"),
               "consumer": ("UNKNOWN", "Unknown")}  # fmt: skip


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_rebalancing_group_is_refused(cluster, tmp_path, unique, protocol):
    topic, group = f"{unique}-t", f"{unique}-g"
    create_topics(cluster.config, {topic: 2})
    commit_offsets(cluster.config, group, {(topic, 0): 0, (topic, 1): 0})
    one = one_cluster_config(tmp_path, cluster, unique)
    first = live_consumer(cluster.config, group, topic, protocol, f"{unique}-first")
    # `first` stops polling: it holds both partitions and does not answer the rebalance.
    from confluent_kafka import Consumer

    second = Consumer(
        {
            **cluster.config,
            "group.id": group,
            "group.protocol": protocol,
            "client.id": f"{unique}-second",
            "enable.auto.commit": False,
            "log_level": "3",
        }
        | ({"session.timeout.ms": 30000} if protocol == "classic" else {})
    )
    second.subscribe([topic])
    try:
        state, title = REBALANCING[protocol]
        assert wait_for_state(cluster, group, {state}, poll=lambda: second.poll(0.2)) == state
        row = listed(one, group)
        assert (row["state"], row["members"]) == (state, 2)
        reset = job("groups", one, "reset", "--group", group, "--all-topics", "--to-latest",
                    "--execute")  # fmt: skip
        assert reset.code == 1
        assert (
            f"Assignments can only be reset if the group '{group}' is inactive, "
            f"but the current state is {title}." in reset.stderr
        )
        assert committed(cluster, group) == {(topic, 0): 0, (topic, 1): 0}
    finally:
        second.close()
        first.close()
