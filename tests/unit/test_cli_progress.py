"""Progress lines (stderr, flushed as said) and what they name for Spark's UI; `--version`."""

from __future__ import annotations

import importlib.metadata as md

import pytest

from ferry import session
from ferry.cli import ArgumentParser, Progress, add_common_arguments, version_line
from ferry.version import ferry_version


def test_a_progress_line_is_stamped_flushed_and_describes_the_jobs_after_it(capsys, monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(session, "describe_jobs", said.append)
    progress = Progress(True, "migrate", "migrate-20261126T060000Z-abc123")
    progress("source: reading 1145 ranges (52000 offsets), round 1")
    err = capsys.readouterr().err
    assert err.startswith("[") and err.endswith(
        "s] source: reading 1145 ranges (52000 offsets), round 1\n"
    )
    assert said == [
        "migrate run migrate-20261126T060000Z-abc123: source: reading 1145 ranges "
        "(52000 offsets), round 1"
    ]
    quiet = Progress(False, "groups describe")  # --quiet: no line, the description stays
    quiet("describing 3 groups")
    assert capsys.readouterr().err == ""
    assert said[-1] == "groups describe: describing 3 groups"
    quiet.run_id = "reset-20261126T060000Z-def456"  # a run id known later (groups --execute)
    quiet("resetting 3 groups over 6 partitions")
    assert (
        said[-1] == "groups describe run reset-20261126T060000Z-def456: resetting 3 groups "
        "over 6 partitions"
    )


def test_a_detail_line_is_stamped_but_leaves_the_jobs_description(capsys, monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(session, "describe_jobs", said.append)
    progress = Progress(True, "migrate", "migrate-20261126T060000Z-abc123")
    progress("writing 2 groups")
    progress.detail("committed g1 (32 partitions)")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[1].startswith("[")
    assert err[1].endswith("s] committed g1 (32 partitions)")
    assert said == ["migrate run migrate-20261126T060000Z-abc123: writing 2 groups"]
    Progress(False, "migrate").detail("committed g2 (32 partitions)")  # --quiet
    assert capsys.readouterr().err == "" and len(said) == 1


def test_version_names_ferry_and_pyspark(capsys):
    assert ferry_version() == md.version("ferry")
    assert version_line() == f"ferry {md.version('ferry')} (pyspark {md.version('pyspark')})"
    parser = ArgumentParser(prog="migrate")
    add_common_arguments(parser)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == version_line() + "\n"
