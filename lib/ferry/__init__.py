"""Ferry: exact Kafka consumer-group offset migration and group tooling as PySpark jobs."""

import os
import sys

__version__ = "0.1.0"


def _prefer_installed_pyspark() -> None:
    """Let a job's driver import PySpark from the installed package, not from the zip that
    spark-submit puts first on its path, when the zip is that very package's copy
    (`<site-packages>/pyspark/python/lib/pyspark.zip`, pip's PySpark being SPARK_HOME).
    Python never writes bytecode for a zip it imports from, so every driver compiled PySpark
    and Py4J again: half a second a run. The installed package carries its bytecode. The zips
    stay on the path, last. Py4J moves only when its installed version is the zip's."""
    if "pyspark" in sys.modules:
        return
    zips = []
    for entry in sys.path:
        name = os.path.basename(entry)
        if name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith("-src.zip")):
            zips.append(entry)
    pyspark_zip = next((z for z in zips if os.path.basename(z) == "pyspark.zip"), None)
    if pyspark_zip is None:
        return
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(pyspark_zip))))
    site = os.path.dirname(package)
    if os.path.basename(package) != "pyspark" or not os.path.isfile(
        os.path.join(package, "__init__.py")
    ):
        return
    if not any(os.path.realpath(p) == site for p in sys.path if p and not p.endswith(".zip")):
        return
    moved = [pyspark_zip]
    for z in zips:
        version = os.path.basename(z)[len("py4j-") : -len("-src.zip")]
        if z != pyspark_zip and os.path.isfile(
            os.path.join(site, f"py4j-{version}.dist-info", "METADATA")
        ):
            moved.append(z)
    sys.path[:] = [p for p in sys.path if p not in moved] + moved


_prefer_installed_pyspark()
