"""Observability: Prometheus metrics, logs, garbage-collector pauses and long passes over rows."""
