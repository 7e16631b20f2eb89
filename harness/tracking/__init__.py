"""MLflow: every run logged through here (training runs, final scores, per-arm results), and
the environment fingerprint a run carries."""
