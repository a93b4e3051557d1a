"""`notebooks/ferry_overview.ipynb` runs top to bottom on tables the real jobs wrote, and its
migrations chart reads them right.

The data: on two local brokers a group whose destination offset a translator left 4 records
behind, an `audit` of it, then `migrate` as a scheduler runs it (dry run, execute, and the next
scheduled execute that finds the group already migrated); on one broker three `lag-snapshot`
runs around a consumer that advances, each followed by `lag-status` with a status table, and
`decode-offsets` over that broker's `__consumer_offsets`, which holds those commits (and the
other tests' on the shared broker).
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import matplotlib
import nbformat
import pytest
from nbclient import NotebookClient

from ferry import overview
from ferry.config import load_config
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from ..unit.test_overview import overlapping_texts
from .jobrunner import ROOT, run_job

# About eleven spark-submit runs and the notebook's own kernel: `make test-slow`, so that
# `make test` stays within 10 minutes.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

NOTEBOOK = ROOT / "notebooks" / "ferry_overview.ipynb"
BEHIND = 4  # records the translated offset lies behind the exact one


def _config(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.fixture(scope="module")
def tables(clusters, cluster, tmp_path_factory):
    src, dst = clusters
    tmp = tmp_path_factory.mktemp("overview")
    u = f"nb{int(time.time() * 1000) % 10**8}"
    topic, group = f"{u}-orders", f"{u}-billing"
    now = int(time.time() * 1000)
    records = [Record(b"k", f"v{i}".encode(), now - 60_000 + i) for i in range(30)]
    create_topics(src.config, {topic: 1})
    create_topics(dst.config, {topic: 1})
    produce(src.config, topic, 0, records)
    produce(dst.config, topic, 0, records[10:])  # destination offset = source offset - 10
    commit_offsets(src.config, group, {(topic, 0): 25})
    commit_offsets(dst.config, group, {(topic, 0): 15 - BEHIND})
    names = ("ledger", "history", "status", "commits", "audit")
    paths = {name: tmp / name for name in names}
    migrate = _config(
        tmp / "migrate.yaml",
        f"""\
        source: {{bootstrap.servers: "{src.bootstrap}"}}
        destination: {{bootstrap.servers: "{dst.bootstrap}"}}
        groups: {{include: ['{u}-.*']}}
        ledger: {{path: "{paths["ledger"]}"}}
        audit: {{path: "{paths["audit"]}"}}
        """,
    )
    result = run_job("audit", "--config", migrate, "--quiet")
    assert result.code == 0, result.stderr
    # a dry run, an execute, and the next scheduled execute: already migrated
    for extra in ((), ("--execute",), ("--execute",)):
        result = run_job("migrate", "--config", migrate, "--quiet", *extra)
        assert result.code == 0, result.stderr

    # lag history on the single broker: a consumer group that advances between snapshots
    create_topics(cluster.config, {topic: 2})
    for p in range(2):
        produce(cluster.config, topic, p, records)
    config = _config(
        tmp / "overview.yaml",
        f"""\
        cluster: {{bootstrap.servers: "{cluster.bootstrap}"}}
        groups: {{include: ['{u}-.*']}}
        ledger: {{path: "{paths["ledger"]}"}}
        audit: {{path: "{paths["audit"]}"}}
        history: {{path: "{paths["history"]}", status_path: "{paths["status"]}"}}
        offsets:
          commits_path: "{paths["commits"]}"
          groups_path: "{tmp / "group_metadata"}"
          quarantine_path: "{tmp / "quarantine"}"
        """,
    )
    for position in (5, 15, 30):
        commit_offsets(cluster.config, group, {(topic, 0): position, (topic, 1): position // 2})
        result = run_job("lag-snapshot", "--config", config, "--quiet")
        assert result.code == 0, result.stderr
        result = run_job("lag-status", "--config", config, "--quiet")
        assert result.code in (0, 1), result.stderr

    # The commits above, as the group coordinator recorded them.
    result = run_job("decode-offsets", "--config", config, "--quiet")
    assert result.code == 0, result.stderr
    return {"config": config, "group": group}


def test_overview_notebook_runs_top_to_bottom_with_plots(tables, monkeypatch, tmp_path):
    monkeypatch.setenv("FERRY_OVERVIEW_CONFIG", tables["config"])
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    try:
        client.execute()  # the kernel inherits this environment
    finally:  # kept for a look at the plots (and at the error, when a cell fails)
        nbformat.write(nb, tmp_path / NOTEBOOK.name)

    def text(cell) -> str:  # noqa: ANN001
        return "".join(str(o.get("data", {}).get("text/plain", "")) for o in cell.outputs)

    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    loaded = text(code_cells[0])
    for name in ("ledger", "history", "status", "commits", "audit"):
        assert f"'{name}': '" in loaded and "missing" not in loaded, loaded
    images = [o for c in code_cells for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 5, [c.source for c in code_cells]
    [migrations] = [text(c) for c in code_cells if c.source.startswith("groups_pdf")]
    for outcome in ("READY", "COMMITTED", "ALREADY_MIGRATED"):
        assert outcome in migrations, migrations
    [audit] = [text(c) for c in code_cells if c.source.startswith("latest_audit_pdf")]
    assert tables["group"] in audit, audit


@pytest.fixture(scope="module")
def loaded(spark, tables):
    matplotlib.use("Agg")
    paths = overview.paths_from_config(load_config(tables["config"]))
    return overview.load_tables(spark, paths)


def test_each_run_is_charted_by_its_groups_final_outcome(loaded, tables):
    groups = overview.migration_groups(loaded, 5)
    assert groups["group"].eq(tables["group"]).all()
    outcomes = list(zip(groups["is_executed"], groups["outcome"], strict=True))
    # the rerun that found the group migrated is a success, not "0 of 1 committed"
    assert outcomes == [(False, "READY"), (True, "COMMITTED"), (True, "ALREADY_MIGRATED")]

    fig = overview.plot_migrations(overview.migration_outcomes(loaded, 5))
    assert overlapping_texts(fig) == []
    ax = fig.axes[0]
    colours = [matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches if p.get_width()]
    styles = overview.OUTCOME_STYLES
    assert colours == [styles[s][1] for s in ("COMMITTED", "ALREADY_MIGRATED", "READY")]
    summaries = [t.get_text() for t in ax.texts if "/" in t.get_text()]
    assert summaries == ["1/1 ready", "1/1 done", "1/1 done"]


def test_audit_panel_counts_the_translation_behind(loaded, tables):
    [row] = overview.audit_latest(loaded).to_dict("records")
    assert (row["group"], row["behind"], row["delivered_again"], row["skipped"]) == (
        tables["group"],
        1,
        BEHIND,
        0,
    )
    fig = overview.plot_audit(overview.audit_over_time(loaded, 10))
    [line] = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == tables["group"]]
    assert list(line.get_ydata()) == [BEHIND]


def test_no_panel_prints_text_over_other_text(loaded):
    figures = {
        "lag": overview.plot_lag(overview.lag_over_time(loaded, 10)),
        "health": overview.plot_status_timeline(overview.status_timeline(loaded)),
        "migrations": overview.plot_migrations(overview.migration_outcomes(loaded, 5)),
        "commits": overview.plot_commit_rate(overview.commit_rate(loaded, 60), 10),
        "audit": overview.plot_audit(overview.audit_over_time(loaded, 10)),
    }
    assert {name: overlapping_texts(fig) for name, fig in figures.items()} == dict.fromkeys(
        figures, []
    )
