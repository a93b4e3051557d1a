"""What a run can end in: the exit codes a scheduler acts on, the errors that map to them, and
the one line a user is shown for an error (`one_line`).

A leaf module (it imports nothing of Ferry's), so every layer can raise these without
importing the CLI, and pure modules stay importable without pyspark or confluent-kafka. The
exit codes are defined here and nowhere else (tests/unit/test_structure.py checks).
"""

from __future__ import annotations

import re

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # the run did not do all it was asked (or a Spark/cluster failure)
EXIT_USAGE = 2  # bad arguments or config: running again unchanged cannot succeed
EXIT_TRY_AGAIN = 75  # EX_TEMPFAIL: only PENDING/CLAIMED work is left; run again later


class UsageError(Exception):
    """Bad arguments or config: exit code 2."""


class ConfigError(Exception):
    """A config problem, described in one line (exit code 2)."""


class FerryError(Exception):
    """The run could not do what it was asked: exit code 1. `preface`, when not empty, is
    printed before the one line: what a user needs to act on it (offsets to restore, say)."""

    preface: str = ""


class NoGroupsError(FerryError):
    """A group selection matched nothing: the cluster has nothing to act on (exit code 1)."""


class ClusterError(RuntimeError):
    """A cluster call failed; the message names the cluster and what was asked."""


class ClusterRefusedError(ClusterError, ConfigError):
    """The cluster and this client's security settings disagree: authentication failed (a
    wrong SASL password or user), the broker's certificate is not trusted (`ssl.ca.location`),
    or the broker refused the client's certificate. A ConfigError, so exit code 2: running
    again unchanged cannot succeed (unlike an unreachable cluster, exit 1), and a scheduler
    that retries failed runs should not keep presenting bad credentials."""


# Our errors as Spark's wrapped exceptions (a Python worker's traceback, a Py4J error) quote them.
WRAPPED_ERROR = re.compile(
    r"(?:KafkaReadError|ClusterError|FerryError|OffsetsDecodeError|ConfigError)"
    r": (?P<msg>[^\n]+)"
)
_CAUSE = re.compile(r"^(?:Caused by: |: )?[\w.$]+(?:Exception|Error): (?P<msg>\S[^\n]*)$", re.M)


def one_line(exc: BaseException) -> str:
    """The message a user needs; digs our own errors out of Spark's wrapped exceptions, and
    the first named cause out of a bare Java one ("An error occurred while calling o83.count.")."""
    text = str(exc)
    match = WRAPPED_ERROR.search(text)
    if match:
        return match.group("msg").strip()
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if first.startswith("An error occurred while calling"):
        cause = _CAUSE.search(text)
        if cause:
            return f"{first} {cause.group('msg').strip()}"[:500]
    return first[:500]
