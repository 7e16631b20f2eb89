"""One web-text run's configs (pipelines/recap/dvc.yaml, recap_train@ARM-SEED): params.yaml's
`recap.train` over the flickr30k profile's train section (the paper trains the same 33M
encoder on both; `samples` replaces epochs), as prh.train_config.TrainConfig and
prh.stream.StreamConfig, their sources checked against the subset's and the paraphrase's."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.config.params import read_top_level
from harness.config.recap import BY_SAMPLES, load_paraphrase, load_recap, read_section
from prh.io import ContractError
from prh.paraphrase import PARAPHRASE


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        out[key] = (_merged(out[key], value) if isinstance(value, Mapping)
                    and isinstance(out.get(key), Mapping) else copy.deepcopy(value))
    return out


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
