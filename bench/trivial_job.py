"""The floor of `bench/fixed_cost.py`: a session and one tiny Spark action, nothing of Ferry.

Submitted with exactly the spark-submit command `spark-submit.sh` builds for a job (same
master, options, environment and log file), so what a small `migrate` costs above it is
Ferry's own fixed cost.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

if __name__ == "__main__":
    spark = SparkSession.builder.getOrCreate()
    print(spark.range(10).count())
