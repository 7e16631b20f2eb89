"""The reproducibility harness: pipeline stages, MLflow tracking, claims audit, reports, diffs."""

__version__ = "0.1.0"
