"""Package exports imported on first use (PEP 562), so that importing one module of a package
does not load its heavy siblings: `ferry.kafka` would otherwise pull in pyspark with its Spark
data source, and `ferry.migrate` every stage, for a caller that wanted one pure rule.

A package lists where each name it exports lives and gets its module `__getattr__` from
`exports`; `from ferry import kafka` then `kafka.read(...)` reads as before. The homes are
module names in strings, which the import-graph test (tests/unit/test_structure.py) counts as
imports of the package.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def exports(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """The `__getattr__` of `package`: a name in `homes` (name → the module defining it) is
    imported from its module on first use and kept in the package; any other name is an
    AttributeError, so `from package import submodule` still imports the submodule.

    A name that is also the name of its home submodule (`ferry.migrate.discover`, the function
    in the module of that name) is imported now: importing the submodule later would bind the
    module in its place."""
    module = sys.modules[package]
    for name, home in homes.items():
        if home == f"{package}.{name}":
            setattr(module, name, getattr(importlib.import_module(home), name))

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(module, name, value)
        return value

    return __getattr__
