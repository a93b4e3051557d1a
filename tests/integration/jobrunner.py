"""Run a job's main() in-process on the shared test Spark session, capturing its output."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_modules: dict[str, object] = {}


@dataclass
class JobResult:
    code: int
    stdout: str
    stderr: str


def load_job(name: str):  # noqa: ANN201
    if name not in _modules:
        path = ROOT / "jobs" / f"{name.replace('-', '_')}.py"
        spec = importlib.util.spec_from_file_location(f"ferry_job_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        _modules[name] = module
    return _modules[name]


def run_job(name: str, *argv: str) -> JobResult:
    from ferry.cli import run

    module = load_job(name)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(module.main, [str(a) for a in argv])
    return JobResult(code, out.getvalue(), err.getvalue())


def group_statuses(result: JobResult) -> dict[str, str]:
    """group → group_status from a `migrate -o json` run."""
    import json

    return {r["group"]: r["group_status"] for r in json.loads(result.stdout)}


def ledger_rows(path) -> list[dict]:  # noqa: ANN001 - str or Path
    """Every row of a ledger written by the deltalake path, as dicts."""
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def write_migrate_config(directory: Path, src, dst, prefix: str, **sections: dict) -> str:  # noqa: ANN001
    """A migrate config in `directory`: both clusters, groups and topics selected by
    `prefix-.*`, a ledger beside it, and each of `sections` merged into its section."""
    import yaml

    config: dict[str, dict] = {
        "source": {"bootstrap.servers": src.bootstrap},
        "destination": {"bootstrap.servers": dst.bootstrap},
        "groups": {"include": [f"{prefix}-.*"]},
        "topics": {"include": [f"{prefix}-.*"]},
        "ledger": {"path": str(Path(directory) / "ledger")},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    path = Path(directory) / "migrate.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def join_group(config: dict, group: str, topic: str):  # noqa: ANN201 - a confluent Consumer
    """A live member of `group` subscribed to `topic` (an active group), once it has its
    assignment or 20 s have passed."""
    import time

    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            **config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 30000,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    return consumer
