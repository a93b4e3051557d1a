"""Driver-side cluster metadata and group operations, in bulk, with one-line errors.

Everything here talks to a cluster through confluent-kafka's AdminClient or a plain assigned
consumer (never a group member). Calls are issued for many partitions or groups at once and
awaited together, so a thousand groups cost a handful of round trips, not a thousand.

Retries: every admin call — here and in `ferry.kafka.commits` — goes through one loop,
`retry_each`: the items that failed on a transient error (timeouts, transport failures,
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, leaders not found after dropped connections,
...) are retried with exponential backoff (0.2 s doubling to 5 s), each attempt bounded by
`admin.timeout_ms`, all attempts by `admin.retry_ms`. After a transport failure or a timeout
the next attempt uses a fresh AdminClient: a long-lived client that lost its connections can
keep timing out (or lack every partition leader) while a new one is answered at once. Bulk
calls can also report failures per group (`errors=`), so one group that cannot be described
or read does not fail the others. A request that must not be re-sent blindly (a commit) is
re-checked before each retry (`recheck=`)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ferry.kafka.cluster import Cluster, ClusterError, ClusterRefusedError
from ferry.keys import TopicPartitionKey  # noqa: F401 - re-exported
from ferry.status import GroupState

OFFSET_INVALID = -1001  # librdkafka's "no offset"



@dataclass(frozen=True)
class GroupInfo:
    group: str
    state: GroupState
    protocol_type: str | None = None
    members: tuple[dict, ...] = field(default_factory=tuple)

    @property
    def is_inactive(self) -> bool:
        return self.state.is_inactive


def _short(exc: BaseException) -> str:
    if isinstance(exc, concurrent.futures.TimeoutError):
        return "no answer in time"
    text = str(exc.args[0]) if exc.args else str(exc)
    if hasattr(exc.args[0] if exc.args else None, "str"):
        text = exc.args[0].str()
    return text.splitlines()[0] if text else type(exc).__name__


def _kafka_error(exc: BaseException | None):  # noqa: ANN202 - KafkaError or None
    from confluent_kafka import KafkaError

    err = exc.args[0] if exc is not None and exc.args else None
    return err if isinstance(err, KafkaError) else None


def _transient_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError as E

    return frozenset(
        {
            E._TRANSPORT,
            E._TIMED_OUT,
            E._MSG_TIMED_OUT,
            E._ALL_BROKERS_DOWN,
            E._WAIT_COORD,
            E._RESOLVE,
            E._DESTROY_BROKER,  # librdkafka retired the broker connection under the request
            E.NETWORK_EXCEPTION,
            E.REQUEST_TIMED_OUT,
            E.NOT_COORDINATOR,
            E.COORDINATOR_LOAD_IN_PROGRESS,
            E.COORDINATOR_NOT_AVAILABLE,
            E.LEADER_NOT_AVAILABLE,
            E.NOT_LEADER_FOR_PARTITION,
        }
    )


def is_transient(exc: BaseException | None) -> bool:
    """An error worth retrying: the same request may well succeed a moment later."""
    if isinstance(exc, concurrent.futures.TimeoutError):
        return True
    return is_transient_error(_kafka_error(exc))


def is_transient_error(err) -> bool:  # noqa: ANN001 - a KafkaError or None
    return err is not None and (
        err.code() in _transient_codes() or err.retriable() or _is_leader_lookup(err)
    )


def _is_leader_lookup(err) -> bool:  # noqa: ANN001 - a KafkaError or None
    """ListOffsets could not find the partitions' leaders: after dropped connections the
    client's metadata can lack every leader until it is refreshed ("Failed to query partition
    leaders: No leaders found", _NOENT, which also answers a partition that does not exist:
    `list_offsets` tells the two apart by asking a fresh client's metadata)."""
    from confluent_kafka import KafkaError as E

    return err is not None and err.code() == E._NOENT and "partition leaders" in err.str()


def _needs_fresh_client(exc: BaseException) -> bool:
    from confluent_kafka import KafkaError as E

    if isinstance(exc, concurrent.futures.TimeoutError):
        return True
    err = _kafka_error(exc)
    return err is not None and (
        err.code() in (E._TRANSPORT, E._TIMED_OUT, E._ALL_BROKERS_DOWN, E._DESTROY_BROKER)
        or _is_leader_lookup(err)
    )


K = TypeVar("K")
Submit = Callable[[object, list[K]], Mapping[K, concurrent.futures.Future]]
Recheck = Callable[[dict[K, BaseException]], tuple[dict[K, object], dict[K, ClusterError]]]


def failed_future(exc: BaseException) -> concurrent.futures.Future:
    """A future that already failed with `exc` (a request that could not even be queued)."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_exception(exc)
    return future


def checked_future(
    future: concurrent.futures.Future, check: Callable[[object], object]
) -> concurrent.futures.Future:
    """A future for `check(answer)`: for answers the client gives as successes although they
    are not (`check` raises then)."""
    out: concurrent.futures.Future = concurrent.futures.Future()

    def done(f: concurrent.futures.Future) -> None:
        try:
            out.set_result(check(f.result()))
        except Exception as exc:  # noqa: BLE001 - handed to the waiter
            out.set_exception(exc)

    future.add_done_callback(done)
    return out


def _lost(what: str) -> BaseException:
    """A transport failure the client did not report as one (see `checked_future`)."""
    from confluent_kafka import KafkaError, KafkaException

    return KafkaException(KafkaError(KafkaError._TRANSPORT, f"{what} (the connection was lost)"))


def retry_each(
    cluster: Cluster,
    describe: Callable[[K], str],
    keys: Sequence[K],
    submit: Submit,
    *,
    stop_on_fatal: bool = False,
    recheck: Recheck | None = None,
    gave_up: Callable[[K, str], ClusterError] | None = None,
) -> tuple[dict[K, object], dict[K, ClusterError]]:
    """The one retry loop of every admin call: submit one bulk request for `keys` (`submit`
    gets the cluster's AdminClient and the keys, and returns a future per key), await every
    future, and retry only the keys that failed on a transient error, with backoff (0.2 s
    doubling to 5 s) and a fresh AdminClient after a transport failure or a timeout, until
    `cluster.retry_s` is spent (no wait outlasts it) — or, sooner, once the cluster has
    answered nothing at all (every key lost its connection or timed out) for
    `cluster.timeout_s`, the rule reads follow: a cluster gone for good fails every call
    after `reader.timeout_ms`, while one that answers "not yet" (a coordinator moving) keeps
    the longer budget.

    Returns (answers, errors): a key that failed for good gets a ClusterError naming the
    cluster and `describe(key)`, the others their answers. `stop_on_fatal` gives up on every
    key at the first non-transient failure. `recheck`, when given, is asked before keys are
    sent again (after the backoff; given each key's last failure) and settles those it can —
    (answers, errors) — for a request that must not be re-sent blindly (a commit that may
    have landed) or a failure that may be permanent; the keys it leaves out are sent again.
    `gave_up(key, reason)` makes the error of a key still failing when the budget runs out
    (default: a ClusterError saying it was retried)."""
    results: dict[K, object] = {}
    errors: dict[K, ClusterError] = {}
    pending = list(keys)
    deadline = time.monotonic() + cluster.retry_s
    silence = cluster.timeout_s
    last_answer = time.monotonic()  # when the cluster last answered anything
    delay = 0.2
    while pending:
        failures: dict[K, BaseException] = {}
        try:
            futures = submit(cluster.admin(), pending)
        except Exception as exc:  # noqa: BLE001 - the request could not even be queued
            futures, failures = {}, {k: exc for k in pending}
        # One wait for the whole round (the futures are in flight together), never past the
        # budget (or the silence allowed) by more than a moment.
        now = time.monotonic()
        limit = min(deadline, last_answer + silence)
        round_end = now + min(cluster.attempt_s + 1, max(limit - now, 0.5))
        for key, future in futures.items():
            try:
                results[key] = future.result(timeout=max(round_end - time.monotonic(), 0.0))
            except Exception as exc:  # noqa: BLE001 - classified below
                failures[key] = exc
        # Answered nothing at all: every key lost its connection or timed out.
        is_unanswered = len(failures) == len(pending) and all(
            map(_needs_fresh_client, failures.values())
        )
        if not is_unanswered:
            last_answer = time.monotonic()
        if not failures:
            break
        if any(_needs_fresh_client(e) for e in failures.values()):
            cluster.renew_admin()
        fatal = [k for k, e in failures.items() if not is_transient(e)]
        for key in fatal:
            errors[key] = _failed(cluster, describe(key), failures.pop(key), "")
        if not failures:
            break
        stop = bool(fatal) and stop_on_fatal
        is_silent = is_unanswered and time.monotonic() + delay > last_answer + silence
        if not stop and not is_silent and time.monotonic() + delay <= deadline:
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            if recheck is not None:
                answered, settled = recheck(failures)
                results.update(answered)
                errors.update(settled)
                failures = {
                    k: e for k, e in failures.items() if k not in answered and k not in settled
                }
            if time.monotonic() < deadline:
                pending = list(failures)
                continue
        if stop:
            spent = ""
        elif is_silent:
            spent = f" (no answer for {silence:g}s)"
        else:
            spent = f" (retried for {cluster.retry_s:g}s)"
        for key, exc in failures.items():
            if gave_up is None or stop:
                errors[key] = _failed(cluster, describe(key), exc, spent)
            else:
                errors[key] = gave_up(key, _short(exc))
                errors[key].__cause__ = exc
        break
    return results, errors


def _failed(cluster: Cluster, what: str, exc: BaseException, spent: str) -> ClusterError:
    error = ClusterError(f"{cluster.name}: {what} failed{spent}: {_short(exc)}")
    error.__cause__ = exc
    return error


def _gather(
    cluster: Cluster,
    describe: Callable[[K], str],
    keys: Sequence[K],
    submit: Submit,
    recheck: Recheck | None = None,
) -> dict[K, object]:
    """`retry_each` that raises the first failure (a non-transient one stops it at once)."""
    results, errors = retry_each(
        cluster, describe, keys, submit, stop_on_fatal=True, recheck=recheck
    )
    if errors:
        raise next(iter(errors.values()))
    return results


def _answers(
    cluster: Cluster,
    describe: Callable[[K], str],
    keys: Sequence[K],
    submit: Submit,
    errors: dict[K, ClusterError] | None,
) -> dict[K, object]:
    """`_gather` without `errors`; with it, `retry_each` whose failures land in `errors`."""
    if errors is None:
        return _gather(cluster, describe, keys, submit)
    results, failed = retry_each(cluster, describe, keys, submit)
    errors.update(failed)
    return results


def _gather_one(cluster: Cluster, what: str, submit: Callable[[object], concurrent.futures.Future]):  # noqa: ANN202
    """`_gather` for a request that is not per key."""
    return _gather(cluster, lambda _k: what, [None], lambda admin, _keys: {None: submit(admin)})[
        None
    ]


def check_reachable(cluster: Cluster) -> None:
    """Fail fast, naming the cluster, when no broker answers within the timeout — and at once,
    naming the cause, when the cluster refuses this client (authentication, TLS).

    A refusal reaches only the client's error_cb, served by poll(), while the request itself
    just times out ("Broker transport failure"): so the wait is cut into slices (0.25 s
    doubling, a slow TLS+SASL handshake still fits one) with a poll between them."""
    deadline = time.monotonic() + cluster.timeout_s
    wait = 0.25
    while True:
        admin = cluster.admin()
        try:
            admin.list_topics(timeout=max(min(wait, deadline - time.monotonic()), 0.01))
            return
        except Exception as exc:
            admin.poll(0)
            cause = cluster.refused
            if cause is None and time.monotonic() < deadline:
                wait *= 2
                continue
            cluster.renew_admin()
            if cause is not None:
                raise ClusterRefusedError(f"cannot connect to {cluster.name}: {cause}") from exc
            raise ClusterError(
                f"cannot reach {cluster.name} within {cluster.timeout_s:g}s: {_short(exc)}"
            ) from exc


def list_topics(cluster: Cluster, include_internal: bool = False) -> dict[str, int]:
    """Topic name → partition count."""
    metadata = _with_retries(
        cluster,
        "list topics",
        lambda admin: admin.list_topics(timeout=cluster.attempt_s),
    )
    return {
        name: len(t.partitions)
        for name, t in metadata.topics.items()
        if t.error is None and (include_internal or not name.startswith("__"))
    }


def _with_retries(cluster: Cluster, what: str, call: Callable[[object], object]):  # noqa: ANN202
    """A blocking admin call (no future of its own), retried like `_gather`."""

    def submit(admin):  # noqa: ANN001, ANN202
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(call(admin))
        except Exception as exc:  # noqa: BLE001 - classified by retry_each
            future.set_exception(exc)
        return future

    return _gather_one(cluster, what, submit)


def watermarks(
    cluster: Cluster, partitions: Iterable[TopicPartitionKey]
) -> dict[TopicPartitionKey, tuple[int, int]]:
    """(log start, log end) for each partition: both bulk ListOffsets requests in flight
    together, retried as one operation (one `admin.retry_ms` budget)."""
    from confluent_kafka.admin import OffsetSpec

    keys = sorted(set(partitions))
    if not keys:
        return {}
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest()}
    answers = _list_offsets(
        cluster, {(t, p, end): specs[end] for t, p in keys for end in ("earliest", "latest")}
    )
    return {(t, p): (answers[(t, p, "earliest")], answers[(t, p, "latest")]) for t, p in keys}


def list_offsets(
    cluster: Cluster, label: str, specs: Mapping[TopicPartitionKey, object]
) -> dict[TopicPartitionKey, int]:
    """The offset each partition's spec (an OffsetSpec) answers; `label` names it in errors."""
    answers = _list_offsets(cluster, {(t, p, label): spec for (t, p), spec in specs.items()})
    return {(t, p): offset for (t, p, _label), offset in answers.items()}


def _list_offsets(
    cluster: Cluster, specs: Mapping[tuple[str, int, str], object]
) -> dict[tuple[str, int, str], int]:
    """ListOffsets for (topic, partition, label) keys: one request per label, all in flight
    together, retried as one operation."""
    from confluent_kafka import TopicPartition

    def submit(admin, keys):  # noqa: ANN001, ANN202
        futures = {}
        for label in sorted({k[2] for k in keys}):
            asked = {TopicPartition(t, p): specs[(t, p, lb)] for t, p, lb in keys if lb == label}
            answers = admin.list_offsets(asked, request_timeout=cluster.attempt_s)
            futures.update(
                {
                    (tp.topic, tp.partition, label): checked_future(f, _offset)
                    for tp, f in answers.items()
                }
            )
        return futures

    def describe(key: tuple[str, int, str]) -> str:
        return f"list {key[2]} offsets of {key[0]}[{key[1]}]"

    def recheck(failures: dict[tuple[str, int, str], BaseException]) -> tuple[dict, dict]:
        # A leader lookup that failed may be a partition that does not exist: not worth
        # retrying for the whole budget. Unknown when the metadata cannot be read either.
        lookups = [k for k, e in failures.items() if _is_leader_lookup(_kafka_error(e))]
        if not lookups:
            return {}, {}
        try:
            metadata = cluster.admin().list_topics(timeout=cluster.attempt_s)
        except Exception:  # noqa: BLE001 - the retry that follows will say what failed
            return {}, {}
        missing = {k for k in lookups if not _exists(metadata, (k[0], k[1]))}
        return {}, {
            k: ClusterError(f"{cluster.name}: {describe(k)} failed: no such partition")
            for k in missing
        }

    answers = _gather(cluster, describe, list(specs), submit, recheck)
    return {k: a.offset for k, a in answers.items()}  # type: ignore[attr-defined]


def _offset(answer):  # noqa: ANN001, ANN202 - a ListOffsetsResultInfo
    # A ListOffsets request whose connection drops can be answered as a success with offset
    # OFFSET_INVALID (-1001) and no error (confluent-kafka 2.x, reproduced through the fault
    # proxy): a log end of -1001 would make every lag wrong and every read empty.
    if answer.offset == OFFSET_INVALID:
        raise _lost("ListOffsets answered no offset")
    return answer


def _exists(metadata, key: TopicPartitionKey) -> bool:  # noqa: ANN001 - ClusterMetadata
    from confluent_kafka import KafkaError

    topic = metadata.topics.get(key[0])
    if topic is None:
        return False
    if topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return False
    return topic.error is not None or key[1] in topic.partitions


def list_groups(cluster: Cluster) -> list[str]:
    """All consumer group ids the cluster knows."""

    def complete(result):  # noqa: ANN001, ANN202 - a ListConsumerGroupsResult
        # A broker that could not be asked is in `errors`, not raised: after a dropped
        # connection the answer would be an empty (or partial) list of groups.
        if result.errors:
            from confluent_kafka import KafkaException

            raise KafkaException(result.errors[0])
        return result

    result = _gather_one(
        cluster,
        "list consumer groups",
        lambda admin: checked_future(
            admin.list_consumer_groups(request_timeout=cluster.attempt_s), complete
        ),
    )
    return sorted({g.group_id for g in result.valid})  # type: ignore[attr-defined]


def describe_groups(
    cluster: Cluster, groups: Sequence[str], errors: dict[str, ClusterError] | None = None
) -> dict[str, GroupInfo]:
    """State, protocol type and members of each group, all groups in one request (librdkafka
    asks ConsumerGroupDescribe, falling back to DescribeGroups, so groups of both protocols are
    described with their members). With `errors`, a group that cannot be described goes there
    (and not into the answer) instead of failing the call."""
    if not groups:
        return {}
    answers = _answers(
        cluster,
        lambda g: f"describe group {g}",
        list(groups),
        lambda admin, keys: admin.describe_consumer_groups(
            keys, request_timeout=cluster.attempt_s
        ),
        errors,
    )
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
    cluster: Cluster, groups: Sequence[str], errors: dict[str, ClusterError] | None = None
) -> dict[str, dict[TopicPartitionKey, int]]:
    """Each group's committed offsets (partitions without a commit are left out). Every
    group's request is sent before any answer is awaited (the client takes one group per
    OffsetFetch). With `errors`, as `describe_groups`."""
    if not groups:
        return {}
    from confluent_kafka import ConsumerGroupTopicPartitions

    def submit(admin, keys):  # noqa: ANN001, ANN202
        return {
            g: admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g)], request_timeout=cluster.attempt_s
            )[g]
            for g in keys
        }

    answers = _answers(
        cluster, lambda g: f"fetch committed offsets of group {g}", list(groups), submit, errors
    )
    return {
        group: {
            (tp.topic, tp.partition): tp.offset
            for tp in answer.topic_partitions  # type: ignore[attr-defined]
            if tp.offset is not None and tp.offset >= 0 and tp.error is None
        }
        for group, answer in answers.items()
    }


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
    _answers(
        cluster,
        lambda g: f"delete group {g}",
        list(groups),
        lambda admin, keys: admin.delete_consumer_groups(keys, request_timeout=cluster.attempt_s),
        errors,
    )
    return {
        g: None
        if g not in errors
        else (_short(errors[g].__cause__) if errors[g].__cause__ else str(errors[g]))
        for g in groups
    }
