"""Streaming fairness monitor: windowed per-group fairness metrics for models in production."""

__version__ = "0.1.0"
