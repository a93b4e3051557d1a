"""`notebooks/ferry_overview.ipynb` runs top to bottom on tables the real jobs wrote.

The data: a small `migrate` run (dry run and execute) on two local brokers, three
`lag-snapshot` runs around a consumer that advances, then `lag-status` with a status table,
and `decode-offsets` over coordinator records in Kafka's binary layout.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from ..unit.test_offsets_topic import commit_key, commit_value
from .jobrunner import ROOT, run_job

pytestmark = pytest.mark.integration

NOTEBOOK = ROOT / "notebooks" / "ferry_overview.ipynb"


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
    produce(dst.config, topic, 0, records[10:])
    commit_offsets(src.config, group, {(topic, 0): 25})
    paths = {name: tmp / name for name in ("ledger", "history", "status", "commits")}
    migrate = _config(
        tmp / "migrate.yaml",
        f"""\
        source: {{bootstrap.servers: "{src.bootstrap}"}}
        destination: {{bootstrap.servers: "{dst.bootstrap}"}}
        groups: {{include: ['{u}-.*']}}
        ledger: {{path: "{paths["ledger"]}"}}
        """,
    )
    for extra in ((), ("--execute",)):
        result = run_job("migrate", "--config", migrate, "--quiet", *extra)
        assert result.code == 0, result.stderr

    # lag history on the single broker: a consumer group that advances between snapshots
    create_topics(cluster.config, {topic: 2})
    for p in range(2):
        produce(cluster.config, topic, p, records)
    overview = _config(
        tmp / "overview.yaml",
        f"""\
        cluster: {{bootstrap.servers: "{cluster.bootstrap}"}}
        groups: {{include: ['{u}-.*']}}
        ledger: {{path: "{paths["ledger"]}"}}
        history: {{path: "{paths["history"]}", status_path: "{paths["status"]}"}}
        offsets:
          commits_path: "{paths["commits"]}"
          groups_path: "{tmp / "group_metadata"}"
          quarantine_path: "{tmp / "quarantine"}"
        """,
    )
    for position in (5, 15, 30):
        commit_offsets(cluster.config, group, {(topic, 0): position, (topic, 1): position // 2})
        result = run_job("lag-snapshot", "--config", overview, "--quiet")
        assert result.code == 0, result.stderr
        result = run_job("lag-status", "--config", overview, "--quiet")
        assert result.code in (0, 1), result.stderr

    offsets_topic = f"{u}-offsets"
    create_topics(cluster.config, {offsets_topic: 1})
    produce(
        cluster.config,
        offsets_topic,
        0,
        [
            Record(commit_key(group, topic, 0), commit_value(3, n, "", now - 600_000 + n * 40_000))
            for n in range(12)
        ],
    )
    result = run_job("decode-offsets", "--config", overview, "--topic", offsets_topic, "--quiet")
    assert result.code == 0, result.stderr
    return overview


def test_overview_notebook_runs_top_to_bottom_with_plots(tables, monkeypatch, tmp_path):
    monkeypatch.setenv("FERRY_OVERVIEW_CONFIG", tables)
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
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    loaded = "".join(str(o.get("data", {}).get("text/plain", "")) for o in code_cells[0].outputs)
    for name in ("ledger", "history", "status", "commits"):
        assert f"'{name}': '" in loaded and "missing" not in loaded, loaded
    images = [
        o for c in code_cells for o in c.outputs if "image/png" in o.get("data", {})
    ]
    assert len(images) == 4, [c.source for c in code_cells]
    outcomes = "".join(str(o.get("data", {}).get("text/plain", "")) for o in code_cells[4].outputs)
    assert "MATCHED" in outcomes
