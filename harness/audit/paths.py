"""Where each claim the run does not speak to can be rerun, and at what cost: the paths of
harness/audit/rerun_paths.yaml (data), picked per claim from its rule, data set and scale."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.audit.claims import Claim
from prh.io import read_yaml

PATHS_FILE = Path(__file__).with_name("rerun_paths.yaml")
# verdicts that leave a claim unmeasured on its own data: each gets the path that would measure it
WEB_TEXT_SCALES = ("web", "web_2m", "web_50m")  # the 33M encoder on one GPU: the recap profile
ELSEWHERE = ("not rerun", "not comparable", "pattern seen on another profile",
             "pattern not seen on another profile")


def load_paths(path: Path = PATHS_FILE) -> dict[str, Any]:
    return read_yaml(path, "it ships with the harness package; reinstall it")


def path_of(claim: Claim) -> str | None:
    """The cheapest path that reruns `claim`; None for a description with nothing to measure."""
    if claim.kind == "metadata" or claim.rule == "metadata":
        return None
    if claim.rule in ("evaluated", "ranking", "pairfree_bound"):
        return "wit1024"
    if claim.rule == "sts_arm" and claim.setup.get("scale") == "flickr":
        return "flickr30k"
    if claim.setup.get("dataset") == "flickr30k" and claim.setup.get("scale") == "flickr" \
            and not claim.setup.get("variant"):
        return "flickr30k"
    if claim.setup.get("dataset") == "wit_1024" and claim.setup.get("encoder") == "bert_s_33m" \
            and claim.setup.get("scale") in WEB_TEXT_SCALES:
        return "recap"
    return "unavailable"


def rerun_paths(claims: Mapping[str, Claim], rows: Sequence[Mapping[str, Any]],
                paths: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Per path, its label, command, what to obtain and cost, and the claims not measured on
    their own data (`ELSEWHERE`) it would rerun (with the models to download and their size in
    bf16 for the wit1024 path)."""
    spec = paths or load_paths()
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["verdict"] not in ELSEWHERE:
            continue
        name = path_of(claims[row["id"]])
        if name is None:
            continue
        entry = out.setdefault(name, {**spec["paths"][name], "claims": [], "models": {}})
        entry["claims"].append(row["id"])
        model = claims[row["id"]].setup.get("model")
        if model:
            entry["models"][model] = spec["models"].get(model)
    for entry in out.values():  # smallest download first; an unlisted size last
        entry["models"] = [f"{m} ({2 * b:.3g} GB in bf16)" if b else m for m, b in sorted(
            entry["models"].items(), key=lambda mb: (mb[1] is None, mb[1] or 0, mb[0]))]
    return out
