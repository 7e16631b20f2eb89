"""The web-text profile's readers of params.yaml (pipelines/recap/dvc.yaml): the subset
(`recap`, prh.recap.RecapConfig), the paraphrase (`recap.paraphrase`), the runs (`recap.train`:
its keys, every (arm, seed), each run's TrainConfig and StreamConfig over the flickr30k
profile's train section), the scoring (`recap.score`, with the wit1024 section's inputs) and
the audit's margins for its scores. The recap stages, the audit stage, `harness run` and
bench/recap.py read them through here."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.config.margins import load_margins
from harness.config.params import check_seeds, read_top_level
from prh.io import ContractError, read_yaml
from prh.paraphrase import PARAPHRASE


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
    names = [name for name, _ in load_recap(path).sources]
    if cfg.source not in names:
        raise ContractError(f"{path}: recap.paraphrase.source {cfg.source!r} is not one of "
                            f"recap.sources {names}")
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


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        out[key] = (_merged(out[key], value) if isinstance(value, Mapping)
                    and isinstance(out.get(key), Mapping) else copy.deepcopy(value))
    return out


def runs_of(train: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Every (arm, seed) of a checked `recap.train` section, arms first."""
    return [(arm, seed) for arm in train["arms"] for seed in train["seeds"]]


def configs(path: Path, arm: str, seed: int) -> tuple[Any, Any]:
    """(TrainConfig, StreamConfig) of `arm`'s web-text run with `seed`."""
    from prh.stream import StreamConfig
    from prh.train_config import TrainConfig

    raw = read_top_level(path)
    train = read_section(path, raw)
    base = (raw.get("flickr30k") or {}).get("train") or {}
    section = _merged({k: v for k, v in base.items() if k not in BY_SAMPLES},
                      train.get("encoder") or {})
    try:
        cfg = TrainConfig.from_dict({**section, "arm": arm, "seed": seed})
        stream = StreamConfig(sources=tuple(train["sources"]), samples=train["samples"],
                              warmup_samples=train["warmup_samples"],
                              first_checkpoint=train["first_checkpoint"],
                              per_decade=train["per_decade"], save_every=train["save_every"])
    except (TypeError, ValueError) as e:
        raise ContractError(f"{path}: recap.train: {e}") from e
    stream.validate()
    names = [name for name, _ in load_recap(path).sources]
    if load_paraphrase(path).model is not None:
        names.append(PARAPHRASE)
    if not set(stream.sources) <= set(names):
        raise ContractError(f"{path}: recap.train.sources {list(stream.sources)} names a source "
                            f"that is not there ({names}); name one of recap.sources, or "
                            f"{PARAPHRASE} with recap.paraphrase.model set")
    if arm not in train["arms"] or seed not in train["seeds"]:
        raise ContractError(f"{path}: recap.train has arms {train['arms']} and seeds "
                            f"{train['seeds']}, without {arm!r} seed {seed}")
    return cfg, stream


BENCHMARKS = ("wit1024", "flickr30k")


def read_score(path: Path) -> tuple[str, ...]:
    """params.yaml's `recap.score`: the benchmarks, each once, in BENCHMARKS."""
    names = (read_yaml(path, "run from the repository root").get("recap") or {}).get("score")
    if not isinstance(names, list) or not set(names) <= set(BENCHMARKS) \
            or len(set(names)) != len(names):
        raise ContractError(f"{path}: recap.score: a list of distinct benchmarks from "
                            f"{list(BENCHMARKS)} ([] trains without scoring), got {names!r}")
    return tuple(names)


def check_inputs(path: Path, names: tuple[str, ...]) -> Any:
    """The wit1024 section (harness.config.reference) when a benchmark is named, its inputs
    for those benchmarks checked present; None when none is."""
    from harness.config.reference import FLICKR_SPLITS, load_reference

    if not names:
        return None
    cfg = load_reference(path)
    cfg = dataclasses.replace(cfg, vision=cfg.vision[:1])  # the paper's reference encoder
    missing = []
    if "wit1024" in names:
        missing += [p for p in (cfg.data, cfg.vision[0].weights) if not p.exists()]
    if "flickr30k" in names:
        if cfg.flickr is None:
            raise ContractError(f"{path}: recap.score names flickr30k and wit1024.flickr is "
                                "not set; set it ({dataset, image}, after the flickr30k "
                                "profile's image stage) or drop flickr30k from recap.score")
        missing += [p for p in (cfg.flickr.dataset,
                                *(cfg.flickr.image / f"{s}.npz" for s in FLICKR_SPLITS))
                    if not p.exists()]
    if missing:
        raise ContractError(f"{path}: recap.score {list(names)} needs "
                            + ", ".join(str(p) for p in missing) + ", missing; download WIT-1024 "
                            "and DINOv2 (README, \"Public encoders on WIT-1024\"), or set "
                            "recap.score: [] to train without scoring")
    return cfg


def web_text_margins(path: Path) -> dict[str, float]:
    """params.yaml's `audit.margin` over the defaults, read without a training profile (the
    recap profile has none; its runs are scored at the paper's k)."""
    audit_section = read_top_level(path).get("audit") or {}
    return load_margins(audit_section.get("margin"), f"{path}: audit.margin")
