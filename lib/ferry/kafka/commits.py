"""Committing group offsets with confirmation: many groups at once, each in one request.

Every executing write of offsets goes through here (`ferry.write.commit` for migrate and the groups
verbs, `ferry.write.rollback`). Each group's offsets go in one OffsetCommit request, so a group is
never half written; the requests of many groups are in flight together and awaited together,
then every group is read back in one round of OffsetFetch requests.

A commit is never re-sent blindly: when a request gets no answer (a transient error), the
group's offsets are read first — a commit that landed is not repeated — and its state is
checked again (a consumer may have joined meanwhile); only then is it sent again, within
`admin.retry_ms`. When the budget runs out with the outcome unknown, CommitUnknownError says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from ferry.kafka.cluster import Cluster, ClusterError, CommitUnknownError
from ferry.kafka.failures import raise_transient_partitions
from ferry.kafka.groups import (
    GroupActiveError,
    active_error,
    committed_offsets,
    group_infos,
    list_group_infos,
    settle_coordinators,
)
from ferry.kafka.retry import checked_future, failed_future, retry_each
from ferry.keys import TopicPartitionKey


def alter_offsets_each(
    cluster: Cluster, offsets: Mapping[str, Mapping[TopicPartitionKey, int]]
) -> dict[str, ClusterError | None]:
    """Commit each group's offsets in one request per group (a group is never half written),
    every request in flight at once, then read every group back and compare.

    Retried by `ferry.kafka.retry.retry_each`, but a request that failed on a transient error
    is not simply sent again: the group's offsets are read first (a commit that landed is not
    repeated) and its state is checked again (a consumer may have joined meanwhile). Returns
    group → None (committed and read back) or its error: CommitUnknownError (sent, outcome
    unknown when the budget ran out or the confirming read failed), GroupActiveError (a
    consumer joined before a resend, or before the write and the broker refused it), or
    ClusterError (refused by the broker otherwise, or read back different)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, TopicPartition

    requests = {
        g: ConsumerGroupTopicPartitions(
            g, [TopicPartition(t, p, o) for (t, p), o in sorted(targets.items())]
        )
        for g, targets in offsets.items()
    }

    def submit(admin, groups: list[str]) -> dict:  # noqa: ANN001 - an AdminClient
        futures = {}
        for g in groups:  # the client takes one group per OffsetCommit
            try:
                futures[g] = checked_future(
                    admin.alter_consumer_group_offsets(
                        [requests[g]], request_timeout=cluster.attempt_s
                    )[g],
                    raise_transient_partitions,
                )
            except Exception as exc:  # noqa: BLE001 - classified by retry_each
                futures[g] = failed_future(exc)
        return futures

    def unconfirmed(g: str, reason: str) -> ClusterError:
        return CommitUnknownError(
            f"{cluster.name}: commit of group {g} unconfirmed after {cluster.retry_s:g}s: {reason}"
        )

    answers, errors = retry_each(
        cluster,
        lambda g: f"commit offsets of group {g}",
        list(requests),
        submit,
        recheck=lambda failures: _unsent(cluster, offsets, list(failures)),
        gave_up=unconfirmed,
    )
    out: dict[str, ClusterError | None] = dict(errors)
    answered: list[str] = []
    for g, answer in answers.items():
        if answer is None:
            out[g] = None  # found landed while confirming a lost answer: already read back
            continue
        bad = [tp for tp in answer.topic_partitions if tp.error is not None]  # type: ignore[attr-defined]
        if bad and bad[0].error.code() == KafkaError.UNKNOWN_MEMBER_ID:
            # The broker takes a commit without a member id only while the group is Empty: a
            # consumer joined after the state check, and the broker refused the write.
            out[g] = GroupActiveError(
                f"{cluster.name}: group {g} gained members before its write (the broker "
                "refused it); refused"
            )
        elif bad:
            where = f"{bad[0].topic}[{bad[0].partition}]"
            out[g] = ClusterError(f"{cluster.name}: commit of group {g} {where}: {bad[0].error}")
        else:
            answered.append(g)
    if answered:
        read: dict[str, ClusterError] = {}
        actual = committed_offsets(cluster, answered, read)
        for g in answered:
            if g in read:
                out[g] = CommitUnknownError(f"{read[g]} (reading back a commit of group {g})")
            else:
                out[g] = _differs(cluster, g, offsets[g], actual[g])
    return out


def by_state(
    cluster: Cluster, groups: list[str]
) -> tuple[list[str], dict[str, ClusterError], dict[str, ClusterError], set[str]]:
    """The groups' states now, in the order given: (those Empty or Dead, which may be written;
    group → why its state could not be read; group → the error naming it active; those of them
    the listing shows, the only ones with offsets). One ListGroups for all of them
    (`ferry.kafka.groups.group_infos`: only groups it does not show inactive are described),
    after `settle_coordinators`, so the listing shows every group committed before; when the
    listing fails, every group gets its error."""
    errors: dict[str, ClusterError] = {}
    settle_coordinators(cluster, groups, errors)
    try:
        listed = list_group_infos(cluster)
    except ClusterError as exc:
        return [], dict.fromkeys(groups, exc), {}, set()
    infos = group_infos(cluster, [g for g in groups if g not in errors], listed, errors)
    active = {
        g: active_error(cluster, infos[g])
        for g in groups
        if g not in errors and not infos[g].state.is_inactive
    }
    inactive = [g for g in groups if g not in errors and g not in active]
    return inactive, errors, active, {g for g in groups if g in listed}


def _unsent(
    cluster: Cluster,
    offsets: Mapping[str, Mapping[TopicPartitionKey, int]],
    groups: list[str],
) -> tuple[dict[str, None], dict[str, ClusterError]]:
    """Of groups whose commit got no answer, settle those that must not be sent again:
    (landed: their offsets read back as committed; errors: unknown, their offsets could not be
    read, or refused, a consumer joined meanwhile). The others are sent again."""
    errors: dict[str, ClusterError] = {}
    current = committed_offsets(cluster, groups, errors)
    unknown: dict[str, ClusterError] = {
        g: CommitUnknownError(f"{e} (while confirming a commit of group {g})")
        for g, e in errors.items()
    }
    landed = {
        g: None
        for g in groups
        if g not in errors and all(current[g].get(k) == v for k, v in offsets[g].items())
    }
    left = [g for g in groups if g not in errors and g not in landed]
    _inactive, failed, active, _listed = by_state(cluster, left)
    for g, error in failed.items():
        unknown[g] = CommitUnknownError(f"{error} (while confirming a commit of group {g})")
    return landed, {**unknown, **active}


def _differs(
    cluster: Cluster,
    group: str,
    expected: Mapping[TopicPartitionKey, int],
    actual: Mapping[TopicPartitionKey, int],
) -> ClusterError | None:
    """A read-back that differs from what was committed, as an error (None: identical)."""
    wrong = [(k, v, actual.get(k)) for k, v in sorted(expected.items()) if actual.get(k) != v]
    if not wrong:
        return None
    (t, p), want, got = wrong[0]
    return ClusterError(
        f"{cluster.name}: read-back of group {group} differs at {t}[{p}]: "
        f"expected {want}, found {got} ({len(wrong)} partitions differ)"
    )
