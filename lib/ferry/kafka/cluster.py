"""A cluster as Ferry reaches it: client properties, a name for messages, and the time limits
every call to it runs under, built one way from the config (`from_config`).

Client properties pass through to librdkafka unchanged (security.protocol, sasl.*, ssl.*);
Ferry's own settings (`reader.*`, `admin.*`) travel with the cluster so that every job and
every call applies the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferry.config import FerryConfig


class ClusterError(RuntimeError):
    """A cluster call failed; the message names the cluster and what was asked."""


class CommitUnknownError(ClusterError):
    """A commit was sent but its outcome could not be learned before the retry budget ran out:
    the offsets may or may not have changed."""


@dataclass(frozen=True)
class Cluster:
    """A cluster's client properties plus a name for messages."""

    name: str
    conf: Mapping[str, str]
    timeout_s: float = 30.0  # reads and probes: no progress for this long fails them
    attempt_s: float = 10.0  # one admin request attempt
    retry_s: float = 60.0  # all attempts of one admin operation
    _admin: object = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_config(cls, cfg: FerryConfig, section: str) -> Cluster:
        """The one way a job builds a cluster: the section's client properties with every
        `reader.*` and `admin.*` setting of the config applied."""
        conf = getattr(cfg, section) or {}
        return cls(
            f"{section} ({conf.get('bootstrap.servers', '?')})",
            dict(conf),
            cfg.reader.timeout_ms / 1000,
            cfg.admin.timeout_ms / 1000,
            cfg.admin.retry_ms / 1000,
        )

    def admin(self):  # noqa: ANN201 - confluent_kafka type
        """One AdminClient per cluster until it fails: its futures die with it, so it must
        outlive them."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            client = AdminClient({**self.conf, "log_level": 0, "error_cb": lambda _err: None})
            object.__setattr__(self, "_admin", client)
        return self._admin

    def renew_admin(self) -> None:
        """Drop the AdminClient; the next call builds a fresh one (new connections).

        Dropped, not kept: a client whose requests timed out while its broker was away can
        abort the whole process inside librdkafka once the broker answers again (assertion in
        rd_kafka_enq_once_del_source_return, confluent-kafka 2.16, reproduced here through the
        fault proxy); destroyed at once, it cannot."""
        object.__setattr__(self, "_admin", None)

    def consumer(self, defaults: Mapping[str, object] | None = None):  # noqa: ANN201
        """A plain assigned reader (never joins a group, never commits). `defaults` apply
        where the cluster's own properties say nothing."""
        from confluent_kafka import Consumer

        return Consumer(
            {
                # Probes often land at a partition's end; don't let the broker sit on them
                # (unless the cluster's settings say otherwise).
                "fetch.wait.max.ms": 10,
                **(defaults or {}),
                **self.conf,
                "group.id": "ferry-probe",  # required by librdkafka; never joined or committed
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "log_level": 0,
                "error_cb": lambda _err: None,
            }
        )
