"""The one admin retry loop (`ferry.kafka.retry.retry_each`) as a control loop: which keys are
sent again, when the client is renewed, what a recheck settles, and that the budget holds.
The requests themselves are futures made here; the fault tests stage the same failures on the
wire (tests/integration/test_faults_jobs.py)."""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException

from ferry.kafka.cluster import ClusterError, CommitUnknownError
from ferry.kafka.coordinators import partition_for, probe_groups
from ferry.kafka.retry import Backoff, failed_future, retry_each


@dataclass
class FakeCluster:
    """What retry_each asks of a cluster: a client, renewing it, a name and time limits."""

    name: str = "cluster (h:9092)"
    attempt_s: float = 0.5
    retry_s: float = 3.0
    timeout_s: float = 30.0
    renewed: int = 0
    clients: list[object] = field(default_factory=list)
    is_there: bool = False  # what `answers` says: whether the cluster answers anything at all
    asked: list[float] = field(default_factory=list)  # each `answers` call's wait

    def admin(self) -> object:
        if not self.clients or self.clients[-1] is None:
            self.clients.append(object())
        return self.clients[-1]

    def answers(self, wait_s: float) -> bool:
        self.asked.append(wait_s)
        if not self.is_there:
            time.sleep(wait_s)  # a cluster that is gone lets the question time out
        return self.is_there

    def renew_admin(self) -> None:
        self.renewed += 1
        self.clients.append(None)


def error(code: int, text: str = "boom") -> KafkaException:
    return KafkaException(KafkaError(code, text))


def answered(value: object) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return future


def scripted(outcomes: dict[str, list[object]], sent: list[list[str]]):  # noqa: ANN201
    """A submit that answers each key with its next scripted outcome (an exception fails)."""

    def submit(_admin, keys):  # noqa: ANN001, ANN202
        sent.append(list(keys))
        return {
            k: failed_future(o) if isinstance(o, BaseException) else answered(o)
            for k in keys
            for o in [outcomes[k].pop(0)]
        }

    return submit


def test_only_failed_keys_are_sent_again_on_a_fresh_client():
    cluster, sent = FakeCluster(), []
    outcomes = {
        "a": ["A"],
        "b": [error(KafkaError._TRANSPORT), error(KafkaError.NOT_COORDINATOR), "B"],
        "c": [error(KafkaError.GROUP_AUTHORIZATION_FAILED, "not allowed")],
    }
    answers, errors = retry_each(cluster, lambda k: f"describe {k}", list(outcomes),
                                 scripted(outcomes, sent))  # fmt: skip
    assert answers == {"a": "A", "b": "B"}
    assert sent == [["a", "b", "c"], ["b"], ["b"]]
    assert cluster.renewed == 1  # after the transport failure, not after NOT_COORDINATOR
    assert str(errors["c"]) == "cluster (h:9092): describe c failed: not allowed"


def test_leaders_not_found_is_retried_on_a_fresh_client():
    cluster, sent = FakeCluster(), []
    lost = error(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")
    outcomes = {"t[0]": [lost, 5]}
    answers, errors = retry_each(cluster, str, ["t[0]"], scripted(outcomes, sent))
    assert (answers, errors, cluster.renewed) == ({"t[0]": 5}, {}, 1)


def test_a_leader_epoch_moved_under_the_request_is_retried_on_a_fresh_client():
    """A one-node source fenced by its controller under load and back: its ListOffsets
    answered FENCED_LEADER_EPOCH, and the run ended in exit 1 (test-faults)."""
    cluster, sent = FakeCluster(), []
    fenced = error(KafkaError.FENCED_LEADER_EPOCH, "Leader epoch is older than broker epoch")
    outcomes = {"t[0]": [fenced, error(KafkaError.OFFSET_NOT_AVAILABLE), 7]}
    answers, errors = retry_each(cluster, str, ["t[0]"], scripted(outcomes, sent))
    assert (answers, errors, cluster.renewed) == ({"t[0]": 7}, {}, 1)


def test_a_recheck_settles_keys_before_they_are_sent_again():
    cluster, sent, asked = FakeCluster(), [], []
    timeout = error(KafkaError._TIMED_OUT)
    outcomes = {"landed": [timeout], "gone": [timeout], "again": [timeout, "ok"]}

    def recheck(failures):  # noqa: ANN001, ANN202
        asked.append(sorted(failures))
        return {"landed": None}, {"gone": ClusterError("gone: a consumer joined")}

    answers, errors = retry_each(cluster, str, list(outcomes), scripted(outcomes, sent),
                                 recheck=recheck)  # fmt: skip
    assert asked == [["again", "gone", "landed"]]
    assert sent == [["landed", "gone", "again"], ["again"]]
    assert answers == {"landed": None, "again": "ok"}
    assert str(errors["gone"]) == "gone: a consumer joined"


def test_the_budget_holds_and_gave_up_names_the_error():
    cluster, sent = FakeCluster(retry_s=1.0), []
    outcomes = {"g": [error(KafkaError._TRANSPORT)] * 50}
    started = time.monotonic()
    answers, errors = retry_each(
        cluster, lambda g: f"commit offsets of group {g}", ["g"], scripted(outcomes, sent),
        gave_up=lambda g, reason: CommitUnknownError(f"commit of group {g} unconfirmed: {reason}"),
    )  # fmt: skip
    took = time.monotonic() - started
    assert answers == {} and isinstance(errors["g"], CommitUnknownError)
    assert str(errors["g"]) == "commit of group g unconfirmed: boom"
    assert 2 <= len(sent) <= 4 and took < cluster.retry_s + 0.5, (len(sent), took)

    outcomes = {"g": [error(KafkaError._TRANSPORT)] * 50}
    _, errors = retry_each(cluster, lambda g: f"describe {g}", ["g"], scripted(outcomes, []))
    assert str(errors["g"]) == "cluster (h:9092): describe g failed (retried for 1s): boom"


def test_an_answer_that_never_comes_is_a_timeout_within_the_budget():
    cluster = FakeCluster(attempt_s=0.2, retry_s=1.0)
    never: concurrent.futures.Future = concurrent.futures.Future()
    started = time.monotonic()
    _, errors = retry_each(cluster, str, ["k"], lambda _a, keys: {k: never for k in keys})
    took = time.monotonic() - started
    assert "no answer in time" in str(errors["k"]) and cluster.renewed >= 1
    assert took < cluster.retry_s + 0.7, took


def test_stop_on_fatal_gives_up_on_every_key():
    cluster, sent = FakeCluster(), []
    outcomes = {"a": [error(KafkaError._TRANSPORT)], "b": [error(KafkaError.INVALID_REQUEST)]}
    answers, errors = retry_each(cluster, str, ["a", "b"], scripted(outcomes, sent),
                                 stop_on_fatal=True)  # fmt: skip
    assert answers == {} and set(errors) == {"a", "b"} and len(sent) == 1


def test_a_cluster_that_answers_nothing_fails_after_the_read_timeout_not_the_budget():
    cluster, sent = FakeCluster(timeout_s=1.0, retry_s=30.0), []
    outcomes = {k: [error(KafkaError._TRANSPORT)] * 50 for k in ("a", "b")}
    started = time.monotonic()
    answers, errors = retry_each(cluster, str, ["a", "b"], scripted(outcomes, sent))
    took = time.monotonic() - started
    assert answers == {} and took < cluster.timeout_s + 0.5, took
    assert str(errors["a"]) == "cluster (h:9092): a failed (no answer for 1s): boom"
    # Asked once whether it answers at all, within the silence allowed: a third of it.
    assert cluster.asked == [cluster.timeout_s / 3]


def test_requests_unanswered_while_the_cluster_answers_keep_the_budget():
    # Each attempt times out, and one attempt is as long as the silence allowed (a coordinator
    # starved on a fresh destination, a request lost on a connection that stays open); but the
    # cluster answers when asked, so the keys are sent again, well past the silence.
    cluster, sent = FakeCluster(attempt_s=1.0, timeout_s=1.0, retry_s=10.0, is_there=True), []
    outcomes = {"g": [error(KafkaError._TIMED_OUT)] * 3 + ["G"]}
    started = time.monotonic()
    answers, errors = retry_each(cluster, str, ["g"], scripted(outcomes, sent))
    assert answers == {"g": "G"} and not errors
    assert sent == [["g"]] * 4 and cluster.renewed == 3 and len(cluster.asked) >= 1
    assert time.monotonic() - started < cluster.retry_s


def test_requests_unanswered_while_the_cluster_answers_end_with_the_budget():
    cluster = FakeCluster(attempt_s=0.3, timeout_s=0.3, retry_s=1.5, is_there=True)
    outcomes = {"g": [error(KafkaError._TIMED_OUT, "no answer")] * 50}
    started = time.monotonic()
    _, errors = retry_each(cluster, str, ["g"], scripted(outcomes, []))
    took = time.monotonic() - started
    assert str(errors["g"]) == "cluster (h:9092): g failed (retried for 1.5s): no answer", took
    assert 1.0 < took < 2.0, took


def test_a_cluster_that_answers_not_yet_keeps_the_whole_budget():
    # NOT_COORDINATOR is an answer: the broker is there, its coordinator is moving.
    cluster, sent = FakeCluster(timeout_s=0.5, retry_s=1.5), []
    outcomes = {"g": [error(KafkaError.NOT_COORDINATOR)] * 50}
    started = time.monotonic()
    _, errors = retry_each(cluster, str, ["g"], scripted(outcomes, sent))
    took = time.monotonic() - started
    assert "retried for 1.5s" in str(errors["g"]) and took > 1.0, took


def test_a_key_answered_not_yet_keeps_the_other_keys_retrying_past_the_silence():
    # "a" keeps getting answers ("not yet"), so the cluster is there: "b"'s lost connections
    # are retried on for the budget, well past the silence allowed, and both land.
    cluster, sent = FakeCluster(timeout_s=0.3, retry_s=5.0), []
    outcomes = {
        "a": [error(KafkaError.NOT_COORDINATOR)] * 3 + ["A"],
        "b": [error(KafkaError._TRANSPORT)] * 3 + ["B"],
    }
    started = time.monotonic()
    answers, errors = retry_each(cluster, str, ["a", "b"], scripted(outcomes, sent))
    assert answers == {"a": "A", "b": "B"} and not errors
    assert time.monotonic() - started > cluster.timeout_s


def test_a_shared_deadline_ends_the_budget_sooner():
    # An operation of several calls (coordinators awaited, then the offsets fetched) spends
    # one budget: the second call gets what is left of it.
    cluster = FakeCluster(retry_s=30.0)
    outcomes = {"g": [error(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)] * 50}
    started = time.monotonic()
    _, errors = retry_each(cluster, str, ["g"], scripted(outcomes, []), deadline=started + 1.0)
    took = time.monotonic() - started
    assert "retried for 30s" in str(errors["g"]) and 0.5 < took < 1.5, took


def test_backoff_doubles_to_five_seconds_and_never_waits_past_its_deadline():
    backoff = Backoff(retry_s=60.0)
    delays = []
    for _ in range(8):
        delays.append(backoff.delay)
        backoff.delay = min(backoff.delay * 2, 5.0)  # what wait() does after sleeping
    assert delays == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    short = Backoff(retry_s=60.0, deadline=time.monotonic() + 0.1)
    started = time.monotonic()
    assert short.wait() is False and time.monotonic() - started < 0.05
    assert short.spent == "retried for 60s"


def test_partition_for_is_the_brokers_rule():
    # Java's String.hashCode over UTF-16 code units, Kafka's Utils.abs, modulo the count.
    assert partition_for("hello", 50) == 99162322 % 50  # "hello".hashCode() == 99162322
    assert partition_for("polygenelubricants", 50) == 0  # hashCode() == Integer.MIN_VALUE
    assert partition_for("\U0001f600", 1000) == (31 * 0xD83D + 0xDE00) % 1000  # a surrogate pair
    negative = "hellohellohello"  # hashCode() < 0: its absolute value is taken
    code = 0
    for ch in negative:
        code = (31 * code + ord(ch)) & 0xFFFFFFFF
    assert code >= 1 << 31 and partition_for(negative, 7) == ((1 << 32) - code) % 7


def test_an_offset_fetch_of_listed_groups_probes_every_other_coordinator_once():
    groups = [f"g{i}" for i in range(200)]
    listed = ["g3", "g77"]
    probes = probe_groups(groups, listed, 50)
    partitions = [partition_for(g, 50) for g in probes]
    # one group per partition the listed groups' fetches do not reach, none listed
    assert len(partitions) == len(set(partitions)) and not set(probes) & set(listed)
    reached = {partition_for(g, 50) for g in [*listed, *probes]}
    assert reached == {partition_for(g, 50) for g in groups}
    assert {partition_for(g, 50) for g in listed}.isdisjoint(partitions)
    # the first group of each partition, in the order given
    assert probes == sorted(probes, key=groups.index)
    assert probe_groups(groups, groups, 50) == []
    assert probe_groups(groups, [], 0) == ["g0"]  # the partitions not known yet: one group
    assert probe_groups([], [], 50) == []
