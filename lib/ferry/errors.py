"""What a run can end in: the exit codes a scheduler acts on and the errors that map to them.

A leaf module (it imports nothing of Ferry's), so every layer can raise these without
importing the CLI, and pure modules stay importable without pyspark or confluent-kafka.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # the run did not do all it was asked (or a Spark/cluster failure)
EXIT_USAGE = 2  # bad arguments or config: running again unchanged cannot succeed
EXIT_TRY_AGAIN = 75  # EX_TEMPFAIL: only PENDING/CLAIMED work is left; run again later


class UsageError(Exception):
    """Bad arguments or config: exit code 2."""


class ConfigError(Exception):
    """A config problem, described in one line (exit code 2)."""


class FerryError(Exception):
    """The run could not do what it was asked: exit code 1."""


class ClusterError(RuntimeError):
    """A cluster call failed; the message names the cluster and what was asked."""


class ClusterRefusedError(ClusterError, ConfigError):
    """The cluster and this client's security settings disagree: authentication failed (a
    wrong SASL password or user), the broker's certificate is not trusted (`ssl.ca.location`),
    or the broker refused the client's certificate. A ConfigError, so exit code 2: running
    again unchanged cannot succeed (unlike an unreachable cluster, exit 1), and a scheduler
    that retries failed runs should not keep presenting bad credentials."""
