"""runs/config/ARM.json, the config stage's hand-off to an arm's train and align stages: the
train section of params.yaml as that arm reads it (prh.config.arm_section)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.params import Params
from harness.records.schemas import ARM_TRAIN
from prh.config import arm_section
from prh.io import ContractError, read_json


def arm_train_doc(params: Params, arm: str) -> dict[str, Any]:
    """What the config stage writes for `arm`."""
    return {"schema": str(ARM_TRAIN), "profile": params.profile, "arm": arm,
            "train": arm_section(params.sections["train"], arm)}


def read_arm_train(path: Path, params: Params, arm: str) -> dict[str, Any]:
    """The train section in `path`, checked against the profile and arm it is read for;
    ContractError naming the stage to rerun."""
    doc = ARM_TRAIN.check(read_json(path), str(path))
    if (doc.get("profile"), doc.get("arm")) != (params.profile, arm):
        raise ContractError(f"{path}: written for profile {doc.get('profile')}, arm "
                            f"{doc.get('arm')}, read for {params.profile}, {arm}; rerun "
                            f"`dvc repro config@{arm}`")
    return dict(doc["train"])
