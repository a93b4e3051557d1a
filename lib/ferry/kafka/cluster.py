"""A cluster as Ferry reaches it: client properties, a name for messages, and the limits every
call to it runs under, built one way from the config (`from_config`).

Client properties pass through to librdkafka unchanged (security.protocol, sasl.*, ssl.*);
Ferry's own settings (`reader.*`, `admin.*`) travel with the cluster so that every job and
every call applies the same ones — on the driver and, through the data source's options, on
Spark's executors. `consumer_conf` is the one consumer configuration: every record Ferry reads
(driver reads, probes, the executors' reader) is read by a consumer built from it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferry.errors import ClusterError, ClusterRefusedError  # noqa: F401 - re-exported
from ferry.shipped import local_paths

if TYPE_CHECKING:
    from ferry.config import FerryConfig


# Reads of record payloads (decode-offsets' key and value) weigh this much more against
# `driver_max_offsets`: the default million offsets become 250,000 records of up to ~1 KiB.
PAYLOAD_COLUMNS = frozenset({"key", "value", "headers"})
PAYLOAD_WEIGHT = 4
# librdkafka reports these only to `error_cb`: the request itself just times out.
# "SSL alert number" is a TLS alert the broker sent (it refused our certificate).
_REFUSAL_TEXT = re.compile(r"SSL alert number")
_BROKER_PREFIX = re.compile(r"^\S+://\S+: ")  # "sasl_ssl://127.0.0.1:9093/bootstrap: "
_IN_STATE = re.compile(r" \(after \d+ms in state \w+\)$")


def refusal(err) -> str | None:  # noqa: ANN001 - a KafkaError
    """The cause, in one line, when `err` says the cluster refused this client (or this client
    refused the cluster's certificate); None for any other error."""
    from confluent_kafka import KafkaError as E

    text = err.str() if hasattr(err, "str") else str(err)
    refused = err.code() in (E._AUTHENTICATION, E._SSL, E.SASL_AUTHENTICATION_FAILED) or (
        err.code() == E._TRANSPORT and _REFUSAL_TEXT.search(text) is not None
    )
    if not refused:
        return None
    return _IN_STATE.sub("", _BROKER_PREFIX.sub("", text.splitlines()[0] if text else ""))


class CommitUnknownError(ClusterError):
    """A commit was sent but its outcome could not be learned before the retry budget ran out:
    the offsets may or may not have changed."""


# What a reading consumer is given where the cluster's own properties say nothing.
CONSUMER_DEFAULTS = {
    # A read often ends at its partition's end (a probe past the last record, a range up to
    # the log end): answer end-of-partition quickly instead of waiting for new records.
    "fetch.wait.max.ms": 50,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "log_level": 0,
}


@dataclass(frozen=True)
class Cluster:
    """A cluster's client properties, a name for messages, and Ferry's settings for it."""

    name: str
    conf: Mapping[str, str]
    timeout_s: float = 30.0  # reads and probes: no progress for this long fails them
    attempt_s: float = 10.0  # one admin request attempt
    retry_s: float = 60.0  # all attempts of one admin operation
    isolation_level: str = "read_committed"  # unless `conf` sets isolation.level
    max_records_per_task: int = 50_000  # reads through Spark: offsets per task at most
    driver_max_offsets: int = 1_000_000  # reads of at most this many offsets run on the driver
    _admin: object = field(default=None, init=False, repr=False, compare=False)
    _refusals: list = field(default_factory=list, init=False, repr=False, compare=False)

    @classmethod
    def from_config(cls, cfg: FerryConfig, section: str) -> Cluster:
        """The one way a job builds a cluster: the section's client properties with every
        `reader.*` and `admin.*` setting of the config applied."""
        conf = getattr(cfg, section) or {}
        return cls(
            f"{section} ({conf.get('bootstrap.servers', '?')})",
            dict(conf),
            timeout_s=cfg.reader.timeout_ms / 1000,
            attempt_s=cfg.admin.timeout_ms / 1000,
            retry_s=cfg.admin.retry_ms / 1000,
            isolation_level=cfg.reader.isolation_level,
            max_records_per_task=cfg.reader.max_records_per_task,
            driver_max_offsets=cfg.reader.driver_max_offsets,
        )

    @property
    def timeout_ms(self) -> int:
        return round(self.timeout_s * 1000)

    def reads_on_driver(self, offsets: int, columns: Iterable[str] = ()) -> bool:
        """Whether a read of this many offsets runs on the driver rather than through Spark.
        A read that carries payloads (key, value or headers among `columns`) counts each
        offset `PAYLOAD_WEIGHT` times: what the driver holds of a record is then its payload,
        not about 70 bytes of offsets, timestamp and hash."""
        weight = PAYLOAD_WEIGHT if PAYLOAD_COLUMNS.intersection(columns) else 1
        return offsets * weight <= self.driver_max_offsets

    def admin(self):  # noqa: ANN201 - confluent_kafka type
        """One AdminClient per cluster until it fails: its futures die with it, so it must
        outlive them."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            conf = local_paths(self.conf)  # files shipped by spark-submit.sh (ferry.shipping)
            refusals: list[str] = []  # the callback holds this, not self: no reference cycle

            def note(err) -> None:  # noqa: ANN001 - served by admin().poll() only
                cause = refusal(err)
                if cause is not None:
                    refusals.append(cause)

            client = AdminClient({**conf, "log_level": 0, "error_cb": note})
            object.__setattr__(self, "_refusals", refusals)
            object.__setattr__(self, "_admin", client)
        return self._admin

    @property
    def refused(self) -> str | None:
        """The last refusal (see `refusal`) the current AdminClient reported to its error_cb,
        once its poll() has served it; every other error is the request's own to report."""
        return self._refusals[-1] if self._refusals else None

    def detached(self) -> Cluster:
        """The same cluster without this process's AdminClient: what can be sent to another
        process (`ferry.kafka.isolated`)."""
        return dataclasses.replace(self)

    def answers(self, wait_s: float) -> bool:
        """Whether the cluster answers anything within `wait_s` (a DescribeCluster on the
        current AdminClient; any answer counts, a refusal or an unsupported request too): told
        apart from a request of its own that went unanswered, a cluster that is there is not
        taken for gone. A client left unanswered is dropped, as after any timeout."""
        from ferry.kafka.failures import needs_fresh_client

        try:
            self.admin().describe_cluster(request_timeout=wait_s).result(timeout=wait_s + 0.5)
        except Exception as exc:  # noqa: BLE001 - classified: only a silence is "no"
            if needs_fresh_client(exc):
                self.renew_admin()
                return False
        return True

    def renew_admin(self) -> None:
        """Drop the AdminClient; the next call builds a fresh one (new connections).

        Dropped, not kept: a client whose requests timed out while its broker was away can
        abort the whole process inside librdkafka once the broker answers again (assertion in
        rd_kafka_enq_once_del_source_return, confluent-kafka 2.16, reproduced here through the
        fault proxy); destroyed at once, it cannot."""
        object.__setattr__(self, "_admin", None)

    def consumer_conf(self, error_cb: Callable[[object], None] | None = None) -> dict:
        """The one consumer configuration: a plain assigned reader (never joins a group, never
        commits) at the cluster's isolation level. The cluster's own properties win over
        Ferry's defaults (a slow broker may need a longer `fetch.wait.max.ms`)."""
        return {
            **CONSUMER_DEFAULTS,
            "isolation.level": self.isolation_level,
            **local_paths(self.conf),
            "group.id": "ferry-reader",  # required by librdkafka; never joined or committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "error_cb": error_cb or (lambda _err: None),
        }

    def consumer(self, error_cb: Callable[[object], None] | None = None):  # noqa: ANN201
        """A Consumer built from `consumer_conf`: the only place Ferry makes one."""
        from confluent_kafka import Consumer

        return Consumer(self.consumer_conf(error_cb))
