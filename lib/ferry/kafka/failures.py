"""Which client errors are worth retrying, and which need a fresh AdminClient: the one
classification every admin call (`ferry.kafka.retry`), the read loop and the test producers
share. Also the one-line reason an error is reported with.
"""

from __future__ import annotations

import concurrent.futures


def short_reason(exc: BaseException) -> str:
    """The first line of an error's text (a KafkaError's own), for one-line errors."""
    if isinstance(exc, concurrent.futures.TimeoutError):
        return "no answer in time"
    text = str(exc.args[0]) if exc.args else str(exc)
    if hasattr(exc.args[0] if exc.args else None, "str"):
        text = exc.args[0].str()
    err = kafka_error(exc)
    if err is not None and text.rstrip().endswith(":"):
        # the broker sent no message ("ConsumerGroupDescribe: "): name the error instead
        from confluent_kafka import KafkaError

        text = f"{text.rstrip()} {KafkaError(err.code()).str()}"
    return text.splitlines()[0] if text else type(exc).__name__


def kafka_error(exc: BaseException | None):  # noqa: ANN202 - KafkaError or None
    """The KafkaError a client exception carries, if any."""
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
            # A leader's epoch moved under the request (a broker fenced by its controller and
            # back, as a starved one-node cluster's is): librdkafka marks these not retriable.
            E.FENCED_LEADER_EPOCH,
            E.UNKNOWN_LEADER_EPOCH,
            E.OFFSET_NOT_AVAILABLE,  # ListOffsets to a new leader whose high watermark lags
            E.UNSTABLE_OFFSET_COMMIT,  # a stable offset fetch: a transaction is still open
        }
    )


def is_transient(exc: BaseException | None) -> bool:
    """An error worth retrying: the same request may well succeed a moment later."""
    if isinstance(exc, concurrent.futures.TimeoutError):
        return True
    return is_transient_error(kafka_error(exc))


def is_transient_error(err) -> bool:  # noqa: ANN001 - a KafkaError or None
    return err is not None and (
        err.code() in _transient_codes() or err.retriable() or is_leader_lookup(err)
    )


OPEN_TRANSACTION = "a transaction committing offsets of the group is still open"


def raise_transient_partitions(answer):  # noqa: ANN001, ANN201 - ConsumerGroupTopicPartitions
    """A group's answer (a commit, an offset fetch) with a partition answered "try again"
    (coordinator loading or moving, a transaction still open): raised as that error, so the
    whole group is retried like a lost request. A commit so answered was not applied."""
    from confluent_kafka import KafkaError, KafkaException

    for tp in answer.topic_partitions:
        if tp.error is not None and is_transient_error(tp.error):
            if tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT:  # the broker's text is vague
                raise KafkaException(KafkaError(tp.error.code(), OPEN_TRANSACTION))
            raise KafkaException(tp.error)
    return answer


def is_leader_lookup(err) -> bool:  # noqa: ANN001 - a KafkaError or None
    """ListOffsets could not find the partitions' leaders: after dropped connections the
    client's metadata can lack every leader until it is refreshed ("Failed to query partition
    leaders: No leaders found", _NOENT, which also answers a partition that does not exist:
    `list_offsets` tells the two apart by asking a fresh client's metadata)."""
    from confluent_kafka import KafkaError as E

    return err is not None and err.code() == E._NOENT and "partition leaders" in err.str()


def needs_fresh_client(exc: BaseException) -> bool:
    from confluent_kafka import KafkaError as E

    if isinstance(exc, concurrent.futures.TimeoutError):
        return True
    err = kafka_error(exc)
    return err is not None and (
        err.code()
        in (
            E._TRANSPORT,
            E._TIMED_OUT,
            E._ALL_BROKERS_DOWN,
            E._DESTROY_BROKER,
            E.FENCED_LEADER_EPOCH,  # the client's metadata names an old epoch: start afresh
            E.UNKNOWN_LEADER_EPOCH,
        )
        or is_leader_lookup(err)
    )


def lost_connection(what: str) -> BaseException:
    """A transport failure the client did not report as one (see
    `ferry.kafka.retry.checked_future`)."""
    from confluent_kafka import KafkaError, KafkaException

    return KafkaException(KafkaError(KafkaError._TRANSPORT, f"{what} (the connection was lost)"))
