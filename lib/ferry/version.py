"""Ferry's version, from one place: what `--version` prints and what every ledger commit
records (`ferry.write.ledger.provenance`).

The installed distribution's version (setup.py's, through package metadata) when Ferry is
installed; on a cluster the library ships as a zip without metadata, and `ferry.__version__`
(which a unit test keeps equal to setup.py's) answers instead.
"""

from __future__ import annotations

import functools


@functools.cache
def ferry_version() -> str:
    from importlib import metadata

    from ferry import __version__

    try:
        return metadata.version("ferry")
    except metadata.PackageNotFoundError:
        return __version__
