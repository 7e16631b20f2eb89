"""The web-text profile's readers of params.yaml (pipelines/recap/dvc.yaml): the subset
(`recap`, prh.recap.RecapConfig), the paraphrase (`recap.paraphrase`), the runs' section
(`recap.train`: its keys and every (arm, seed)) and the benchmarks scored (`recap.score`).
Light on purpose: every recap stage imports it, and DVC reruns a stage when a module it
imports changes; a run's configs are harness.config.recap_train's, the scoring inputs
harness.config.reference's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.config.params import check_seeds, read_top_level
from harness.records import names
from prh.io import ContractError, read_yaml


def load_recap(path: Path) -> Any:
    """params.yaml's `recap` section (prh.recap.RecapConfig), the file's top level checked."""
    from prh.recap import RecapConfig

    return RecapConfig.from_dict(read_top_level(path).get("recap"), f"{path}: recap")


def encoder_cut(path: Path) -> int:
    """The tokens of a text the web-text encoder sees: its max_len less [CLS] and [SEP]
    (prh.views), max_len from recap.train.encoder, else the flickr30k profile's train section
    (as `configs` merges them); one of them must say it."""
    raw = read_top_level(path)
    over = ((raw.get("recap") or {}).get("train") or {}).get("encoder") or {}
    base = (raw.get("flickr30k") or {}).get("train") or {}
    max_len = over.get("max_len", base.get("max_len"))
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 3:
        raise ContractError(f"{path}: flickr30k.train.max_len (or recap.train.encoder.max_len) "
                            f"is {max_len!r}; set the encoder's tokens per text (the "
                            "repository's params.yaml: 64), the subset counts texts against it")
    return max_len - 2


def load_paraphrase(path: Path) -> Any:
    """params.yaml's `recap.paraphrase` (prh.paraphrase.ParaphraseConfig), its source checked
    against recap.sources."""
    from prh.paraphrase import ParaphraseConfig

    cfg = ParaphraseConfig.from_dict((read_yaml(path, "run from the repository root")
                                      .get("recap") or {}).get("paraphrase"),
                                     f"{path}: recap.paraphrase")
    sources = [name for name, _ in load_recap(path).sources]
    if cfg.source not in sources:
        raise ContractError(f"{path}: recap.paraphrase.source {cfg.source!r} is not one of "
                            f"recap.sources {sources}")
    return cfg


KNOWN = {"arms", "seeds", "sources", "samples", "warmup_samples", "first_checkpoint",
         "per_decade", "save_every", "encoder"}
BY_SAMPLES = ("epochs", "warmup_epochs", "eval_every")  # a stream counts samples instead


def read_section(path: Path, raw: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """params.yaml's `recap.train` (from `raw`, the file already read, when given), its keys
    checked (the values by the configs built from it)."""
    raw = read_top_level(path) if raw is None else raw
    train = (raw.get("recap") or {}).get("train")
    if not isinstance(train, Mapping):
        raise ContractError(f"{path}: recap.train is missing; it holds {sorted(KNOWN)}")
    unknown, missing = sorted(set(train) - KNOWN), sorted(KNOWN - {"encoder"} - set(train))
    if unknown or missing:
        raise ContractError(f"{path}: recap.train: unknown key(s) {unknown}, missing key(s) "
                            f"{missing}; the keys are {sorted(KNOWN)}")
    check_seeds(train["seeds"], f"{path}: recap.train.seeds")
    counted = sorted(set(train.get("encoder") or {}) & set(BY_SAMPLES))
    if counted:
        raise ContractError(f"{path}: recap.train.encoder sets {counted}; a web-text run is "
                            "counted in samples: set recap.train.samples and warmup_samples")
    return dict(train)


def runs_of(train: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Every (arm, seed) of a checked `recap.train` section, arms first."""
    return [(arm, seed) for arm in train["arms"] for seed in train["seeds"]]


def read_score(path: Path) -> tuple[str, ...]:
    """params.yaml's `recap.score`: the benchmarks, each once, of names.WEB_TEXT_BENCHMARKS."""
    chosen = (read_yaml(path, "run from the repository root").get("recap") or {}).get("score")
    known = list(names.WEB_TEXT_BENCHMARKS)
    if not isinstance(chosen, list) or not set(chosen) <= set(known) \
            or len(set(chosen)) != len(chosen):
        raise ContractError(f"{path}: recap.score: a list of distinct benchmarks from {known} "
                            f"([] trains without scoring), got {chosen!r}")
    return tuple(chosen)


