"""Every config of the profile built once, and the settings checked against each other, so a
bad value in params.yaml fails before any stage does work: `harness run` and the pipeline's
first stage (world) call `validate_params`. Each later stage builds only the configs it reads
(harness.config.params.Params.config)."""

from __future__ import annotations

from harness.config.params import EvalConfig, Params, ParamsError, ProbeConfig
from prh.data import KARPATHY_FLICKR30K
from prh.image import ImageConfig
from prh.train_config import TrainConfig
from prh.world import COLOURS, COUNTS, OBJECTS, RELATIONS, TEMPLATES, WorldConfig

# seeds behind the paper's numbers per profile: the Flickr30k table is a mean of three seeds
# (the rerun article, "Our rerun"); below 3 no between-seed variance is estimated and the
# audit cannot say "reproduced" (harness.stats.estimators.MIN_SEEDS_FOR_TRAINING_VARIANCE)
PAPER_SEEDS = {"flickr30k": 3}


def seed_warnings(params: Params) -> list[str]:
    """What a run with fewer seeds than the paper's cannot show, one line (empty when enough)."""
    need = PAPER_SEEDS.get(params.profile, 0)
    if len(params.seeds) >= need:
        return []
    return [f"{params.path}: seeds {list(params.seeds)}: the paper's {params.profile} numbers are "
            f"means of {need} seeds; with {len(params.seeds)} the audit estimates no training "
            f"variance and can say no \"reproduced\" (set `seeds: {list(range(need))}`)"]


def validate_params(params: Params) -> None:
    """Build every config of the profile, then check the combinations (`combination_problems`);
    ParamsError names the file, the key and the fix, one line per broken rule."""
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
    params.config(ProbeConfig, "probe")
    params.contamination_config()
    problems = combination_problems(params.profile, world, train[0], ev)
    if problems:
        raise ParamsError(f"{params.path}: settings that cannot work together:\n  "
                          + "\n  ".join(problems))


def split_sizes(profile: str, world: WorldConfig | None) -> tuple[int, int]:
    """(fit pairs, test pairs) the profile scores on: the world's n_fit and n_test, or the
    Karpathy split's 1,014 validation and 1,000 test pairs for Flickr30k."""
    if world is not None:
        return world.n_fit, world.n_test
    return KARPATHY_FLICKR30K["val"], KARPATHY_FLICKR30K["test"]


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
                         ev: EvalConfig) -> list[str]:
    """Settings valid alone that cannot work together, one message per rule: k against the
    test pairs (mutual k-NN needs k < n), the fit split against the map and the fit sizes,
    n_test against the world's distinct scenes, max_len against the world's longest caption,
    the pair-free pools against half the train split (prh.data.pairfree_halves)."""
    n_fit, n_test = split_sizes(profile, world)
    where = f"{profile}.data.world" if world is not None else "the Karpathy split"
    out = []
    if ev.k >= n_test:
        out.append(f"{profile}.eval.k = {ev.k}: mutual k-NN needs more than k test pairs and "
                   f"{where} has {n_test}; lower eval.k below {n_test}")
    if n_fit < 2:
        out.append(f"{profile}.data.world.n_fit = {n_fit}: the Procrustes map needs at least 2 "
                   "fit pairs; raise n_fit")
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
    half = (world.n_train if world is not None else KARPATHY_FLICKR30K["train"]) // 2
    if ev.pairfree_pool > half:
        out.append(f"{profile}.eval.pairfree_pool = {ev.pairfree_pool}: each pair-free pool is at "
                   f"most half the train photos of {where}, {half}; lower it to {half} or less")
    return out
