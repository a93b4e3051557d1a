"""Plain types shared across layers (a leaf module: it imports nothing of Ferry's)."""

from __future__ import annotations

TopicPartitionKey = tuple[str, int]  # (topic, partition)
