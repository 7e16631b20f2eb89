"""Load and validate `params.yaml` before anything runs.

One loader turns the active profile's sections into the typed configs of `prh` (each rejects
unknown keys and wrong types itself); this module adds the file name and the key path to any
error, so a bad parameter stops the pipeline with one message that names the file, the key and
the fix, before any training starts. It also computes the params hash every output carries and
the provenance table the report prints (harness/config/provenance.yaml).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from harness.config.margins import MarginError, load_margins
from harness.records import names
from prh.align import PAIRFREE_INPUTS
from prh.config import ARMS, arm_section, dataclass_from_dict, did_you_mean
from prh.io import ContractError, read_yaml
from prh.pairfree import PairFreeConfig

TRAIN_SECTIONS = ("data", "image", "train")  # what a trained text encoder depends on

PROFILES = ("world", "flickr30k")
SECTIONS = ("data", "image", "train", "eval", "probe", "theory", "contamination", "plan")
EVAL_ONLY = ("wit1024",)  # evaluation-only profiles, each one section (harness.config.reference)
WEB_TEXT = ("recap",)  # the web-text profile's data section (prh.recap, harness.config.recap)
TOP_LEVEL = ("profile", "arms", "seeds", "audit", *PROFILES, *EVAL_ONLY, *WEB_TEXT)
AUDIT_KEYS = ("margin",)


class ParamsError(ContractError):
    """A parameter is missing, unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class EvalConfig:
    """Scoring knobs: k of mutual k-NN, bootstrap level/resamples/seed, fit-size curve points,
    permutations of the null that mutual k-NN and CKA are calibrated against (0: off)."""

    k: int = 10
    ci_level: float = 0.95
    n_resamples: int = 10_000
    bootstrap_seed: int = 0
    fit_sizes: tuple[int, ...] = ()
    n_permutations: int = 999
    gallery_sizes: tuple[int, ...] = ()  # test photos per pool; the whole split is always scored
    gallery_draws: int = 5               # random pools per size below the whole split
    pairfree_pool: int = 0               # train photos per side of the pair-free pools (0: off)
    pairfree: PairFreeConfig = field(default_factory=PairFreeConfig)  # its aligner (prh.pairfree)
    pairfree_inputs: str = "benchmark"   # how its rows are prepared (prh.align.item_rows)

    def validate(self) -> None:
        if self.k < 1:
            raise ValueError(f"k = {self.k}: mutual k-NN needs k >= 1 (the paper: 10)")
        if self.n_resamples < 1:
            raise ValueError(f"n_resamples = {self.n_resamples}: use at least 1 (10000 default)")
        if not 0 < self.ci_level < 1:
            raise ValueError(f"ci_level = {self.ci_level}: a level is a fraction in (0, 1), "
                             "e.g. 0.95 for 95%")
        if any(n < 2 for n in self.fit_sizes):
            raise ValueError(f"fit_sizes must be >= 2 pairs each, got {self.fit_sizes}")
        if any(n < 2 for n in self.gallery_sizes) or self.gallery_draws < 1:
            raise ValueError(f"gallery_sizes must be >= 2 photos each and gallery_draws >= 1, "
                             f"got {self.gallery_sizes} and {self.gallery_draws}")
        if self.pairfree_pool < 0:
            raise ValueError(f"pairfree_pool = {self.pairfree_pool}: use 0 (off) or more photos")
        if 0 < self.pairfree_pool < self.pairfree.clusters:
            raise ValueError(f"pairfree_pool = {self.pairfree_pool} < pairfree.clusters = "
                             f"{self.pairfree.clusters}: k-means needs a row per cluster")
        if self.pairfree_inputs not in PAIRFREE_INPUTS:
            raise ValueError(f"pairfree_inputs = {self.pairfree_inputs!r}: choose one of "
                             f"{list(PAIRFREE_INPUTS)}")
        if self.n_permutations != 0 and self.n_permutations < 19:  # prh.calibrate's minimum
            raise ValueError(f"n_permutations = {self.n_permutations}: use 0 (off) or at least "
                             "19, the fewest whose smallest p-value 1/(K+1) reaches .05")


@dataclass(frozen=True)
class ProbeConfig:
    """The probe stage's short trainings (harness.stages.probe): arms, seed, epochs, SIGReg
    weights; all assumed by us, and the report prints them beside each panel. No arms: off."""

    arms: tuple[str, ...] = ("good", "bad")
    seed: int = 0
    epochs: int = 5
    lambdas: tuple[float, ...] = (0.005, 0.02, 0.08)
    text_sources: tuple[str, ...] = ()  # good and bad trained on each (Table 7's design)
    source_epochs: int = 5              # their epochs

    def validate(self) -> None:
        if min(self.epochs, self.source_epochs) < 1:
            raise ValueError(f"epochs = {self.epochs}, source_epochs = {self.source_epochs}: "
                             "train the probes for at least 1 epoch")
        from prh.config import ARMS

        if set(self.arms) - set(ARMS):
            raise ValueError(f"arms = {list(self.arms)}: use arms from {list(ARMS)}")
        if not self.lambdas or min(self.lambdas) < 0:
            raise ValueError(f"lambdas = {list(self.lambdas)}: give one or more weights >= 0")
        if len(set(self.text_sources)) != len(self.text_sources) or not all(
                isinstance(s, str) and s for s in self.text_sources):
            raise ValueError(f"text_sources = {list(self.text_sources)}: distinct source names "
                             "(e.g. [people, captioner]), or [] for off")
        if self.text_sources and not {"good", "bad"} <= set(self.arms):
            raise ValueError(f"text_sources = {list(self.text_sources)} sets good views against "
                             f"bad views on each source: put good and bad in arms "
                             f"(now {list(self.arms)}), or set text_sources: []")


@dataclass(frozen=True)
class ContaminationConfig:
    """The contamination stage's thresholds (harness.data.contamination.scan): an evaluation
    caption sharing its first `prefix_chars` characters or an `ngram`-word n-gram with a
    training caption is flagged (GPT-3's 13-gram overlap, Brown et al. 2020, App. C), and two
    photos whose `hash_size`-squared-bit perceptual hashes differ in at most `max_distance`
    bits are near duplicates (assumed by us)."""

    prefix_chars: int = 40
    ngram: int = 13
    max_distance: int = 4
    hash_size: int = 8

    def validate(self) -> None:
        if min(self.prefix_chars, self.ngram, self.hash_size) < 1 or self.max_distance < 0:
            raise ValueError(f"prefix_chars, ngram, hash_size must be >= 1 and max_distance "
                             f">= 0, got {self.prefix_chars}, {self.ngram}, {self.hash_size}, "
                             f"{self.max_distance}")
        if self.max_distance >= self.hash_size ** 2:
            raise ValueError(f"max_distance = {self.max_distance}: every pair of "
                             f"{self.hash_size ** 2}-bit hashes would be a duplicate")


@dataclass(frozen=True)
class SeedSpread:
    """What the plan assumes of a metric: one seed's sd on the fixed test pairs, the test-pair
    se of a gap between two arms (what seeds cannot shrink), and where each comes from (an
    article, the paper, a measurement, an assumption: said in the plan)."""

    sd: float = 0.0
    source: str = ""
    gap_pair_se: float = 0.0
    gap_pair_source: str = ""


SPENDING = ("pocock", "obrien_fleming")  # harness.audit.plan.SPENT's alpha-spending functions


@dataclass(frozen=True)
class PlanConfig:
    """The seed plan registered before training (harness.audit.plan): the seeds per arm at each
    look (the last is the cap), the power aimed at, the miss "differs" is planned to catch (in
    margins), the alpha-spending function of each verdict across the looks, the seed sds
    assumed per metric (or a pilot's: a results.json and its seeds), the test-pair se of a gap,
    one arm-seed's cost, and the claims planned (none: every claim the profile judges from
    sampled runs)."""

    looks: tuple[int, ...] = (3,)
    power: float = 0.8
    differs_miss: float = 2.0
    spend_reproduced: str = "pocock"
    spend_differs: str = "obrien_fleming"
    r_at_1: SeedSpread = field(default_factory=SeedSpread)
    mknn: SeedSpread = field(default_factory=SeedSpread)
    pilot: str = ""
    pilot_seeds: tuple[int, ...] = ()
    arm_seed_cost: float = 0.0
    cost_unit: str = ""
    cost_source: str = ""
    claims: tuple[str, ...] = ()

    def validate(self) -> None:
        looks = list(self.looks)
        if not looks or looks[0] < 3:
            raise ValueError(f"looks = {looks}: the first look needs 3 seeds per arm or more "
                             "(below, no training variance: no verdict)")
        if any(b <= a for a, b in zip(looks, looks[1:], strict=False)):
            raise ValueError(f"looks = {looks}: the seeds per arm must increase look by look")
        if looks[-1] > 200:
            raise ValueError(f"looks = {looks}: a cap of {looks[-1]} seeds per arm is past 200")
        if not 0.5 <= self.power < 1:
            raise ValueError(f"power = {self.power}: aim at a power in [0.5, 1), e.g. 0.8")
        if self.differs_miss <= 1:
            raise ValueError(f"differs_miss = {self.differs_miss}: a miss \"differs\" can "
                             "catch is beyond the margin, so above 1 (margins), e.g. 2")
        for name in ("spend_reproduced", "spend_differs"):
            if getattr(self, name) not in SPENDING:
                raise ValueError(f"{name} = {getattr(self, name)!r}: choose one of "
                                 f"{list(SPENDING)}")
        for name in ("r_at_1", "mknn"):
            spread = getattr(self, name)
            if not (spread.sd < 1 and spread.gap_pair_se < 1):
                raise ValueError(f"{name}: sd {spread.sd} and gap_pair_se {spread.gap_pair_se} "
                                 "are spreads of a rate in [0, 1], so below 1")
            if not spread.sd > 0 and not self.pilot:
                raise ValueError(f"{name}.sd = {spread.sd}: a seed sd must be above 0 (or "
                                 "name a pilot)")
            if not spread.gap_pair_se > 0:
                raise ValueError(f"{name}.gap_pair_se = {spread.gap_pair_se}: a gap's "
                                 "test-pair se must be above 0")
            for value, source in ((spread.sd, "source"), (spread.gap_pair_se,
                                                          "gap_pair_source")):
                if value > 0 and not getattr(spread, source).strip():
                    raise ValueError(f"{name}.{source} is empty: say where {value} comes from")
        if bool(self.pilot) != bool(self.pilot_seeds):
            raise ValueError("pilot and pilot_seeds go together: the pilot's results.json and "
                             "the seeds of it to read the spread from")
        if self.arm_seed_cost < 0 or (self.arm_seed_cost > 0 and not self.cost_source.strip()):
            raise ValueError(f"arm_seed_cost = {self.arm_seed_cost}: a cost >= 0 with "
                             "cost_source saying where it comes from")


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
    margins: Mapping[str, float] = field(default_factory=names.default_margins)  # audit.margin

    @property
    def hash(self) -> str:
        """Hash of everything a score depends on: the profile and its data, image, train and
        eval sections. Arms, seeds and theory are left out, so adding a seed leaves the
        existing runs valid."""
        return self.section_hash("data", "image", "train", "eval")

    def section_hash(self, *names: str, **given: Mapping[str, Any]) -> str:
        """sha256 (first 16 hex) of the canonical JSON of the profile and the named sections
        (a section in `given` replaces params.yaml's)."""
        blob = json.dumps({"profile": self.profile,
                           **{n: given.get(n, self.sections[n]) for n in names}},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def train_hash(self, arm: str, train: Mapping[str, Any] | None = None) -> str:
        """What one arm's trained encoder depends on: the profile, its data and image sections
        and the train section as the arm reads it (`train`: the config stage's copy, by default
        params.yaml's; prh.config.arm_section), so a SIGReg knob leaves next-token's runs
        valid."""
        return self.section_hash(*TRAIN_SECTIONS, train=self._arm_train(arm, train))

    def arm_hash(self, arm: str, train: Mapping[str, Any] | None = None) -> str:
        """`train_hash` with the eval section: what one arm's scores depend on (the run files'
        params_hash)."""
        return self.section_hash(*TRAIN_SECTIONS, "eval", train=self._arm_train(arm, train))

    def _arm_train(self, arm: str, train: Mapping[str, Any] | None) -> dict[str, Any]:
        return arm_section(self.sections["train"] if train is None else train, arm)

    def config(self, cls: type, *keys: str, **extra: Any) -> Any:
        """`cls` built strictly from the profile's section at `keys` (e.g. "train", or "data",
        "world"), with `extra` keys set (a run's arm and seed); errors name the file and key."""
        section: Any = self.sections
        for i, key in enumerate(keys):
            if not isinstance(section, dict) or not isinstance(section.get(key), dict):
                where = ".".join((self.profile, *keys[:i + 1]))
                raise ParamsError(f"{self.path}: {where} is missing; add it to {self.path.name}"
                                  " (the repository's params.yaml shows every key)")
            section = section[key]
        return _build(cls, {**section, **extra}, self.path, ".".join((self.profile, *keys)))

    def config_from(self, cls: type, section: dict[str, Any], *keys: str, **extra: Any) -> Any:
        """`cls` built strictly from `section` (a stage's copy of the section at `keys`), with
        `extra` keys set; errors name the file and key as `config` does."""
        return _build(cls, {**section, **extra}, self.path, ".".join((self.profile, *keys)))

    def eval_config(self) -> EvalConfig:
        return self.config(EvalConfig, "eval")

    def theory_config(self) -> TheoryConfig:
        return self.config(TheoryConfig, "theory")

    def contamination_config(self) -> ContaminationConfig:
        return self.config(ContaminationConfig, "contamination")

    def plan_config(self) -> PlanConfig:
        return self.config(PlanConfig, "plan")


def _unknown(keys: Any, known: Sequence[str], where: str, path: Path) -> None:
    """ParamsError for the first key of `keys` not in `known`, with the closest known one."""
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise ParamsError(f"{path}: {where}unknown key {unknown[0]!r}"
                          f"{did_you_mean(unknown[0], known)}; valid: {list(known)}")


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


def read_top_level(path: Path) -> dict[str, Any]:
    """params.yaml read, its top-level keys and its profile's name checked (a training profile
    or the web-text one)."""
    try:
        raw = read_yaml(path, "run from the repository root or pass --params")
    except ContractError as e:
        raise ParamsError(str(e)) from e
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level")
    _unknown(raw, TOP_LEVEL, "", path)
    if raw.get("profile") not in (*PROFILES, *WEB_TEXT):
        raise ParamsError(f"{path}: profile: unknown profile {raw.get('profile')!r}; choose one "
                          f"of {[*PROFILES, *WEB_TEXT]} (e.g. `dvc exp run -S profile=world`)")
    return raw


SEED_LIMIT = 2 ** 32  # numpy's legacy seeding and many samplers take a 32-bit seed


def check_seeds(seeds: Any, where: str) -> list[int]:
    """`seeds` when it is a non-empty list of distinct integers in [0, 2^32); else ParamsError
    at `where` (params.yaml's `seeds`, `recap.train.seeds`), before any training starts."""
    if not isinstance(seeds, list) or not seeds or len(set(map(str, seeds))) != len(seeds) \
            or any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < SEED_LIMIT
                   for s in seeds):
        raise ParamsError(f"{where}: expected a non-empty list of distinct integers in [0, "
                          f"2^32), got {seeds!r}")
    return seeds


def load_params(path: str | Path = "params.yaml", profile: str | None = None) -> Params:
    """Read params.yaml and select the profile (`profile`: another training profile's sections
    instead of the active one's, for checking them): its arms, seeds and sections are checked
    here; each stage builds (and so validates) the configs it reads, and
    `harness.config.validate` builds them all, for every profile, before the pipeline runs."""
    path = Path(path)
    raw = read_top_level(path)
    profile = profile or raw["profile"]
    if profile in WEB_TEXT:
        raise ParamsError(f"{path}: profile: {profile} runs pipelines/{profile}/dvc.yaml "
                          "(`harness run`); this stage belongs to the training profiles "
                          f"{list(PROFILES)}")
    arms = raw.get("arms")
    if not isinstance(arms, list) or not arms or any(a not in ARMS for a in arms) \
            or len(set(arms)) != len(arms):
        raise ParamsError(f"{path}: arms: expected a non-empty list of distinct arms from "
                          f"{list(ARMS)}, got {arms!r}")
    seeds = check_seeds(raw.get("seeds"), f"{path}: seeds")
    block = raw.get(profile)
    if not isinstance(block, dict):
        raise ParamsError(f"{path}: {profile}: the profile's section is missing")
    missing = [s for s in SECTIONS if not isinstance(block.get(s), dict)]
    if missing:
        raise ParamsError(f"{path}: {profile}: missing section(s) {missing}")
    _unknown(block, SECTIONS, f"{profile}: ", path)
    if "audit" not in raw:
        raise ParamsError(f"{path}: audit: the section is missing; copy it (its margins) from "
                          "the repository's params.yaml")
    audit = raw.get("audit") or {}
    if not isinstance(audit, dict):
        raise ParamsError(f"{path}: audit: expected a mapping with {list(AUDIT_KEYS)}")
    _unknown(audit, AUDIT_KEYS, "audit: ", path)
    k = _build(EvalConfig, block["eval"], path, f"{profile}.eval").k
    try:
        margins = load_margins(audit.get("margin"), f"{path}: audit.margin", k)
    except MarginError as e:
        raise ParamsError(str(e)) from e
    return Params(path, profile, tuple(arms), tuple(seeds), {s: block[s] for s in SECTIONS},
                  margins)


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


def web_text_margins(path: Path) -> dict[str, float]:
    """params.yaml's `audit.margin` over the defaults, read without a training profile (the
    recap profile has none; its runs are scored at the paper's k)."""
    audit_section = read_top_level(path).get("audit") or {}
    return load_margins(audit_section.get("margin"), f"{path}: audit.margin")


def weights_path(image: Mapping[str, Any], raw: Path) -> Path:
    """The DINOv2 weights of a profile's `image` section: its `weights` when set, else
    RAW/weights/dinov2_vitb14.pth (the image stage's config validates the value; here it is
    only a path to look for)."""
    return Path(image.get("weights") or raw / "weights" / "dinov2_vitb14.pth")
