"""Settings: params.yaml read and validated once (every section, every knob a stage reads), the
resolved config of one training run, and where each default comes from (provenance)."""
