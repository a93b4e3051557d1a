"""The one retry loop of every admin call, here and in `ferry.kafka.commits`: `retry_each`.

The items that failed on a transient error (`ferry.kafka.failures`: timeouts, transport
failures, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, leaders not found after dropped
connections, ...) are retried with exponential backoff (0.2 s doubling to 5 s), each attempt
bounded by `admin.timeout_ms`, all attempts by `admin.retry_ms` — or by `reader.timeout_ms`
when the cluster answers nothing at all, not even a fresh client's DescribeCluster. After a
transport failure or a timeout the next attempt uses a fresh AdminClient: a long-lived
client that lost its connections can keep timing out (or lack every partition leader) while
a new one is answered at once. Bulk calls can also report failures per group (`errors=`), so
one group that cannot be described or read does not fail the others. A request that must not
be re-sent blindly (a commit) is re-checked before each retry (`recheck=`). `Backoff` is
that schedule on its own, for the one retry that is not an admin request: the worker process
that crashed (`ferry.kafka.isolated`).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from ferry.kafka.cluster import Cluster, ClusterError
from ferry.kafka.failures import is_transient, needs_fresh_client, short_reason

K = TypeVar("K")
Submit = Callable[[object, list[K]], Mapping[K, concurrent.futures.Future]]
Recheck = Callable[[dict[K, BaseException]], tuple[dict[K, object], dict[K, ClusterError]]]


class Backoff:
    """The one retry schedule: waits of 0.2 s doubling to 5 s, none of them past a deadline
    (`retry_s` from now unless given: one budget can span several calls)."""

    def __init__(self, retry_s: float, deadline: float | None = None) -> None:
        self.retry_s = retry_s
        self.deadline = time.monotonic() + retry_s if deadline is None else deadline
        self.delay = 0.2

    def fits(self) -> bool:
        """Whether the next wait ends before the deadline."""
        return time.monotonic() + self.delay <= self.deadline

    def wait(self) -> bool:
        """Sleep the next delay and return True, or return False at once when it would end
        past the deadline (the budget is spent)."""
        if not self.fits():
            return False
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, 5.0)
        return True

    @property
    def spent(self) -> str:
        """How the budget is named in an error once it is spent."""
        return f"retried for {self.retry_s:g}s"


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


def retry_each(
    cluster: Cluster,
    describe: Callable[[K], str],
    keys: Sequence[K],
    submit: Submit,
    *,
    stop_on_fatal: bool = False,
    recheck: Recheck | None = None,
    gave_up: Callable[[K, str], ClusterError] | None = None,
    deadline: float | None = None,
) -> tuple[dict[K, object], dict[K, ClusterError]]:
    """The one retry loop of every admin call: submit one bulk request for `keys` (`submit`
    gets the cluster's AdminClient and the keys, and returns a future per key), await every
    future, and retry only the keys that failed on a transient error, with backoff (0.2 s
    doubling to 5 s) and a fresh AdminClient after a transport failure or a timeout, until
    `cluster.retry_s` is spent (no wait outlasts it) — or, sooner, once the cluster has
    answered nothing at all (every key lost its connection or timed out) for
    `cluster.timeout_s`, the rule reads follow: a cluster gone for good fails every call
    after `reader.timeout_ms`, while one that answers "not yet" (a coordinator moving) keeps
    the longer budget. Before a silence ends the call, the cluster is asked whether it answers
    at all (`cluster.answers`, in the last third of the silence, or one attempt if shorter):
    if it does, only these requests went unanswered, and they keep the budget too.

    Returns (answers, errors): a key that failed for good gets a ClusterError naming the
    cluster and `describe(key)`, the others their answers. `stop_on_fatal` gives up on every
    key at the first non-transient failure. `recheck`, when given, is asked before keys are
    sent again (after the backoff; given each key's last failure) and settles those it can —
    (answers, errors) — for a request that must not be re-sent blindly (a commit that may
    have landed) or a failure that may be permanent; the keys it leaves out are sent again.
    `gave_up(key, reason)` makes the error of a key still failing when the budget runs out
    (default: a ClusterError saying it was retried). `deadline` (a `time.monotonic()` time)
    ends the budget sooner: an operation made of several calls spends one budget."""
    results: dict[K, object] = {}
    errors: dict[K, ClusterError] = {}
    pending = list(keys)
    backoff = Backoff(cluster.retry_s, deadline)
    silence = cluster.timeout_s
    # The end of the silence allowed is kept for asking the cluster itself whether it is there
    # (`cluster.answers`): a request can go unanswered while the cluster answers others (a
    # starved coordinator on a fresh destination, a request lost on a connection that stays
    # open), and one attempt can be as long as the whole silence allowed.
    ask_s = min(cluster.attempt_s, silence / 3)
    last_answer = time.monotonic()  # when the cluster last answered anything
    while pending:
        failures: dict[K, BaseException] = {}
        try:
            futures = submit(cluster.admin(), pending)
        except Exception as exc:  # noqa: BLE001 - the request could not even be queued
            futures, failures = {}, {k: exc for k in pending}
        # One wait for the whole round (the futures are in flight together), never past the
        # budget (or the silence allowed) by more than a moment.
        now = time.monotonic()
        limit = min(backoff.deadline, last_answer + silence - ask_s)
        round_end = now + min(cluster.attempt_s + 1, max(limit - now, 0.5))
        for key, future in futures.items():
            try:
                results[key] = future.result(timeout=max(round_end - time.monotonic(), 0.0))
            except Exception as exc:  # noqa: BLE001 - classified below
                failures[key] = exc
        # Answered nothing at all: every key lost its connection or timed out.
        is_unanswered = len(failures) == len(pending) and all(
            map(needs_fresh_client, failures.values())
        )
        if not is_unanswered:
            last_answer = time.monotonic()
        if not failures:
            break
        if any(needs_fresh_client(e) for e in failures.values()):
            cluster.renew_admin()
        fatal = [k for k, e in failures.items() if not is_transient(e)]
        for key in fatal:
            errors[key] = _failed(cluster, describe(key), failures.pop(key), "")
        if not failures:
            break
        stop = bool(fatal) and stop_on_fatal
        is_silent = (
            is_unanswered and time.monotonic() + backoff.delay > last_answer + silence - ask_s
        )
        if is_silent and not stop:
            if not backoff.fits():
                is_silent = False  # the budget ends the call before the silence would
            elif cluster.answers(ask_s):
                # the cluster is there: only these requests went unanswered
                last_answer, is_silent = time.monotonic(), False
        if not stop and not is_silent and backoff.wait():
            if recheck is not None:
                answered, settled = recheck(failures)
                results.update(answered)
                errors.update(settled)
                failures = {
                    k: e for k, e in failures.items() if k not in answered and k not in settled
                }
            if time.monotonic() < backoff.deadline:
                pending = list(failures)
                continue
        if stop:
            spent = ""
        elif is_silent:
            spent = f" (no answer for {silence:g}s)"
        else:
            spent = f" ({backoff.spent})"
        for key, exc in failures.items():
            if gave_up is None or stop:
                errors[key] = _failed(cluster, describe(key), exc, spent)
            else:
                errors[key] = gave_up(key, short_reason(exc))
                errors[key].__cause__ = exc
        break
    return results, errors


def _failed(cluster: Cluster, what: str, exc: BaseException, spent: str) -> ClusterError:
    error = ClusterError(f"{cluster.name}: {what} failed{spent}: {short_reason(exc)}")
    error.__cause__ = exc
    return error


def gather(
    cluster: Cluster,
    describe: Callable[[K], str],
    keys: Sequence[K],
    submit: Submit,
    recheck: Recheck | None = None,
    deadline: float | None = None,
) -> dict[K, object]:
    """`retry_each` that raises the first failure (a non-transient one stops it at once)."""
    results, errors = retry_each(
        cluster, describe, keys, submit, stop_on_fatal=True, recheck=recheck, deadline=deadline
    )
    if errors:
        raise next(iter(errors.values()))
    return results


def gather_into(
    cluster: Cluster,
    describe: Callable[[K], str],
    keys: Sequence[K],
    submit: Submit,
    errors: dict[K, ClusterError] | None,
    deadline: float | None = None,
) -> dict[K, object]:
    """`gather` without `errors`; with it, `retry_each` whose failures land in `errors`."""
    if errors is None:
        return gather(cluster, describe, keys, submit, deadline=deadline)
    results, failed = retry_each(cluster, describe, keys, submit, deadline=deadline)
    errors.update(failed)
    return results


def gather_one(
    cluster: Cluster,
    what: str,
    submit: Callable[[object], concurrent.futures.Future],
    deadline: float | None = None,
):  # noqa: ANN202
    """`gather` for a request that is not per key."""
    return gather(
        cluster,
        lambda _k: what,
        [None],
        lambda admin, _keys: {None: submit(admin)},
        deadline=deadline,
    )[None]


def call_with_retries(
    cluster: Cluster,
    what: str,
    call: Callable[[object], object],
    deadline: float | None = None,
):  # noqa: ANN202
    """A blocking admin call (no future of its own), retried like `gather`."""

    def submit(admin):  # noqa: ANN001, ANN202
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(call(admin))
        except Exception as exc:  # noqa: BLE001 - classified by retry_each
            future.set_exception(exc)
        return future

    return gather_one(cluster, what, submit, deadline)
