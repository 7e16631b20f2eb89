"""Commands around the DVC stages: `harness run` (validate, then `dvc repro`), `harness
matrix` (trainings side by side) and `harness launch` (SLURM)."""
