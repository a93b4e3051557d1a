"""Which groups a job acts on — the one group selection every job calls (`select_groups`:
a `--group` regex and the config's `groups.include` / `groups.exclude`) — and, for `groups
reset`, the `--topic` scope and the `--from-file` CSV (read and checked here, so the job only
hands its arguments over).

A regex selects a name when it fully matches it (`is_selected`, for `--group` and `--topic`
alike). Mistakes in what the user gave — a regex that does not compile, a malformed CSV line,
a scope naming a topic or partition the cluster does not have, a missing scope — are usage
errors (exit 2) naming the option; a selection that matches no group is `NoGroupsError` (exit
1: the cluster has nothing to act on), raised by `require_groups`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry import kafka
from ferry.config import Selection
from ferry.errors import NoGroupsError, UsageError
from ferry.groups.reset import ResetError, parse_offsets_csv, parse_scope, scoped_partitions
from ferry.keys import TopicPartitionKey

if TYPE_CHECKING:
    from ferry.kafka.cluster import Cluster

Scope = dict[str, tuple[int, ...] | None]  # topic → partitions (None: all of them)
FileOffsets = dict[str, dict[TopicPartitionKey, int]]  # group → offsets


def check_regex(option: str, pattern: str | None) -> None:
    """A command-line regex that does not compile is a usage error naming the option."""
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"{option} {pattern!r} is not a valid regex: {exc}") from None


def is_selected(name: str, pattern: str | None) -> bool:
    """Whether a user's regex (`--group`, `--topic`; None or empty: everything) selects `name`:
    it must match the whole name, as the config's include/exclude regexes do."""
    return not pattern or Selection((pattern,)).matches(name)


def select_groups(
    names: Iterable[str], pattern: str | None = None, selection: Selection | None = None
) -> list[str]:
    """Of `names`, in their order, the groups `pattern` selects (`is_selected`) and, when the
    config's `groups` selection is given, that its include/exclude regexes select too."""
    return [
        n
        for n in names
        if is_selected(n, pattern) and (selection is None or selection.matches(n))
    ]


def require_groups(
    names: list[str], subject: str, pattern: str | None = None, selection: Selection | None = None
) -> list[str]:
    """`names` when there are any; otherwise `NoGroupsError` saying what selected nothing:
    "no {subject} matches --group P and groups.include / groups.exclude" (only the criteria
    given; "no {subject} exists" when none was)."""
    if names:
        return names
    criteria = ([f"--group {pattern}"] if pattern else []) + (
        ["groups.include / groups.exclude"] if selection is not None else []
    )
    what = f"matches {' and '.join(criteria)}" if criteria else "exists"
    raise NoGroupsError(f"no {subject} {what}")


def matching_groups(
    cluster: Cluster, pattern: str | None, selection: Selection | None = None
) -> list[str]:
    """The cluster's groups that `select_groups` keeps; none is `NoGroupsError`."""
    check_regex("--group", pattern)
    names = select_groups(kafka.list_groups(cluster), pattern, selection)
    return require_groups(names, f"group on {cluster.name}", pattern, selection)


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
        names = select_groups(sorted(file_offsets), group_pattern)
        require_groups(names, f"group in {from_file}", group_pattern)
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
