"""The flat params one (arm, seed) run used: what the train stage logs to MLflow and what
`harness diff` compares, whatever the source (run folders, git revisions, MLflow runs), so both
give the same params table under the same names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.config.params import Params, flatten
from prh.tokenizer import SPECIAL_TOKENS
from prh.train_config import TrainConfig


def train_config(params: Params, arm: str, seed: int) -> TrainConfig:
    """The one TrainConfig of an (arm, seed) run, from params.yaml's `train` section (its
    derived values: prh.train_config.resolve)."""
    return params.config(TrainConfig, "train", arm=arm, seed=seed)


def arm_train_config(params: Params, arm: str, seed: int, train: Mapping[str, Any]
                     ) -> TrainConfig:
    """The TrainConfig of an (arm, seed) run from the arm's own train section (the config
    stage's file), strict as `train_config`; the keys the arm does not read keep their
    defaults and are never used (prh.config.JEPA_ONLY)."""
    return params.config_from(TrainConfig, dict(train), "train", arm=arm, seed=seed)


def run_params(params: Params, arm: str, seed: int, cfg: TrainConfig | None = None
               ) -> dict[str, Any]:
    """profile, arm, seed and the profile's data/image/eval sections as params.yaml gives
    them, with `train.*` resolved as the run uses it: every default filled in, the keys the
    arm does not read left out (prh.config.arm_section), the views' max_len from
    train.max_len and their mask id the tokenizer's [MASK] (prh.train_config.view_config), so
    MLflow never shows the ViewConfig default (64) for a run at 48."""
    cfg = cfg or train_config(params, arm, seed)  # the stage passes the one it trains
    used = cfg.to_dict()  # what the arm reads: next-token has no lamb, views or projector
    if "views" in used:
        used["views"].update(max_len=cfg.max_len, mask_id=SPECIAL_TOKENS.index("[MASK]"))
    sections = {name: params.sections[name] for name in ("data", "image", "eval")}
    return {"profile": params.profile,
            **flatten({"train": {k: v for k, v in flatten(used).items()
                                 if k not in ("arm", "seed")}}),
            **flatten(sections), "arm": arm, "seed": seed}
