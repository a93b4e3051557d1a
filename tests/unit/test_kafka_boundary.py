"""Only `ferry.kafka` (and the test helpers in `ferry.testing`) talk to Kafka: no other module
under lib/ or jobs/ imports confluent_kafka, at the top or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = (ROOT / "lib" / "ferry" / "kafka", ROOT / "lib" / "ferry" / "testing")


def confluent_imports(source: str) -> list[int]:
    """Line numbers of every import of confluent_kafka (or a submodule) in `source`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        if any(n == "confluent_kafka" or n.startswith("confluent_kafka.") for n in names):
            lines.append(node.lineno)
    return lines


def test_the_scan_finds_imports_anywhere_in_a_module():
    source = (
        "import os\n"
        "from confluent_kafka import Consumer\n"
        "def f():\n"
        "    import confluent_kafka.admin as admin\n"
        "    class C:\n"
        "        def g(self):\n"
        "            from confluent_kafka.admin import AdminClient\n"
        "text = 'import confluent_kafka'\n"  # a string is not an import
        "import confluent_kafka_extra\n"  # another package
    )
    assert confluent_imports(source) == [2, 4, 7]


def test_only_ferry_kafka_and_the_test_helpers_import_confluent_kafka():
    offenders = []
    for path in sorted([*(ROOT / "lib").rglob("*.py"), *(ROOT / "jobs").rglob("*.py")]):
        if any(path.is_relative_to(allowed) for allowed in ALLOWED):
            continue
        for line in confluent_imports(path.read_text()):
            offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert not offenders, f"confluent_kafka imported outside ferry.kafka: {offenders}"
