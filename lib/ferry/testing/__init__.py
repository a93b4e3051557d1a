"""Helpers for tests and the demo: local brokers and test data producers."""
