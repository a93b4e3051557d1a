"""Files spark-submit.sh shipped with a job, as this process must open them: the run-time half
of `ferry.shipping` (which plans the shipment before the submit, from the config).

A leaf module, so `ferry.kafka.cluster` can resolve a client's file properties without
importing the planner, which reads the config (config → cluster → shipping → config was a
cycle).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

FILE_PROPERTIES = (
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.keystore.location",
    "ssl.crl.location",
    "sasl.kerberos.keytab",
)
SHIPPED_ENV = "FERRY_SHIPPED_FILES"


def local_paths(conf: Mapping[str, object]) -> dict[str, object]:
    """Client properties as this process must open them: a file property naming a file that
    spark-submit.sh shipped is its original path on a client-mode driver (where
    `$FERRY_SHIPPED_FILES` says), and stays the shipped name everywhere else (executors, a
    cluster-mode driver: the copy is in the working directory)."""
    shipped = os.environ.get(SHIPPED_ENV)
    if not shipped:
        return dict(conf)
    originals = json.loads(shipped)
    return {
        k: originals.get(v, v) if k in FILE_PROPERTIES and isinstance(v, str) else v
        for k, v in conf.items()
    }
