"""The structure the layout promises, checked from the source so that it cannot slip unnoticed:

- pure modules import without pyspark or confluent_kafka (each in a fresh interpreter);
- the import graph of lib/ferry has no cycle — none either when imports made only for
  annotations count (`ferry.config` sits below `ferry.kafka`, not beside it) — and nothing in it
  imports `ferry.cli`;
- exit codes, the inactive rule and group selection by regex are each defined once;
- modules and jobs stay small enough to read.

The import graph is read with `ast`: every import statement anywhere in a module (at the top or
inside a function) is an edge, and so is a string naming a Ferry module (a package's lazy
exports, `ferry.lazy`). Imports under `if TYPE_CHECKING:` are not edges: they never run, and
annotations are strings here (`from __future__ import annotations`). Importing `a.b.c` also runs
`a/b/__init__.py`; that implicit parent import is not an edge (a package's own submodules
import each other while it initializes, as Python intends).
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "lib"
PACKAGE = LIB / "ferry"

# Importable without pyspark or confluent_kafka: the rules, and the leaves everything shares.
PURE_MODULES = (
    "ferry.errors",
    "ferry.keys",
    "ferry.status",
    "ferry.config",
    "ferry.hashing",
    "ferry.lazy",
    "ferry.output",
    "ferry.shipped",
    "ferry.write.rules",
    "ferry.groups.plans",  # copy, reset and delete plans, beside the write path, not in it
    "ferry.version",
    "ferry.migrate.decision",
    "ferry.migrate.ranges",
    "ferry.migrate.spans",
    "ferry.audit.compare",
    "ferry.groups.reset",
    "ferry.groups.selection",
    "ferry.lag.rules",
    "ferry.lag.burrow",
    "ferry.offsets_topic.decode",  # the `__consumer_offsets` decoder
    "ferry.kafka",  # the package itself: its exports load on first use
)
HEAVY = ("pyspark", "confluent_kafka")

MAX_MODULE_LINES = 450
MAX_JOB_LINES = 150


def module_name(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(tree: ast.AST, annotations: bool = False) -> Iterator[ast.AST]:
    """Every node, except those under `if TYPE_CHECKING:` (its `else:` branch runs) unless
    `annotations`."""
    for child in ast.iter_child_nodes(tree):
        if not annotations and isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                yield other
                yield from _nodes(other)
            continue
        yield child
        yield from _nodes(child, annotations)


def imported_names(path: Path, name: str, annotations: bool = False) -> set[str]:
    """The dotted names `path` (module `name`) imports, and Ferry module names in its strings.
    `from a import b` yields `a.b` (a submodule, or a name defined in `a`). `annotations`:
    imports under `if TYPE_CHECKING:` too."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in _nodes(ast.parse(path.read_text()), annotations):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            out |= {f"{base}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("ferry.") and node.value.replace(".", "").isidentifier():
                out.add(node.value)
    return out


@functools.cache
def import_graph(annotations: bool = False) -> dict[str, set[str]]:
    """Module → the Ferry modules it imports (see the module docstring for what counts;
    `annotations`: imports made only for type annotations too)."""
    known = modules()

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph = {}
    for name, path in known.items():
        targets = {
            resolve(d) for d in imported_names(path, name, annotations) if d.startswith("ferry")
        }
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py"))


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ------------------------------------------------------------------------------ the checkers


def test_the_graph_counts_imports_inside_functions_and_lazy_exports_not_type_checking(tmp_path):
    pkg = tmp_path / "ferry"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ferry.b import B\n"
        "else:\n"
        "    import json\n"
        "def f():\n"
        "    from ferry import c\n"
        "    from .d import g\n"
        "HOMES = {'x': 'ferry.e'}\n"
        "TEXT = 'see ferry.f for why'\n"
    )
    expected = {"typing.TYPE_CHECKING", "json", "ferry.c", "ferry.d.g", "ferry.e"}
    assert imported_names(pkg / "a.py", "ferry.a") == expected
    with_annotations = imported_names(pkg / "a.py", "ferry.a", annotations=True)
    assert with_annotations == expected | {"ferry.b.B"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


# ------------------------------------------------------------------------------------ purity


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_import_without_spark_or_the_kafka_client(module):
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({module!r})\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(LIB), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"importing {module} loads {done.stdout.strip()}"


# ----------------------------------------------------------------------------- import graph


def test_the_import_graph_of_lib_ferry_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_cycle_either_when_imports_for_annotations_count():
    # A cycle through `if TYPE_CHECKING:` runs nothing, but it is still two modules that each
    # need the other to be understood (ferry.config built clusters while ferry.kafka.cluster
    # read the config): one of them must sit below the other.
    cycle = find_cycle(import_graph(annotations=True))
    assert cycle is None, "import cycle (annotations included): " + " -> ".join(cycle or [])


def test_the_config_sits_below_everything_that_uses_it():
    graph = import_graph(annotations=True)
    config = {m for m in graph if m == "ferry.config" or m.startswith("ferry.config.")}
    reached = {t for m in config for t in graph[m]} - config
    assert reached <= {"ferry.errors"}, f"ferry.config imports {sorted(reached)}"


def test_nothing_in_lib_ferry_imports_the_cli():
    # The jobs' code lives in ferry.jobs (jobs/*.py and the `ferry` command both run it).
    graph = import_graph()
    callers = {"ferry.command"} | {m for m in graph if m.startswith("ferry.jobs.")}
    offenders = sorted(m for m, t in graph.items() if "ferry.cli" in t and m not in callers)
    assert offenders == [], f"ferry.cli is for the jobs; imported by {offenders}"


# ---------------------------------------------------------------------- one definition each


def _assigned_names(tree: ast.AST) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign | ast.AugAssign)
            else []
        )
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Name):
                    yield leaf.id, node.lineno


def test_exit_codes_are_defined_only_in_ferry_errors_and_imported_from_there():
    home = PACKAGE / "errors.py"
    assigned, imported = [], []
    for path in python_files(PACKAGE, ROOT / "jobs"):
        tree = ast.parse(path.read_text())
        if path != home:
            assigned += [
                f"{rel(path)}:{n} {name}"
                for name, n in _assigned_names(tree)
                if name.startswith("EXIT_")
            ]
        imported += [
            f"{rel(path)}:{node.lineno} from {node.module}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module != "ferry.errors"
            and any(alias.name.startswith("EXIT_") for alias in node.names)
        ]
    assert assigned == [], f"exit codes defined outside ferry.errors: {assigned}"
    assert imported == [], f"exit codes imported from elsewhere than ferry.errors: {imported}"


def test_the_inactive_rule_is_defined_once_in_status():
    home = PACKAGE / "status.py"
    offenders = []
    for path in python_files(PACKAGE, ROOT / "jobs"):
        if path == home:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in ("is_inactive", "is_active"):
                offenders.append(f"{rel(path)}:{node.lineno} def {node.name}")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr in ("EMPTY", "DEAD")
                and isinstance(node.value, ast.Name)
                and node.value.id == "GroupState"
            ) or (
                isinstance(node, ast.Constant) and node.value in ("EMPTY", "DEAD", "Empty", "Dead")
            ):
                offenders.append(f"{rel(path)}:{node.lineno} {ast.unparse(node)}")
    assert offenders == [], f"the inactive rule re-applied outside ferry.status: {offenders}"


# Where a regex is matched against names, and why there: config's include/exclude
# (`Selection.matches`, which `ferry.groups.selection` builds on) and, Spark-side, the history
# table's rows (`lag.history.filter_history`, a Java regex over a column), and a Structured
# Streaming query's subscribePattern, searched in topic names as Spark's Kafka source does (a
# Java regex, `checkpoint.restart.java_finder`).
REGEX_SELECTION_HOMES = {
    "lib/ferry/config/model.py": "fullmatch",
    "lib/ferry/lag/history.py": "rlike",
    "lib/ferry/checkpoint/restart.py": "rlike",
}


def test_group_selection_by_regex_is_defined_once():
    home = "lib/ferry/groups/selection.py"
    matching, selecting, defined = [], [], []
    for path in python_files(PACKAGE, ROOT / "jobs"):
        where = rel(path)
        for node in ast.walk(ast.parse(path.read_text())):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if name in ("fullmatch", "rlike") and path.is_relative_to(PACKAGE):
                if REGEX_SELECTION_HOMES.get(where) != name:
                    matching.append(f"{where}:{node.lineno} {name}")
            # `cfg.groups.matches(...)`: the config's group selection, applied by hand
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "matches"
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "groups"
                and where != home
            ):
                selecting.append(f"{where}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.FunctionDef) and node.name in (
                "select_groups",
                "is_selected",
                "require_groups",
            ):
                defined.append(f"{where}:{node.name}")
    assert matching == [], f"a name matched against a regex outside its homes: {matching}"
    assert selecting == [], f"groups selected without ferry.groups.selection: {selecting}"
    assert sorted(defined) == [
        f"{home}:is_selected",
        f"{home}:require_groups",
        f"{home}:select_groups",
    ], defined


def test_no_groups_matched_is_one_error_of_the_exit_1_family():
    from ferry.config import Selection
    from ferry.errors import FerryError, NoGroupsError
    from ferry.groups.selection import require_groups, select_groups

    assert issubclass(NoGroupsError, FerryError)
    assert select_groups(["a-1", "b-1", "a-2x"], "a-\\d") == ["a-1"]
    with pytest.raises(NoGroupsError, match="^no source group matches --group x and groups"):
        require_groups([], "source group", "x", Selection())
    classes = [
        f"{rel(path)}:{node.lineno}"
        for path in python_files(PACKAGE, ROOT / "jobs")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "NoGroupsError"
    ]
    assert [c.partition(":")[0] for c in classes] == ["lib/ferry/errors.py"], classes


# ------------------------------------------------------------------------------------- sizes


def test_modules_and_jobs_stay_small():
    long_modules = {
        rel(p): n
        for p in python_files(PACKAGE)
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    long_jobs = {
        rel(p): n
        for p in [*python_files(ROOT / "jobs"), *python_files(PACKAGE / "jobs")]
        if (n := len(p.read_text().splitlines())) > MAX_JOB_LINES
    }
    assert long_modules == {}, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    assert long_jobs == {}, f"jobs over {MAX_JOB_LINES} lines: {long_jobs}"


# ------------------------------------------------------------------------------------ version


def test_ferrys_version_is_setup_pys_wherever_it_is_read():
    # `ferry_version()` reads the installed metadata, and `ferry.__version__` where there is
    # none (the library zip a cluster runs): both must be setup.py's.
    import re

    from ferry import __version__
    from ferry.version import ferry_version

    declared = re.search(r'version="([^"]+)"', (ROOT / "setup.py").read_text())
    assert declared is not None, "setup.py names no version"
    assert __version__ == declared.group(1) == ferry_version()
