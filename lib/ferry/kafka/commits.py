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

import concurrent.futures
import time
from collections.abc import Mapping

from ferry.kafka.admin import (
    TopicPartitionKey,
    _needs_fresh_client,
    _short,
    active_error,
    committed_offsets,
    describe_groups,
    is_transient,
)
from ferry.kafka.cluster import Cluster, ClusterError, CommitUnknownError


def alter_offsets_each(
    cluster: Cluster, offsets: Mapping[str, Mapping[TopicPartitionKey, int]]
) -> dict[str, ClusterError | None]:
    """Commit each group's offsets in one request per group (a group is never half written),
    every request in flight at once, then read every group back and compare.

    A request that fails on a transient error is not simply sent again: the group's offsets
    are read first (a commit that landed is not repeated) and its state is checked again (a
    consumer may have joined meanwhile). Returns group → None (committed and read back) or
    its error: CommitUnknownError (sent, outcome unknown when the budget ran out or the
    confirming read failed), GroupActiveError (a consumer joined before a resend), or
    ClusterError (refused by the broker, or read back different)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    requests = {
        g: ConsumerGroupTopicPartitions(
            g, [TopicPartition(t, p, o) for (t, p), o in sorted(targets.items())]
        )
        for g, targets in offsets.items()
    }
    out: dict[str, ClusterError | None] = {}
    answered: list[str] = []
    pending = list(requests)
    deadline = time.monotonic() + cluster.retry_s
    delay = 0.2
    while pending:
        failures: dict[str, BaseException] = {}
        futures: dict[str, concurrent.futures.Future] = {}
        for g in pending:
            try:
                futures[g] = cluster.admin().alter_consumer_group_offsets(
                    [requests[g]], request_timeout=cluster.attempt_s
                )[g]
            except Exception as exc:  # noqa: BLE001 - classified below
                failures[g] = exc
        for g, future in futures.items():
            try:
                answer = future.result(timeout=cluster.attempt_s + 1)
            except Exception as exc:  # noqa: BLE001 - classified below
                failures[g] = exc
                continue
            bad = [tp for tp in answer.topic_partitions if tp.error is not None]
            if bad:
                where = f"{bad[0].topic}[{bad[0].partition}]"
                out[g] = ClusterError(
                    f"{cluster.name}: commit of group {g} {where}: {bad[0].error}"
                )
            else:
                answered.append(g)
        for g in [g for g, e in failures.items() if not is_transient(e)]:
            exc = failures.pop(g)
            out[g] = ClusterError(
                f"{cluster.name}: commit offsets of group {g} failed: {_short(exc)}"
            )
            out[g].__cause__ = exc
        if not failures:
            break
        fresh = any(_needs_fresh_client(e) for e in failures.values())
        if fresh:
            cluster.renew_admin()
        if time.monotonic() + delay > deadline:
            for g, exc in failures.items():
                out[g] = CommitUnknownError(
                    f"{cluster.name}: commit of group {g} unconfirmed after "
                    f"{cluster.retry_s:g}s: {_short(exc)}"
                )
            break
        time.sleep(delay)
        delay = min(delay * 2, 5.0)
        pending = _unsent(cluster, offsets, list(failures), out)
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
) -> tuple[list[str], dict[str, ClusterError], dict[str, ClusterError]]:
    """The groups described in one round, in the order given: (those Empty or Dead, which may
    be written; group → why it could not be described; group → the error naming it active)."""
    errors: dict[str, ClusterError] = {}
    infos = describe_groups(cluster, groups, errors)
    active = {
        g: active_error(cluster, infos[g])
        for g in groups
        if g not in errors and not infos[g].is_inactive
    }
    inactive = [g for g in groups if g not in errors and g not in active]
    return inactive, errors, active


def _unsent(
    cluster: Cluster,
    offsets: Mapping[str, Mapping[TopicPartitionKey, int]],
    groups: list[str],
    out: dict[str, ClusterError | None],
) -> list[str]:
    """Of groups whose commit got no answer: those to send again. The others get their
    outcome in `out`: landed (None), unknown (their offsets could not be read), or refused (a
    consumer joined meanwhile)."""
    errors: dict[str, ClusterError] = {}
    current = committed_offsets(cluster, groups, errors)
    left = []
    for g in groups:
        if g in errors:
            out[g] = CommitUnknownError(f"{errors[g]} (while confirming a commit of group {g})")
        elif all(current[g].get(k) == v for k, v in offsets[g].items()):
            out[g] = None  # the lost answer's request had landed: nothing to send again
        else:
            left.append(g)
    inactive, failed, active = by_state(cluster, left)
    for g, error in failed.items():
        out[g] = CommitUnknownError(f"{error} (while confirming a commit of group {g})")
    out.update(active)
    return inactive


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
