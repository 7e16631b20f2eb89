"""Where each hyperparameter of a run comes from: every resolved value of the profile with its
source (the rerun article, the audit article, an upstream default, or assumed by us), from the
data file harness/config/provenance.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.params import Params, flatten
from prh.image import ImageConfig
from prh.io import read_yaml
from prh.train_config import TrainConfig

SOURCES = Path(__file__).with_name("provenance.yaml")  # key -> where its default comes from
SCALED_DOWN = "assumed: the world profile's scaled-down value (two CPU cores, minutes)"
PER_RUN = ("train.arm", "train.seed", "train.views.max_len", "train.views.mask_id")


def source_of(citation: str) -> str:
    """The kind of source a citation names: assumed, audit_article, rerun_article or upstream
    default."""
    if citation.startswith("assumed"):
        return "assumed"
    if "audit article" in citation:
        return "audit_article"
    return "rerun_article" if "rerun article" in citation else "upstream default"


def provenance(params: Params) -> list[dict[str, Any]]:
    """Every resolved hyperparameter of the profile with its source.

    A world-profile training value that differs from the paper-scale default is marked as a
    scaled-down assumption, and the world's image encoder as a stand-in for DINOv2. A key
    harness/config/provenance.yaml does not source is "assumed: chosen by us", said as such.
    """
    sources = read_yaml(SOURCES, "it ships with the harness package; reinstall it")
    defaults = flatten(TrainConfig())
    resolved = {"image": params.config(ImageConfig, "image"), "eval": params.eval_config(),
                "theory": params.theory_config(),
                "train": params.config(TrainConfig, "train", arm=params.arms[0],
                                       seed=params.seeds[0])}
    rows = []
    for key, value in sorted(flatten(resolved).items()):
        if key in PER_RUN:
            continue  # set per run, or derived from train.max_len and the tokenizer
        group = ".".join(key.split(".")[:2])  # train.views.n_global -> train.views
        citation = sources.get(key, sources.get(group, "assumed: chosen by us"))
        source = source_of(citation)
        sub = key.removeprefix("train.")
        if params.profile == "world" and key.startswith("train.") and defaults.get(sub) != value:
            source, citation = "assumed", (f"{SCALED_DOWN}; paper-scale default "
                                           f"{defaults.get(sub)!r}: {citation}")
        elif params.profile == "world" and key.startswith("image."):
            source, citation = "assumed", ("world profile: a small bad-view image JEPA stands "
                                           "in for DINOv2")
        rows.append({"key": key, "value": value, "source": source, "citation": citation})
    return rows
