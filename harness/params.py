"""Load and validate `params.yaml` before anything runs.

One loader turns the active profile's sections into the typed configs of `prh` (each rejects
unknown keys and wrong types itself); this module adds the file name and the key path to any
error, so a bad parameter stops the pipeline with one message that names the file, the key and
the fix, before any training starts. It also computes the params hash every output carries and
the provenance table the report prints (harness/provenance.yaml).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

from prh.config import ARMS, dataclass_from_dict
from prh.io import ContractError, read_yaml

TRAIN_SECTIONS = ("data", "image", "train")  # what a trained text encoder depends on

PROFILES = ("world", "flickr30k")
SECTIONS = ("data", "image", "train", "eval", "theory")


class ParamsError(ContractError):
    """A parameter is missing, unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class EvalConfig:
    """Scoring knobs: k of mutual k-NN, bootstrap level/resamples/seed, fit-size curve points."""

    k: int = 10
    ci_level: float = 0.95
    n_resamples: int = 10_000
    bootstrap_seed: int = 0
    fit_sizes: tuple[int, ...] = ()

    def validate(self) -> None:
        if self.k < 1 or self.n_resamples < 1 or not 0 < self.ci_level < 1:
            raise ValueError("k and n_resamples must be >= 1 and ci_level in (0, 1)")
        if any(n < 2 for n in self.fit_sizes):
            raise ValueError(f"fit_sizes must be >= 2 pairs each, got {self.fit_sizes}")


@dataclass(frozen=True)
class TheoryConfig:
    """The threshold grid (rerun article) and the Theorem 3 bound check (audit article)."""

    n_worlds: int = 20
    n_states: int = 30
    k: int = 4
    n_points: int = 800
    bound_worlds: int = 300
    seed: int = 0

    def validate(self) -> None:
        sizes = (self.n_worlds, self.n_states, self.k, self.n_points, self.bound_worlds)
        if min(sizes) < 1 or self.k >= self.n_states:
            raise ValueError("n_worlds, n_states, k, n_points, bound_worlds must be >= 1 and "
                             f"k < n_states, got {sizes}")


@dataclass(frozen=True)
class Params:
    """The validated contents of params.yaml for the active profile."""

    path: Path
    profile: str
    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    sections: dict[str, dict[str, Any]]

    @property
    def hash(self) -> str:
        """Hash of everything a score depends on: the profile and its data, image, train and
        eval sections. Arms, seeds and theory are left out, so adding a seed leaves the
        existing runs valid."""
        return self.section_hash("data", "image", "train", "eval")

    def section_hash(self, *names: str) -> str:
        """sha256 (first 16 hex) of the canonical JSON of the profile and the named sections."""
        blob = json.dumps({"profile": self.profile, **{n: self.sections[n] for n in names}},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def train_config(self, arm: str, seed: int) -> Any:
        from prh.train_config import TrainConfig
        return _build(TrainConfig, {**self.sections["train"], "arm": arm, "seed": seed},
                      self.path, f"{self.profile}.train")

    def image_config(self) -> Any:
        from prh.image import ImageConfig
        return _build(ImageConfig, self.sections["image"], self.path, f"{self.profile}.image")

    def world_config(self) -> Any:
        from prh.world import WorldConfig
        section = self.sections["data"].get("world")
        if section is None:
            raise ParamsError(f"{self.path}: {self.profile}.data.world is missing; the world "
                              "profile needs the generated world's settings (see params.yaml)")
        return _build(WorldConfig, section, self.path, f"{self.profile}.data.world")

    def eval_config(self) -> EvalConfig:
        return _build(EvalConfig, self.sections["eval"], self.path, f"{self.profile}.eval")

    def theory_config(self) -> TheoryConfig:
        return _build(TheoryConfig, self.sections["theory"], self.path, f"{self.profile}.theory")


def _build(cls: type, section: dict[str, Any], path: Path, where: str) -> Any:
    """cls.from_dict(section) when it has one, else the strict shared loader; errors name the
    file and the key."""
    try:
        if hasattr(cls, "from_dict"):
            return cls.from_dict(section)
        cfg = dataclass_from_dict(cls, section, where)
        cfg.validate()
        return cfg
    except (ValueError, TypeError) as e:
        raise ParamsError(f"{path}: {where}: {e}; fix the value in {path.name}") from e


def load_params(path: str | Path = "params.yaml", *, validate: bool = True) -> Params:
    """Read params.yaml, select the profile, and (by default) build every config once."""
    path = Path(path)
    try:
        raw = read_yaml(path, "run from the repository root or pass --params")
    except ContractError as e:
        raise ParamsError(str(e)) from e
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level")
    profile = raw.get("profile")
    if profile not in PROFILES:
        raise ParamsError(f"{path}: profile: unknown profile {profile!r}; choose one of "
                          f"{list(PROFILES)} (e.g. `dvc exp run -S profile=world`)")
    arms = raw.get("arms")
    if not isinstance(arms, list) or not arms or any(a not in ARMS for a in arms) \
            or len(set(arms)) != len(arms):
        raise ParamsError(f"{path}: arms: expected a non-empty list of distinct arms from "
                          f"{list(ARMS)}, got {arms!r}")
    seeds = raw.get("seeds")
    if not isinstance(seeds, list) or not seeds or len(set(map(str, seeds))) != len(seeds) \
            or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ParamsError(f"{path}: seeds: expected a non-empty list of distinct integers >= 0, "
                          f"got {seeds!r}")
    block = raw.get(profile)
    if not isinstance(block, dict):
        raise ParamsError(f"{path}: {profile}: the profile's section is missing")
    missing = [s for s in SECTIONS if not isinstance(block.get(s), dict)]
    if missing:
        raise ParamsError(f"{path}: {profile}: missing section(s) {missing}")
    unknown = sorted(set(block) - set(SECTIONS))
    if unknown:
        raise ParamsError(f"{path}: {profile}: unknown section(s) {unknown}; valid: "
                          f"{list(SECTIONS)}")
    params = Params(path, profile, tuple(arms), tuple(seeds), {s: block[s] for s in SECTIONS})
    if validate:
        validate_params(params)
    return params


def validate_params(params: Params) -> None:
    """Build every config of the profile, so any bad value fails before a stage runs."""
    vocab = params.sections["data"].get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 10:
        raise ParamsError(f"{params.path}: {params.profile}.data.vocab_size: expected an integer "
                          f">= 10, got {vocab!r}")
    if params.profile == "world":
        params.world_config()
    params.image_config()
    for arm in params.arms:
        params.train_config(arm, params.seeds[0])
    params.eval_config()
    params.theory_config()


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; dataclasses are flattened through asdict."""
    if is_dataclass(obj):
        obj = asdict(obj)
    if not isinstance(obj, dict):
        return {prefix: obj}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


A0 = "rerun article (000_03f36f523aa97921.txt)"
A1 = "audit article (001_3694a0dfbde3a8c0.txt)"
OTHER_SOURCES: dict[str, tuple[str, str]] = {
    "eval.k": ("rerun_article", f"{A0}, 'Our rerun': mutual 10-NN"),
    "eval.ci_level": ("rerun_article", f"{A0}, 'Our rerun': 95% paired bootstrap intervals"),
    "theory.n_worlds": ("rerun_article", f"{A0}, 'What the paper proves': 20 random worlds"),
    "theory.n_states": ("rerun_article", f"{A0}, 'What the paper proves': 30 states"),
    "theory.k": ("rerun_article", f"{A0}, 'What the paper proves': k = 4"),
    "theory.n_points": ("rerun_article", f"{A0}, 'What the paper proves': 800 grid points"),
    "theory.bound_worlds": ("audit_article", f"{A1}, section 1: 300 random worlds"),
    "image.encoder": ("rerun_article", f"{A0}, 'Can a Text Model Match Photos': frozen DINOv2"),
}
PROVENANCE = Path(__file__).with_name("provenance.yaml")  # training defaults -> their source
SCALED_DOWN = "assumed: the world profile's scaled-down value (two CPU cores, minutes)"


def provenance(params: Params) -> list[dict[str, Any]]:
    """Every resolved hyperparameter of the profile with its source.

    Training defaults carry their source in harness/provenance.yaml (rerun article / upstream
    default / assumed); a world-profile value that differs from that default is marked as a
    scaled-down assumption. Everything not sourced is "assumed", said as such.
    """
    from prh.train_config import TrainConfig

    sources = read_yaml(PROVENANCE, "it ships with the harness package; reinstall it")
    defaults = flatten(TrainConfig())
    resolved = {"image": params.image_config(), "eval": params.eval_config(),
                "theory": params.theory_config(),
                "train": params.train_config(params.arms[0], params.seeds[0])}
    rows = []
    for key, value in sorted(flatten(resolved).items()):
        if key in ("train.arm", "train.seed", "train.views.max_len", "train.views.mask_id"):
            continue  # set per run, or derived from train.max_len and the tokenizer
        source, citation = OTHER_SOURCES.get(key, ("assumed", "chosen by us"))
        if key.startswith("train."):
            sub = key.removeprefix("train.")
            group = ".".join(key.split(".")[:2])  # train.views.n_global -> train.views
            citation = sources.get(key, sources.get(group, "assumed: chosen by us"))
            source = ("assumed" if citation.startswith("assumed") else
                      "rerun_article" if "rerun article" in citation else "upstream default")
            if params.profile == "world" and defaults.get(sub) != value:
                source, citation = "assumed", f"{SCALED_DOWN}; paper-scale default " \
                                              f"{defaults.get(sub)!r}: {citation}"
        elif params.profile == "world" and key.startswith("image."):
            source, citation = "assumed", "world profile: a small bad-view image JEPA " \
                                          "stands in for DINOv2"
        rows.append({"key": key, "value": value, "source": source, "citation": citation})
    return rows
