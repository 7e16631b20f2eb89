"""Every config of the profile built once, and the settings checked against each other, so a
bad value in params.yaml fails before any stage does work: `harness run` and the pipeline's
first stage (world) call `validate_params`. Each later stage builds only the configs it reads
(harness.config.params.Params.config)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.params import EvalConfig, Params, ParamsError, ProbeConfig
from prh.data import KARPATHY_FLICKR30K, CaptionCorpus
from prh.image import ImageConfig
from prh.train_config import TrainConfig
from prh.world import COLOURS, COUNTS, OBJECTS, RELATIONS, TEMPLATES, TEXT_SOURCES, WorldConfig

# seeds behind the paper's numbers per profile: the Flickr30k table is a mean of three seeds
# (the rerun article, "Our rerun"); below 3 no between-seed variance is estimated and the
# audit cannot say "reproduced" (harness.stats.estimators.MIN_SEEDS_FOR_TRAINING_VARIANCE)
PAPER_SEEDS = {"flickr30k": 3}


def seed_warnings(params: Params) -> list[str]:
    """What a run with fewer seeds than the paper's cannot show, or with a seed count that is no
    look of the profile's seed plan, one line each (empty when neither)."""
    need = PAPER_SEEDS.get(params.profile, 0)
    out = []
    if len(params.seeds) < need:
        out.append(f"{params.path}: seeds {list(params.seeds)}: the paper's {params.profile} "
                   f"numbers are means of {need} seeds; with {len(params.seeds)} the audit "
                   "estimates no training variance and can say no \"reproduced\" (set "
                   f"`seeds: {list(range(need))}`)")
    looks = params.plan_config().looks
    if len(params.seeds) not in looks:
        out.append(f"{params.path}: seeds {list(params.seeds)}: {len(params.seeds)} seeds per arm "
                   f"is no look of {params.profile}.plan (looks {list(looks)}), so the audit "
                   "judges no planned claim; run a look's seeds (`harness next` sets them)")
    return out


def knob_keys() -> dict[str, list[str]]:
    """Every key a config of the code reads, by params.yaml section: params.yaml must hold each
    (a missing one would silently be the code's default, and DVC's `-S` refuses a key the file
    lacks). Arm and seed come from the matrix; of the views only VIEW_KEYS are settable (their
    max_len and mask_id come from train.max_len and the tokenizer)."""
    from harness.config.params import ContaminationConfig, PlanConfig, TheoryConfig, flatten
    from prh.train_config import VIEW_KEYS

    train = [k for k in flatten(TrainConfig()) if k not in ("arm", "seed")
             and not (k.startswith("views.") and k[6:] not in VIEW_KEYS)]
    return {"data": ["vocab_size"], "data.world": list(flatten(WorldConfig())),
            "image": list(flatten(ImageConfig())), "train": train,
            "eval": list(flatten(EvalConfig())), "probe": list(flatten(ProbeConfig())),
            "theory": list(flatten(TheoryConfig())),
            "contamination": list(flatten(ContaminationConfig())),
            "plan": list(flatten(PlanConfig()))}


def missing_knobs(profile: str, block: dict) -> list[str]:
    """The `knob_keys` the profile's section of params.yaml lacks (data.world: world only)."""
    from harness.config.params import flatten

    flat = flatten(block)
    return [f"{section}.{key}" for section, keys in knob_keys().items()
            if profile == "world" or section != "data.world"
            for key in keys if f"{section}.{key}" not in flat]


# Typo guards, not limits of the method: counts beyond these cost days of compute, rates and
# weights beyond them diverge or drown the loss, noise beyond them is all noise; each is almost
# always an extra zero (the paper's runs stay orders of magnitude below: lr 1e-3, weight
# decay .05, lamb .02, grad clip 1). Raise one here when you mean it.
LIMITS = {"data.vocab_size": 1_000_000, "train.epochs": 10_000, "probe.epochs": 10_000,
          "eval.n_resamples": 1_000_000, "eval.n_permutations": 100_000,
          "theory.bound_worlds": 1_000_000, "theory.n_points": 1_000_000,
          "train.lr": 10, "image.lr": 10, "train.weight_decay": 10, "image.weight_decay": 10,
          "train.lamb": 1_000, "image.lamb": 1_000, "train.grad_clip": 1_000_000,
          "data.world.colour_noise": 10, "data.world.pixel_noise": 10,
          "data.world.background": 10, "plan.arm_seed_cost": 1_000_000}
SEED_MAX = 2**32 - 1  # numpy's SeedSequence entropy words and torch's manual_seed both take this
# Any other integer: a count, a size or a width. None of the paper's is near 1e9 (its largest
# is the 940M images of its web corpus, which no knob here counts); beyond it a value is an
# extra zero that would allocate or loop for days before failing.
INT_MAX = 10**9


def value_problems(profile: str, block: dict) -> list[str]:
    """Every number of the profile's section checked alone: finite (no .inf or .nan), seeds
    in [0, 2**32), the `LIMITS` typo guards."""
    import math

    from harness.config.params import flatten

    out = []
    for key, value in flatten(block).items():
        items = value if isinstance(value, list) else [value]
        where = f"{profile}.{key}"
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            out.append(f"{where} = {value!r}: not a finite number; write a number")
        last = key.rsplit(".", 1)[-1]
        seed = last == "seed" or last.endswith("_seed")
        if seed and isinstance(value, int) and not isinstance(value, bool) \
                and not 0 <= value <= SEED_MAX:
            out.append(f"{where} = {value}: a seed is an integer in [0, {SEED_MAX}]")
        elif not seed and any(isinstance(v, int) and not isinstance(v, bool) and v > INT_MAX
                              for v in items):
            out.append(f"{where} = {value!r}: above {INT_MAX:,}, almost surely a typo; no count "
                       "or size of the method comes near it")
        limit = LIMITS.get(key)
        if limit is not None and isinstance(value, int | float) and value > limit:
            out.append(f"{where} = {value:,}: above {limit:,}, almost surely a typo; if you "
                       "mean it, raise LIMITS in harness/config/validate.py")
    return out


def validate_params(params: Params) -> None:
    """`validate_profile` for the active profile and then for every other training profile
    params.yaml holds, so a bad value in a profile not run now fails here too, not after a
    switch of profile."""
    from harness.config.params import PROFILES, load_params, read_top_level

    validate_profile(params)
    raw = read_top_level(params.path)
    for other in PROFILES:
        if other != params.profile and other in raw:
            validate_profile(load_params(params.path, other))


def validate_profile(params: Params) -> None:
    """Check every value alone (`value_problems`), build every config of the profile, refuse
    a missing knob (`missing_knobs`), then check the combinations (`combination_problems`);
    ParamsError names the file, the key and the fix, one line per broken rule."""
    problems = value_problems(params.profile, params.sections)
    if problems:
        raise ParamsError(f"{params.path}: bad value(s):\n  " + "\n  ".join(problems))
    vocab = params.sections["data"].get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 10:
        raise ParamsError(f"{params.path}: {params.profile}.data.vocab_size: expected an integer "
                          f">= 10, got {vocab!r}")
    world = (params.config(WorldConfig, "data", "world") if params.profile == "world" else None)
    params.config(ImageConfig, "image")
    train = [params.config(TrainConfig, "train", arm=arm, seed=params.seeds[0])
             for arm in params.arms]
    ev = params.eval_config()
    params.theory_config()
    probe = params.config(ProbeConfig, "probe")
    if params.profile == "world" and set(probe.text_sources) - set(TEXT_SOURCES):
        raise ParamsError(f"{params.path}: world.probe.text_sources = {list(probe.text_sources)}:"
                          f" the world's text sources are {list(TEXT_SOURCES)}")
    params.contamination_config()
    params.plan_config()
    missing = missing_knobs(params.profile, params.sections)
    if missing:
        raise ParamsError(f"{params.path}: {params.profile}: missing key(s) {missing}: a missing "
                          "key would silently be the code's default; copy them from the "
                          "repository's params.yaml")
    problems = combination_problems(params.profile, world, train[0], ev)
    if problems:
        raise ParamsError(f"{params.path}: settings that cannot work together:\n  "
                          + "\n  ".join(problems))


@dataclass(frozen=True)
class SplitSizes:
    """Photos per split the profile trains, fits and scores on, and where they come from."""

    train: int
    fit: int
    test: int
    where: str


def split_sizes(profile: str, world: WorldConfig | None) -> SplitSizes:
    """The sizes params.yaml alone implies: the world's n_train, n_fit and n_test, or Karpathy's
    Flickr30k split (29,000 train, 1,014 validation, 1,000 test photos)."""
    if world is not None:
        return SplitSizes(world.n_train, world.n_fit, world.n_test, f"{profile}.data.world")
    k = KARPATHY_FLICKR30K
    return SplitSizes(k["train"], k["val"], k["test"], "the Karpathy split")


def corpus_sizes(corpus: CaptionCorpus) -> SplitSizes:
    """The sizes of the caption file as read (train counts restval, Karpathy's convention)."""
    return SplitSizes(len(corpus.split("train")), len(corpus.split("val")),
                      len(corpus.split("test")), str(corpus.path))


def check_data(params: Params, corpus: CaptionCorpus) -> None:
    """The size rules of `combination_problems` against the caption file just read, so a set
    smaller than the one params.yaml assumes (a held-out Flickr30k miniature with the default
    pair-free pool) is refused right after reading it, before any image is embedded."""
    world = params.config(WorldConfig, "data", "world") if params.profile == "world" else None
    train = params.config(TrainConfig, "train", arm=params.arms[0], seed=params.seeds[0])
    problems = combination_problems(params.profile, world, train, params.eval_config(),
                                    corpus_sizes(corpus))
    if problems:
        raise ParamsError(f"{params.path}: settings that do not fit {corpus.path}:\n  "
                          + "\n  ".join(problems))


def world_scenes(world: WorldConfig) -> int:
    """Distinct hidden states of the world (prh.world.sample_scene): two distinct objects, a
    colour each, a count and a relation."""
    n_obj = world.n_objects
    return n_obj * (n_obj - 1) * world.n_colours ** 2 * world.n_counts * world.n_relations


def longest_caption_words(world: WorldConfig) -> int:
    """Words in the world's longest possible caption (prh.world.render_caption): the longest
    phrase in every slot of the longest template, plus `style_strength` filler words. Each word
    is at least one token, so max_len - 2 below this truncates captions."""
    def longest(bank: list[tuple], n: int) -> int:
        return max(len(str(p).split()) for entry in bank[:n] for p in entry[:3])

    slots = {"count": longest(COUNTS, world.n_counts), "ca": longest(COLOURS, world.n_colours),
             "cb": longest(COLOURS, world.n_colours), "oa": longest(OBJECTS, world.n_objects),
             "ob": longest(OBJECTS, world.n_objects), "rel": longest(RELATIONS, world.n_relations)}
    words = max(sum(slots.get(w.strip("{}"), 1) for w in t.split()) for t in TEMPLATES)
    return words + world.style_strength


def combination_problems(profile: str, world: WorldConfig | None, train: TrainConfig,
                         ev: EvalConfig, sizes: SplitSizes | None = None) -> list[str]:
    """Settings valid alone that cannot work together, one message per rule: k against the
    test pairs (mutual k-NN needs k < n), the fit split against the map and the fit sizes,
    n_test against the world's distinct scenes, max_len against the world's longest caption,
    the pair-free pools against half the train split (prh.data.pairfree_halves). `sizes`: the
    data's split sizes when it has been read (`corpus_sizes`), else what params.yaml implies."""
    sizes = sizes or split_sizes(profile, world)
    n_fit, n_test, where = sizes.fit, sizes.test, sizes.where
    out = []
    if ev.k >= n_test:
        out.append(f"{profile}.eval.k = {ev.k}: mutual k-NN needs more than k test pairs and "
                   f"{where} has {n_test}; lower eval.k below {n_test}")
    if n_fit < 2:
        out.append(f"{where} has {n_fit} fit pair(s): the Procrustes map needs at least 2; "
                   "raise data.world.n_fit or add validation photos")
    bad = [s for s in ev.fit_sizes if s > n_fit]
    if bad:
        out.append(f"{profile}.eval.fit_sizes {list(ev.fit_sizes)}: {bad} exceed the {n_fit} "
                   f"fit pairs of {where}; use sizes up to {n_fit}")
    if world is not None and world.n_test > world_scenes(world):
        out.append(f"{profile}.data.world.n_test = {world.n_test}: the world has only "
                   f"{world_scenes(world)} distinct scenes, so test pairs would repeat a scene "
                   "and retrieval could not tell them apart; lower n_test or add factors")
    if world is not None and longest_caption_words(world) > train.max_len - 2:
        out.append(f"{profile}.train.max_len = {train.max_len}: the world's longest caption has "
                   f"{longest_caption_words(world)} words (each at least one token) and a view "
                   f"holds max_len - 2 = {train.max_len - 2}; raise train.max_len or lower "
                   "data.world.style_strength")
    half = sizes.train // 2
    if ev.pairfree_pool > half:
        out.append(f"{profile}.eval.pairfree_pool = {ev.pairfree_pool}: each pair-free pool is at "
                   f"most half the train photos of {where}, {half}; lower it to {half} or less")
    return out
