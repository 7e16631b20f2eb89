"""`harness diff`: two sets of runs (folders, git revisions, MLflow) compared metric by
metric with paired intervals, and its gates."""
