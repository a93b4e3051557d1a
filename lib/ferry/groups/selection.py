"""What a `groups` verb acts on: the groups a `--group` regex selects on the cluster and, for
`reset`, the `--topic` scope and the `--from-file` CSV (read and checked here, so the job only
hands its arguments over).

Mistakes in what the user gave — a regex that does not compile, a malformed CSV line, a scope
naming a topic or partition the cluster does not have, a missing scope — are usage errors
(exit 2) naming the option; a selection that matches no group is `NoGroupsError` (exit 1: the
cluster has nothing to act on).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ferry.cli import UsageError, check_regex
from ferry.groups.describe import NoGroupsError, select_groups
from ferry.groups.reset import ResetError, parse_offsets_csv, parse_scope, scoped_partitions
from ferry.kafka.admin import TopicPartitionKey
from ferry.kafka.cluster import Cluster

Scope = dict[str, tuple[int, ...] | None]  # topic → partitions (None: all of them)
FileOffsets = dict[str, dict[TopicPartitionKey, int]]  # group → offsets


def matching_groups(cluster: Cluster, pattern: str | None) -> list[str]:
    """The cluster's groups whose id fully matches `pattern` (all when None); none is an error."""
    check_regex("--group", pattern)
    names = select_groups(cluster, pattern)
    if not names:
        what = f"matches --group {pattern}" if pattern else "exists"
        raise NoGroupsError(f"no group on {cluster.name} {what}")
    return names


def read_offsets_file(path: str) -> FileOffsets:
    """A `--from-file` CSV (`topic,partition,offset` for one group, under the key "", or
    `group,topic,partition,offset`), read and parsed; any problem is a usage error."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read --from-file {path}: {exc.strerror}") from None
    try:
        return parse_offsets_csv(text, path)
    except ResetError as exc:
        raise UsageError(str(exc)) from None


@dataclass(frozen=True)
class ResetSelection:
    """The groups a reset covers, its --topic scope (None: --all-topics, or the file decides)
    and, with --from-file, each group's offsets from the file."""

    groups: list[str]
    scope: Scope | None
    file_offsets: FileOffsets | None


def reset_selection(
    cluster: Cluster,
    group_pattern: str | None,
    topic_args: Sequence[str] | None,
    all_topics: bool,
    from_file: str | None,
) -> ResetSelection:
    """`groups reset`'s --group, --all-topics / --topic and --from-file, resolved: a file of
    one group's offsets needs --group matching exactly one existing group; a file of several
    groups is narrowed by --group; without a file, --group selects the cluster's groups."""
    file_offsets = read_offsets_file(from_file) if from_file is not None else None
    if file_offsets is None and not (all_topics or topic_args):
        raise UsageError("reset needs a scope: --all-topics or --topic T[:P,...]")
    try:
        scope = parse_scope(topic_args) if topic_args else None
    except ResetError as exc:
        raise UsageError(str(exc)) from None
    if file_offsets is not None and "" in file_offsets:
        names = matching_groups(cluster, group_pattern) if group_pattern else []
        if len(names) != 1:
            raise UsageError(
                "a topic,partition,offset file is for one group: --group must match exactly one"
            )
        return ResetSelection(names, scope, {names[0]: file_offsets[""]})
    if file_offsets is not None:
        check_regex("--group", group_pattern)
        wanted = re.compile(group_pattern) if group_pattern else None
        names = sorted(g for g in file_offsets if wanted is None or wanted.fullmatch(g))
        if not names:
            raise NoGroupsError(f"no group in {from_file} matches --group {group_pattern}")
        return ResetSelection(names, scope, file_offsets)
    if not group_pattern:
        raise UsageError("reset needs --group REGEX")
    return ResetSelection(matching_groups(cluster, group_pattern), scope, None)


def check_scope(scope: Scope | None, topic_partitions: Mapping[str, int]) -> None:
    """A --topic scope naming a topic or partition the cluster does not have is a usage error,
    for every group alike."""
    if scope is None:
        return
    try:
        scoped_partitions(scope, {}, topic_partitions)
    except ResetError as exc:
        raise UsageError(str(exc)) from None
