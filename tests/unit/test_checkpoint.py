"""The offset log of a Structured Streaming checkpoint as text (`ferry.checkpoint.offsets_log`):
what Spark 4.2 writes, parsed; Kafka lines told from other sources'; the batches a translation
needs; a rewrite that changes the translated lines only, byte for byte; what earlier runs left
(`ferry.checkpoint.runs`); the source-range checks and the restart hint; the sources' start
offsets Spark reads on restart (`start_offsets`), the sources the operator picks and their fit
to the source cluster (`sources`), and the stand-in for a file Spark only checks (`sets`)."""

from __future__ import annotations

import pytest

from ferry.checkpoint import runs
from ferry.checkpoint.offsets_log import (
    CheckpointFormatError,
    batch_ids,
    choose_batches,
    is_source_name,
    kafka_offsets,
    parse_offsets_file,
    render_offsets_file,
    translated_line,
)
from ferry.checkpoint.reading import Checkpoint
from ferry.checkpoint.restart import restart_hint
from ferry.checkpoint.sets import check_source_range, new_files, stand_in
from ferry.checkpoint.sources import SourcePlan, check_fit, pick
from ferry.checkpoint.start_offsets import Read, parse_start_offsets, start_reads
from ferry.errors import FerryError, UsageError
from ferry.migrate.decision import GroupDecision
from ferry.status import GroupStatus

# As Spark 4.2 wrote it for a query on a Kafka source, a rate source with no offset yet and a
# file source (taken from a local run; the metadata line shortened).
METADATA = (
    '{"batchWatermarkMs":0,"batchTimestampMs":1764130000000,"conf":{'
    '"spark.sql.shuffle.partitions":"8","spark.sql.streaming.stateStore.providerClass":'
    '"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"}}'
)
KAFKA = '{"events":{"2":29,"1":7,"0":23}}'
FILE = '{"logOffset":3}'
SPARK_FILE = f"v1\n{METADATA}\n{KAFKA}\n-\n{FILE}".encode()


def test_an_offsets_file_parses_into_its_header_metadata_and_sources():
    parsed = parse_offsets_file("cp/offsets/4", 4, SPARK_FILE)
    assert parsed.batch_id == 4 and parsed.version == "v1" and parsed.metadata == METADATA
    assert [s.text for s in parsed.sources] == [KAFKA, "-", FILE]
    assert [s.index for s in parsed.kafka_sources] == [0]
    assert parsed.kafka_sources[0].kafka == {"events": {2: 29, 1: 7, 0: 23}}


@pytest.mark.parametrize(
    "line",
    [
        '{"logOffset":3}',
        "17",
        '{"sourceVersion":1,"reservoirId":"x","index":-1}',
        "-",
        '{"t":{"x":1}}',
        '{"t":{}}',
        "{}",
    ],
)
def test_lines_of_other_sources_are_not_kafka(line):
    assert kafka_offsets(line) is None


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"t":{"0":1.5}}', "t[0] has offset 1.5"),
        ('{"t":{"0":true}}', "t[0] has offset true"),
        ('{"t":{"0":5,"1":-2}}', "t[1] has offset -2"),
        ('{"t":{"0":"7"}}', 't[0] has offset "7"'),
    ],
)
def test_a_kafka_line_with_a_negative_or_malformed_offset_is_a_one_line_usage_error(line, says):
    with pytest.raises(CheckpointFormatError) as err:
        parse_offsets_file("cp/offsets/3", 3, f"v1\n{{}}\n-\n{line}".encode())
    assert str(err.value).startswith(f"cp/offsets/3: source 1: {says}: "), err.value
    assert isinstance(err.value, UsageError) and "\n" not in str(err.value)


def test_a_kafka_line_with_several_topics():
    assert kafka_offsets('{"a":{"0":1},"b":{"0":0,"1":5}}') == {"a": {0: 1}, "b": {0: 0, 1: 5}}


def test_a_rewrite_keeps_every_other_byte_and_renames_the_topic():
    parsed = parse_offsets_file("f", 4, SPARK_FILE)
    line = translated_line(
        parsed.kafka_sources[0],
        {"events": "src.events"},
        {("src.events", 0): 160, ("src.events", 1): 0, ("src.events", 2): 58},
    )
    assert line == '{"src.events":{"0":160,"1":0,"2":58}}'
    out = render_offsets_file(parsed, {0: line})
    assert out == f"v1\n{METADATA}\n{line}\n-\n{FILE}".encode()
    # Nothing replaced: the very bytes Spark wrote (no trailing newline added).
    assert render_offsets_file(parsed, {}) == SPARK_FILE
    again = parse_offsets_file("f", 4, out)
    assert again.kafka_sources[0].kafka == {"src.events": {0: 160, 1: 0, 2: 58}}


# Format v2 (spark.sql.streaming.offsetLog.formatVersion=2, DataStreamReader.name()): each
# line keyed by its source's name.
V2_FILE = (
    f'v2\n{METADATA}\norders:{{"orders":{{"1":7,"0":23}}}}\nrate:-\nclicks:{{"clicks":{{"0":4}}}}'
).encode()


def test_a_v2_file_keys_its_sources_by_name_and_rewrites_byte_for_byte():
    parsed = parse_offsets_file("cp/offsets/2", 2, V2_FILE)
    assert parsed.version == "v2"
    assert [(s.key, s.text) for s in parsed.sources] == [
        ("orders", '{"orders":{"1":7,"0":23}}'),
        ("rate", "-"),
        ("clicks", '{"clicks":{"0":4}}'),
    ]
    assert [s.key for s in parsed.kafka_sources] == ["orders", "clicks"]
    assert render_offsets_file(parsed, {}) == V2_FILE
    line = translated_line(parsed.sources[2], {"clicks": "clicks"}, {("clicks", 0): 9})
    out = render_offsets_file(parsed, {"clicks": line})
    assert out == V2_FILE.replace(b'clicks:{"clicks":{"0":4}}', b'clicks:{"clicks":{"0":9}}')


def test_topics_keep_their_order_in_a_rewritten_line():
    parsed = parse_offsets_file("f", 1, b'v1\n{}\n{"b":{"0":1},"a":{"0":2}}')
    line = translated_line(
        parsed.sources[0], {"a": "x.a", "b": "x.b"}, {("x.a", 0): 20, ("x.b", 0): 10}
    )
    assert line == '{"x.b":{"0":10},"x.a":{"0":20}}'


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"v3\n{}\n-", "offsets format 'v3'"),
        (b'v2\n{}\n{"t":{"0":1}}', "line 3 is not NAME:OFFSET"),
        (b"hello", "no version line"),
        (b"v1", "no metadata line"),
        (b"v1\n{oops\n-", "metadata line is not JSON"),
        (b'v1\n{}\n{"events":{"0":2', "source 0's offsets are not JSON"),
        (b"v1\n{}\n", "source 0 has an empty line"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_damaged_or_unknown_files_are_one_line_usage_errors_naming_the_file(data, says):
    with pytest.raises(CheckpointFormatError, match=says) as err:
        parse_offsets_file("hdfs://nn/cp/offsets/9", 9, data)
    assert str(err.value).startswith("hdfs://nn/cp/offsets/9: ")
    assert isinstance(err.value, UsageError)  # exit code 2
    assert "\n" not in str(err.value)


def test_batch_ids_are_the_numeric_names_only():
    names = ["0", "1", ".1.crc", "10", "2", ".3.tmp", "3.ferry", "_x"]
    assert batch_ids(names) == [0, 1, 2, 10]


def test_a_committed_newest_batch_is_translated_with_the_one_before():
    # A DSv1 KafkaSource is asked for getBatch(offsets/2, offsets/3) on restart: both files.
    choice = choose_batches("cp", [0, 1, 2, 3], [0, 1, 2, 3])
    assert (choice.newest, choice.is_committed, choice.batches) == (3, True, (2, 3))
    assert choice.read_from == (3,)  # nothing of batch 3 is read again: no loss to check in 2
    assert "Spark reads offsets/2, offsets/3 and goes on after it" in choice.restart()


def test_an_uncommitted_newest_batch_is_translated_with_the_one_before():
    choice = choose_batches("cp", [5, 6, 7], [5, 6])
    assert (choice.newest, choice.is_committed, choice.batches) == (7, False, (6, 7))
    assert choice.read_from == (6, 7)
    assert "batch 7 not committed: Spark runs it again from offsets/6, offsets/7" in (
        choice.restart()
    )


def test_a_lone_committed_batch_is_translated_alone():
    choice = choose_batches("cp", [0], [0])
    assert (choice.newest, choice.is_committed, choice.batches) == (0, True, (0,))


def test_async_progress_tracking_ids_skip_and_the_one_before_is_the_previous_in_storage():
    # offsets 0, 2, 5 and commits 0, 2: Spark runs batch 5 again from offsets/2.
    choice = choose_batches("cp", [0, 2, 5], [0, 2])
    assert choice.batches == (2, 5) and not choice.is_committed


def test_a_commit_log_lagging_further_adds_the_newest_committed_batch():
    # A continuous query restarts at its newest committed epoch's offsets (later ones purged).
    choice = choose_batches("cp", [3, 4, 5, 6], [3])
    assert choice.batches == (3, 5, 6) and choice.newest_commit == 3


def test_a_first_batch_uncommitted_runs_again_from_the_start_offsets():
    choice = choose_batches("cp", [0], [])
    assert (choice.batches, choice.is_committed, choice.read_from) == ((0,), False, (0,))
    assert "from the sources' start offsets (sources/)" in choice.restart()


def test_a_lone_later_batch_uncommitted_or_an_empty_log_cannot_be_translated():
    # Spark itself cannot restart it: validateOffsetLogAndGetPrevOffset wants offsets/8.
    with pytest.raises(CheckpointFormatError, match="offsets/8 is not there: Spark cannot"):
        choose_batches("cp", [9], [8])
    with pytest.raises(CheckpointFormatError, match="no batch in offsets/"):
        choose_batches("cp", [], [])


# ------------------------------------------------ what earlier runs left (ferry.checkpoint.runs)


def offsets_file(line: str) -> bytes:
    return f"v1\n{METADATA}\n{line}\n-".encode()


ORIGINAL = {4: offsets_file('{"t":{"0":40,"1":41}}'), 5: offsets_file('{"t":{"0":50,"1":51}}')}
# the same topic names (MirrorMaker 2's IdentityReplicationPolicy), offsets 10 lower
TRANSLATED = {4: offsets_file('{"t":{"0":30,"1":31}}'), 5: offsets_file('{"t":{"0":40,"1":41}}')}


def judged(files: dict[int, bytes | None], newest: int = 5) -> runs.RunFiles:
    run = runs.RunFiles("migrate-checkpoint-x", dict(ORIGINAL), dict(TRANSLATED))
    runs.judge(run, newest, files.get)
    return run


def test_a_run_whose_files_are_all_translated_is_complete():
    assert judged(dict(TRANSLATED)).state == runs.RunState.COMPLETE


def test_a_run_killed_between_its_files_is_partial_with_the_rest_to_write():
    run = judged({4: ORIGINAL[4], 5: TRANSLATED[5]})
    assert run.state == runs.RunState.PARTIAL and run.remaining == [4]
    # with the same names, offsets/5's translation (40, 41) equals offsets/4's original:
    # still told apart by batch, never translated twice
    assert judged({4: TRANSLATED[4], 5: ORIGINAL[5]}).remaining == [5]
    # killed before the first file (a file missing is never written back:
    # test_checkpoint_real_time)
    assert judged(dict(ORIGINAL)).remaining == [4, 5]


def test_a_file_that_is_neither_original_nor_translation_is_changed():
    run = judged({4: offsets_file('{"t":{"0":1,"1":1}}'), 5: TRANSLATED[5]})
    assert run.state == runs.RunState.CHANGED and "offsets/4" in run.why


def test_a_newer_batch_going_on_from_the_translation_ran_on_it():
    newer = offsets_file('{"t":{"0":44,"1":41}}')  # at or after 40, 41 (translated)
    assert judged({**TRANSLATED, 6: newer}, newest=6).state == runs.RunState.RAN_ON_TRANSLATION


def test_a_newer_batch_behind_the_translation_ran_on_the_source():
    # The query was still running on the source: batch 6 from its own 50, 51... here behind
    # the translation on partition 1 only when the destination is ahead; write one that is.
    translated = {
        4: offsets_file('{"t":{"0":60,"1":61}}'),
        5: offsets_file('{"t":{"0":70,"1":71}}'),
    }
    run = runs.RunFiles("r", dict(ORIGINAL), translated)
    files = {**translated, 6: offsets_file('{"t":{"0":55,"1":52}}')}
    runs.judge(run, 6, files.get)
    assert run.state == runs.RunState.RAN_ON_SOURCE
    assert run.why == "t[0] is at 55 in offsets/6, before the translated 70"


def test_a_newer_batch_under_the_source_names_ran_on_the_source():
    original = {5: offsets_file('{"t":{"0":50}}')}
    translated = {5: offsets_file('{"copy.t":{"0":40}}')}
    run = runs.RunFiles("r", original, translated)
    runs.judge(run, 6, {**translated, 6: offsets_file('{"t":{"0":58}}')}.get)
    assert run.state == runs.RunState.RAN_ON_SOURCE and "reads t" in run.why


def test_positions_below_log_start_are_data_loss_and_past_log_end_are_refused():
    sets = {"offsets/5 source 0": {("t", 0): 3, ("t", 1): 9}, "offsets/4 source 0": {("t", 0): 8}}
    bounds = {("t", 0): (8, 100), ("t", 1): (0, 100)}
    lost = check_source_range(sets, bounds, "cp")
    assert list(lost) == ["offsets/5 source 0"]
    assert "t[0] 3..7 (5)" in lost["offsets/5 source 0"]
    assert "--allow-data-loss" in lost["offsets/5 source 0"]
    with pytest.raises(FerryError, match=r"t\[1\] is at 9, past the source's log end 5"):
        check_source_range(sets, {("t", 0): (0, 100), ("t", 1): (0, 5)}, "cp")
    # Only the sets Spark reads records from count their losses (offsets/5 checked only).
    assert check_source_range(sets, bounds, "cp", lambda n: n.startswith("offsets/4")) == {}


def decisions_for(*topics: str) -> dict[str, GroupDecision]:
    offsets = {(t, 0): 1 for t in topics}
    return {"s": GroupDecision("s", GroupStatus.READY, None, offsets)}


def test_the_restart_hint_names_what_a_subscribe_pattern_would_also_read():
    dst_only = ["heartbeats", "src.checkpoints.internal", "orders-archive"]
    lines = restart_hint(decisions_for("orders"), "d:9092", dst_only, "orders.*")
    assert lines[0].startswith("restart the query with kafka.bootstrap.servers=d:9092")
    assert "subscribePattern orders.* also matches orders-archive" in lines[1]
    assert "use ^(orders)$" in lines[1]
    missed = restart_hint(decisions_for("orders"), "d:9092", dst_only, "src\\..*")
    assert "does not match orders" in missed[1]
    exact = restart_hint(decisions_for("orders"), "d:9092", dst_only, "^ord[e]rs$")
    assert exact[1] == "subscribePattern ^ord[e]rs$ matches exactly these topics"
    # Spark finds the pattern in a name: unanchored, `orders` also reads orders-archive.
    found = restart_hint(decisions_for("orders"), "d:9092", dst_only, "orders")
    assert "also matches orders-archive" in found[1]
    # No pattern given: MirrorMaker 2's own topics on the destination are named.
    plain = restart_hint(decisions_for("orders"), "d:9092", dst_only, None)
    assert "heartbeats, src.checkpoints.internal (MirrorMaker 2's)" in plain[1]


def test_the_restart_hint_searches_the_pattern_as_the_session_does():
    # `finds` stands for Java's regex (restart.java_finder): \\p{Lower} is Java's, not re's.
    java = {"orders", "orders-archive"}.__contains__
    lines = restart_hint(decisions_for("orders"), "d:9092", ["orders-archive"], r"\p{Lower}+", java)
    assert "also matches orders-archive" in lines[1]


# --------------------------------------- start offsets, sources, stand-ins (item 3, 4 and 7)


@pytest.mark.parametrize("name", ["a" * 65, "x" * 300, "Orders_2", "0", "_"])
def test_source_names_of_any_length_of_sparks_characters_are_names(name):
    assert is_source_name(name)
    data = f'v2\n{{}}\n{name}:{{"t":{{"0":1}}}}'.encode()
    assert parse_offsets_file("f", 1, data).sources[0].key == name


@pytest.mark.parametrize("name", ["", "a-b", "a b", "é", "a.b"])
def test_other_names_are_not(name):
    assert not is_source_name(name)


def test_start_offsets_as_spark_2_1_wrote_them_and_damaged_ones():
    old = parse_start_offsets("s", 0, b'\x00{"t":{"0":5}}')  # no version line
    assert old.prefix == b"\x00" and old.kafka == {"t": {0: 5}}
    for data, says in [
        (b'v1\n{"t":{"0":5}}', "zero byte"),
        (b'\x00v2\n{"t":{"0":5}}', "format 'v2'"),
        (b'\x00v1\n{"t":{"0":-1}}', "t\\[0\\] has offset -1"),
        (b"\x00v1\n[1]", "not a Kafka source's"),
    ]:
        with pytest.raises(CheckpointFormatError, match=says) as err:
            parse_start_offsets("cp/sources/0/0", 0, data)
        assert str(err.value).startswith("cp/sources/0/0: ") and "\n" not in str(err.value)
    assert parse_start_offsets("s", 0, b"\x00v1\n{}").kafka == {}


def v2_file(**lines: str) -> bytes:
    return ("v2\n{}\n" + "\n".join(f"{k}:{v}" for k, v in lines.items())).encode()


def test_a_v2_source_first_seen_in_the_newest_uncommitted_batch_reads_its_start_offsets():
    # Source evolution: `late` joined in batch 3. Batch 3 not committed: Spark runs it again,
    # `early` from offsets/2, `late` from sources/late/0 (KafkaMicroBatchStream.initialOffset).
    files = {
        2: v2_file(early='{"a":{"0":5}}'),
        3: v2_file(early='{"a":{"0":9}}', late='{"b":{"0":4}}'),
    }
    parsed = {b: parse_offsets_file(f"offsets/{b}", b, d) for b, d in files.items()}
    uncommitted = choose_batches("cp", [0, 1, 2, 3], [0, 1, 2])
    assert start_reads(uncommitted, parsed) == {"late": Read.RECORDS}
    # Committed, a DSv1 source would check them (getBatch(None, offsets/3)); DSv2 not.
    committed = choose_batches("cp", [0, 1, 2, 3], [0, 1, 2, 3])
    assert start_reads(committed, parsed) == {"late": Read.PRIMED}


SOURCES = [
    SourcePlan(0, ("t0",), ("offsets/2",), None),
    SourcePlan(1, ("other", "t1"), ("offsets/2",), None),
]


def test_sources_are_picked_by_key_and_an_unknown_one_is_a_usage_error():
    assert pick(SOURCES, None) == {0, 1}
    assert pick(SOURCES, "1") == {1} and pick(SOURCES, " 0 , 1 ") == {0, 1}
    with pytest.raises(UsageError, match=r"no source named 7; .*0 \(t0\); 1 \(other, t1\)"):
        pick(SOURCES, "0,7")
    named = [SourcePlan("alpha", ("a",), (), None), SourcePlan("0", ("b",), (), None)]
    assert pick(named, "0") == {"0"}  # a v2 log's keys are names, even digits


@pytest.mark.parametrize(
    ("topics", "bounds", "says"),
    [
        ({"t0": 2}, None, "topic t1 is not on the source cluster"),
        ({"t0": 2, "t1": 1}, None, r"t1\[1\]: t1 has 1 partitions there"),
        (
            {"t0": 2, "t1": 2},
            {("t0", 0): (0, 99), ("t1", 0): (0, 99), ("t1", 1): (0, 30)},
            r"t1\[1\] is at 40, past the source's log end 30",
        ),
    ],
)
def test_a_source_that_does_not_fit_the_source_cluster_is_named_and_refused(topics, bounds, says):
    sets = {
        "offsets/2 source 0": {("t0", 0): 10},
        "offsets/2 source 1": {("t1", 0): 40, ("t1", 1): 40},
    }
    with pytest.raises(FerryError, match=says) as err:
        check_fit(sets, topics, bounds, "cp", SOURCES)
    message = str(err.value)
    assert message.startswith("cp/offsets/2: source 1 does not fit the source cluster")
    assert "leave it out with --sources 0" in message and "\n" not in message
    assert not isinstance(err.value, UsageError)  # exit 1
    fits = {("t0", 0): (0, 99), ("t1", 0): (0, 99), ("t1", 1): (0, 99)}
    check_fit(sets, {"t0": 2, "t1": 2}, fits, "cp", SOURCES)  # fits: nothing said


class Store:
    root = "cp"

    def name(self, relative: str) -> str:
        return f"cp/{relative}"


def test_a_set_spark_only_checks_stands_in_with_the_newest_translation():
    # Batch 3 committed: offsets/2 is only checked (DSv1 getBatch(offsets/2, offsets/3)), and
    # sources/0/0 too where a source has no offset in offsets/2. Unresolved, they take
    # offsets/3's translation: getBatch of an empty range reads and checks nothing.
    files = {
        2: offsets_file('{"t":{"0":20,"1":21}}').replace(b"\n-", b"\n-"),
        3: f'v1\n{METADATA}\n{{"t":{{"0":30,"1":31}}}}\n{{"u":{{"0":7}}}}'.encode(),
    }
    parsed = {b: parse_offsets_file(f"offsets/{b}", b, d) for b, d in files.items()}
    choice = choose_batches("cp", [0, 1, 2, 3], [0, 1, 2, 3])
    reads = start_reads(choice, parsed)
    assert reads == {1: Read.PRIMED}  # source 1 is `-` in offsets/2
    start = parse_start_offsets("s", 1, b'\x00v1\n{"u":{"0":0}}')
    cp = Checkpoint(Store(), None, choice, dict(files), parsed, reads, {1: start})
    ready = GroupStatus.READY
    decisions = {
        "offsets/2 source 0": GroupDecision("offsets/2 source 0", GroupStatus.UNRESOLVED, "x", {}),
        "offsets/3 source 0": GroupDecision("", ready, None, {("d.t", 0): 3, ("d.t", 1): 4}),
        "offsets/3 source 1": GroupDecision("", ready, None, {("d.u", 0): 5}),
        "sources/1/0 source 1": GroupDecision("", GroupStatus.UNRESOLVED, "y", {}),
    }
    said = stand_in(cp, decisions)
    assert len(said) == 2 and all(d.is_write for d in decisions.values())
    assert "Spark only checks it against batch 3 on restart" in said[0]

    class Topics:
        @staticmethod
        def destination_topic(topic: str) -> str:
            return f"d.{topic}"

    class Cfg:
        topics = Topics()

    out = new_files(cp, None, decisions, Cfg())
    new2 = out[2].decode().split("\n")
    assert new2[2] == '{"d.t":{"0":3,"1":4}}' and new2[3] == "-"  # offsets/3's line, whole
    assert out[3].decode().split("\n")[2:] == ['{"d.t":{"0":3,"1":4}}', '{"d.u":{"0":5}}']
    assert out["sources/1/0"] == b'\x00v1\n{"d.u":{"0":5}}'
    # Uncommitted, nothing stands in: Spark reads those records.
    cp.choice = choose_batches("cp", [0, 1, 2, 3], [0, 1, 2])
    assert (
        stand_in(cp, {"offsets/2 source 0": GroupDecision("", GroupStatus.UNRESOLVED, "", {})})
        == []
    )


def test_a_translated_start_offsets_file_is_translated_from_its_own_positions():
    start = parse_start_offsets("s", 0, b'\x00v1\n{"t":{"1":4,"0":2}}')
    choice = choose_batches("cp", [0], [])
    file = offsets_file('{"t":{"0":9,"1":9}}')
    parsed = {0: parse_offsets_file("offsets/0", 0, file)}
    cp = Checkpoint(Store(), None, choice, {0: file}, parsed, {0: Read.RECORDS}, {0: start})
    decisions = {
        "offsets/0 source 0": GroupDecision(
            "", GroupStatus.READY, None, {("t", 0): 8, ("t", 1): 7}
        ),
        "sources/0/0 source 0": GroupDecision(
            "", GroupStatus.READY, None, {("t", 0): 1, ("t", 1): 2}
        ),
    }

    class Cfg:
        class topics:  # noqa: N801
            destination_topic = staticmethod(lambda t: t)

    out = new_files(cp, None, decisions, Cfg())
    assert out["sources/0/0"] == b'\x00v1\n{"t":{"0":1,"1":2}}'


def test_a_run_that_rewrote_start_offsets_counts_them_among_its_files():
    originals = {**ORIGINAL, "sources/0/0": b'\x00v1\n{"t":{"0":0}}'}
    translations = {**TRANSLATED, "sources/0/0": b'\x00v1\n{"t":{"0":3}}'}
    run = runs.RunFiles("r", dict(originals), dict(translations))
    # killed after both offsets files, before the start offsets: PARTIAL, that one to write
    runs.judge(run, 5, {**TRANSLATED, "sources/0/0": originals["sources/0/0"]}.get)
    assert run.state == runs.RunState.PARTIAL and run.remaining == ["sources/0/0"]
    run = runs.RunFiles("r", dict(originals), dict(translations))
    runs.judge(run, 5, dict(translations).get)
    assert run.state == runs.RunState.COMPLETE
    assert runs.offsets_name("sources/0/0") == "sources/0/0" and runs.offsets_name(4) == "offsets/4"


def test_the_subscribe_pattern_is_a_java_regex_checked_by_the_session(spark):
    from ferry.checkpoint.restart import check_pattern, java_finder

    names = ["orders-a", "orders-1", "source.orders-b"]
    finds = java_finder(spark, r"^\p{Lower}+-\p{Alpha}$", names)  # Java's classes, not re's
    assert [n for n in names if finds(n)] == ["orders-a"]
    found = java_finder(spark, "orders", names)  # searched (Matcher.find), as Spark does
    assert all(found(n) for n in names)
    with pytest.raises(UsageError, match=r"not a Java regex: PatternSyntaxException: Unclosed"):
        check_pattern(spark, "orders(")


def test_the_checkpoint_options_go_with_checkpoint():
    import argparse

    from ferry.checkpoint import job

    parser = argparse.ArgumentParser()
    job.add_arguments(parser)
    for argv, says in [
        (["--sources", "0"], "--sources goes with --checkpoint"),
        (["--subscribe-pattern", "x"], "--subscribe-pattern goes with --checkpoint"),
    ]:
        args = parser.parse_args(argv)
        args.execute = args.rollback = None
        assert job.is_requested(args)
        with pytest.raises(UsageError, match=says):
            job.main(args, None, print, 60)
