"""Consumer groups in bulk: list, describe (state, protocol, members), committed offsets,
delete; and the refusal to move an active group. Every call is retried as every admin call
(`ferry.kafka.retry`); with `errors=`, one group that cannot be described or read does not
fail the others."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from ferry.kafka import isolated
from ferry.kafka.cluster import Cluster, ClusterError
from ferry.kafka.coordinators import (
    await_coordinators,
    offsets_partitions_known,
    partition_for,
    probe_groups,
)
from ferry.kafka.failures import is_transient, raise_transient_partitions, short_reason
from ferry.kafka.retry import checked_future, gather_into, gather_one
from ferry.keys import TopicPartitionKey
from ferry.status import GroupState

# Groups per DescribeGroups call, all calls in flight at once: the broker answers 10,000
# groups in one request only after seconds, long enough under load to run into the request
# timeout (and a retry then asks all of them again); 1,000 per call were answered 25% sooner.
DESCRIBE_CHUNK = 1000


@dataclass(frozen=True)
class GroupInfo:
    group: str
    state: GroupState
    protocol_type: str | None = None
    members: tuple[dict, ...] = field(default_factory=tuple)


def list_group_infos(cluster: Cluster) -> dict[str, GroupInfo]:
    """Every consumer group the cluster knows, with the state and protocol type its listing
    gives (no members: `group_infos` describes the groups that can have some). One ListGroups
    per broker, however many groups (describing 10,000 groups is 10,000 requests)."""

    def complete(result):  # noqa: ANN001, ANN202 - a ListConsumerGroupsResult
        # A broker that could not be asked is in `errors`, not raised: after a dropped
        # connection the answer would be an empty (or partial) list of groups.
        if result.errors:
            from confluent_kafka import KafkaException

            raise KafkaException(result.errors[0])
        return result

    result = gather_one(
        cluster,
        "list consumer groups",
        lambda admin: checked_future(
            admin.list_consumer_groups(request_timeout=cluster.attempt_s), complete
        ),
    )
    return {
        g.group_id: GroupInfo(
            g.group_id,
            GroupState.parse(getattr(g.state, "name", str(g.state))),
            "" if g.is_simple_consumer_group else "consumer",  # as `describe_groups` says it
        )
        for g in result.valid  # type: ignore[attr-defined]
    }


def list_groups(cluster: Cluster) -> list[str]:
    """All consumer group ids the cluster knows."""
    return sorted(list_group_infos(cluster))


def group_infos(
    cluster: Cluster,
    groups: Sequence[str],
    listed: dict[str, GroupInfo],
    errors: dict[str, ClusterError] | None = None,
) -> dict[str, GroupInfo]:
    """State, protocol type and members of each group, from the cluster's listing
    (`list_group_infos`) where it shows the group Empty or absent (Dead): such a group has no
    members, so there is nothing to ask. The others (members, a rebalance, a state the listing
    cannot name) are described, for their members and their state now. Describing every group
    instead cost 10,000 requests for 10,000 groups, and a broker sometimes sat on such a burst
    past the request timeout (a 10 s retry; once librdkafka then aborted the process when the
    requests hit the socket timeout, librdkafka issue 4605). `errors`: as `describe_groups`."""
    absent = GroupState.unlisted()
    infos = {
        g: listed.get(g) or GroupInfo(g, absent)
        for g in groups
        if g not in listed or listed[g].state.is_inactive
    }
    infos.update(describe_groups(cluster, [g for g in groups if g not in infos], errors))
    return infos


def describe_groups(
    cluster: Cluster, groups: Sequence[str], errors: dict[str, ClusterError] | None = None
) -> dict[str, GroupInfo]:
    """State, protocol type and members of each group, all groups in one request (librdkafka
    asks ConsumerGroupDescribe, falling back to DescribeGroups, so groups of both protocols are
    described with their members). With `errors`, a group that cannot be described goes there
    (and not into the answer) instead of failing the call."""
    if not groups:
        return {}

    def submit(admin, keys):  # noqa: ANN001, ANN202
        futures = {}
        for i in range(0, len(keys), DESCRIBE_CHUNK):
            futures.update(
                admin.describe_consumer_groups(
                    keys[i : i + DESCRIBE_CHUNK], request_timeout=cluster.attempt_s
                )
            )
        return futures

    answers = gather_into(cluster, lambda g: f"describe group {g}", list(groups), submit, errors)
    out: dict[str, GroupInfo] = {}
    for group, desc in answers.items():
        state = GroupState.parse(getattr(desc.state, "name", str(desc.state)))
        members = tuple(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "group_instance_id": getattr(m, "group_instance_id", None),
                "assignment": sorted(
                    (tp.topic, tp.partition)
                    for tp in (m.assignment.topic_partitions if m.assignment else [])
                ),
            }
            for m in desc.members or []
        )
        ptype = getattr(desc, "protocol_type", None)
        if ptype is None:
            ptype = "consumer" if getattr(desc, "is_simple_consumer_group", False) is False else ""
        out[group] = GroupInfo(group, state, ptype, members)
    return out


def committed_offsets(
    cluster: Cluster,
    groups: Sequence[str],
    errors: dict[str, ClusterError] | None = None,
    listed: Collection[str] | None = None,
    probe: bool = False,
) -> dict[str, dict[TopicPartitionKey, int]]:
    """Each group's committed offsets (partitions without a commit are left out). The client
    takes one group per OffsetFetch: the requests go in waves of `FETCH_WAVE` groups, each
    wave sent whole before any of its answers is awaited. With `errors`, as
    `describe_groups`; a group one of whose partitions was answered with an error is not
    answered (never half a group's offsets).

    Asked from a worker process (`ferry.kafka.isolated`): an AdminClient whose offset fetch
    is answered NOT_COORDINATOR crashes the process it runs in. The worker first waits for
    the coordinators the fetch will reach (`await_coordinators`), so the crash is left to a
    coordinator that moves in between; the whole call, crashes included, spends one budget
    (`admin.retry_ms`).

    Reads are stable (OffsetFetch's requireStable): answered from every commit the
    coordinator acknowledged, once it has caught up with them (`settle_coordinators`).

    `listed`: the groups the cluster's listing shows (`list_group_infos`). The others have no
    offsets there (a group's offsets are its coordinator's, and so is the listing), so they
    are left out of the answer unasked; their coordinators are still awaited, so a
    coordinator that does not answer fails the call as a fetch would (a fresh destination
    lists none of 10,000 groups: 10,000 fetches saved, its coordinators waited for as ever).
    With `probe`, one of them per `__consumer_offsets` partition is fetched all the same
    (`probe_groups`), and with `errors` a probe whose coordinator does not answer fails the
    groups it stands for (`settle_coordinators`)."""
    if not groups:
        return {}
    fetched = None if listed is None else [g for g in groups if g in listed]
    deadline = time.monotonic() + cluster.retry_s
    answers, failed = isolated.run(
        f"{cluster.name}: fetch committed offsets",
        _committed_offsets_here,
        cluster.detached(),
        list(groups),
        errors is not None,
        deadline,
        FETCH_WAVE,
        fetched,
        probe,
        retry_s=cluster.retry_s,
        deadline=deadline,
    )
    if errors is not None:
        errors.update(failed)
    return answers


# At most this many groups' offset fetches in flight at once. With all 10,000 of a run (and
# their 10,000 FindCoordinator requests) in flight, thousands were sometimes left unanswered
# until the attempt timeout, then answered at once when sent again: discovery took 13-25 s
# instead of 6 in 5 of 13 first runs measured; in waves of 1,000, 0 of 12 (docs/kafka.md).
FETCH_WAVE = 1000


def _committed_offsets_here(
    detached: Cluster,
    groups: list[str],
    with_errors: bool,
    deadline: float,
    wave: int,
    fetched: list[str] | None,
    probe: bool,
) -> tuple[dict[str, dict[TopicPartitionKey, int]], dict[str, ClusterError]]:
    """`committed_offsets`, run in the worker on the worker's own copy of the cluster (its
    AdminClient kept between calls); `fetched`: the groups to fetch (None: all), and with
    `probe` one more per coordinator they do not reach."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    cluster = isolated.resident(detached)
    errors: dict[str, ClusterError] = {}
    await_coordinators(cluster, groups, deadline, errors if with_errors else None)

    # Stable reads: a coordinator that took over moments ago answers a plain fetch as if the
    # last commits it has not seen confirmed were never made (docs/kafka.md). Offsets an open
    # transaction holds are answered UNSTABLE_OFFSET_COMMIT, retried until it ends.
    def submit(admin, keys):  # noqa: ANN001, ANN202
        return {
            g: checked_future(
                admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(g)],
                    require_stable=True,
                    request_timeout=cluster.attempt_s,
                )[g],
                raise_transient_partitions,
            )
            for g in keys
        }

    count = offsets_partitions_known(cluster)
    probes = probe_groups(groups, fetched, count) if fetched is not None and probe else []
    wanted = groups if fetched is None else [*fetched, *probes]
    todo = [g for g in wanted if g not in errors]
    answers: dict[str, object] = {}
    for start in range(0, len(todo), wave):  # each wave retried as one; one budget for all
        answers |= gather_into(
            cluster,
            lambda g: f"fetch committed offsets of group {g}",
            todo[start : start + wave],
            submit,
            errors if with_errors else None,
            deadline,
        )
    out: dict[str, dict[TopicPartitionKey, int]] = {}
    for group, answer in answers.items():
        offsets: dict[TopicPartitionKey, int] = {}
        for tp in answer.topic_partitions:  # type: ignore[attr-defined]
            if tp.error is not None:
                error = ClusterError(
                    f"{cluster.name}: committed offset of group {group} on "
                    f"{tp.topic}[{tp.partition}]: {tp.error.str()}"
                )
                if not with_errors:
                    raise error
                errors[group] = error
                break
            if tp.offset is not None and tp.offset >= 0:
                offsets[(tp.topic, tp.partition)] = tp.offset
        else:
            out[group] = offsets
    # A probe whose coordinator did not answer fails the groups it stood for: those of its
    # partition, or all of them when the partitions were not known (it was the only probe).
    # Any other failure (not authorized for that group, say) is the probe group's own.
    stands_for = (lambda g: partition_for(g, count)) if count else (lambda _g: None)
    failed = {
        stands_for(p): errors[p]
        for p in probes
        if p in errors and is_transient(errors[p].__cause__)
    }
    if failed:
        for group in set(groups) - set(fetched or ()) - set(errors):
            if stands_for(group) in failed:
                errors[group] = failed[stands_for(group)]
    return out, errors


def settle_coordinators(
    cluster: Cluster, groups: Sequence[str], errors: dict[str, ClusterError]
) -> None:
    """Bring the coordinators of `groups` up to date before their states are read: one
    stable offset fetch per `__consumer_offsets` partition the groups fall in
    (`probe_groups`), answered once the coordinator has caught up with every commit it
    acknowledged, so a listing after it shows every group committed before (a coordinator
    that took over moments ago would list one committed just before as absent). It also
    proves each coordinator answers OffsetFetch before anything is written. A coordinator
    that does not answer fails its groups, in `errors`."""
    committed_offsets(cluster, groups, errors, listed=(), probe=True)


class GroupActiveError(ClusterError):
    """A group has members (or is rebalancing); Ferry never moves an active group."""


def active_error(cluster: Cluster, info: GroupInfo) -> GroupActiveError:
    return GroupActiveError(
        f"{cluster.name}: group {info.group} is {info.state.title}, not Empty or Dead; refused"
    )


def delete_groups(cluster: Cluster, groups: Sequence[str]) -> dict[str, str | None]:
    """Delete groups in one request; returns group → error text (None when deleted)."""
    if not groups:
        return {}
    errors: dict[str, ClusterError] = {}
    gather_into(
        cluster,
        lambda g: f"delete group {g}",
        list(groups),
        lambda admin, keys: admin.delete_consumer_groups(keys, request_timeout=cluster.attempt_s),
        errors,
    )
    return {
        g: None
        if g not in errors
        else (short_reason(errors[g].__cause__) if errors[g].__cause__ else str(errors[g]))
        for g in groups
    }
