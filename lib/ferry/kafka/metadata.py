"""A cluster's metadata: whether it answers at all (`check_reachable`, naming why not), its id
(`cluster_id`), and its topics with their partition counts. Retried as every admin call
(`ferry.kafka.retry`)."""

from __future__ import annotations

import time

from ferry.kafka.cluster import Cluster, ClusterError, ClusterRefusedError
from ferry.kafka.failures import short_reason
from ferry.kafka.retry import call_with_retries


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
                f"cannot reach {cluster.name} within {cluster.timeout_s:g}s: {short_reason(exc)}"
            ) from exc


def list_topics(cluster: Cluster, include_internal: bool = False) -> dict[str, int]:
    """Topic name → partition count."""
    metadata = call_with_retries(
        cluster,
        "list topics",
        lambda admin: admin.list_topics(timeout=cluster.attempt_s),
    )
    return {
        name: len(t.partitions)
        for name, t in metadata.topics.items()
        if t.error is None and (include_internal or not name.startswith("__"))
    }


def cluster_id(cluster: Cluster) -> str:
    """The cluster's id (DescribeCluster): what tells two clusters apart whatever their
    bootstrap addresses (a checkpoint run records it, `ferry.checkpoint.runs`)."""
    answer = call_with_retries(
        cluster,
        "describe cluster",
        lambda admin: admin.describe_cluster(request_timeout=cluster.attempt_s).result(
            timeout=cluster.attempt_s + 1
        ),
    )
    if not answer.cluster_id:
        raise ClusterError(f"{cluster.name}: DescribeCluster named no cluster id")
    return str(answer.cluster_id)
