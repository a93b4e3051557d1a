"""Ferry: exact Kafka consumer-group offset migration and group tooling as PySpark jobs."""

__version__ = "0.1.0"
