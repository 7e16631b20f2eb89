"""params.yaml's `wit1024` section: the evaluation-only profile (`harness reference`) that scores
public encoders from the user's local copies on WIT-1024 and STS-B. Nothing trains; the section
is read and checked whole, paths included, before any model loads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.params import WEB_TEXT, ParamsError, _unknown, load_params, read_top_level
from prh.align import PAIRFREE_INPUTS
from prh.calibrate import MIN_PERMUTATIONS
from prh.features import DTYPES, PRECISIONS, PROTOCOLS
from prh.io import ContractError, read_yaml
from prh.layers import CLIP_MODES, SCORE_PRECISIONS

SECTION = "wit1024"
FLICKR_SPLITS = ("train", "val", "test")  # the image stage's files the 30k-pair map reads
FLICKR_KEYS = ("dataset", "image", "pairfree_seeds", "classes", "inputs")
# Table 4's inputs (prh.align.PAIRFREE_INPUTS): "benchmark" also embeds the images as
# unpaired-rosetta's DINOv2 rows (every image squashed to S x S, the mean of the final-norm
# tokens); "first-caption" reads the image stage's rows
CLASS_SETS = ("in100", "cifar10", "cifar100")  # prh.classsets readers, prh.zeroshot.TOP_K
PAIRFREE_PROFILE = "flickr30k"  # whose pools, aligner and image encoder Table 4's setting uses


@dataclass(frozen=True)
class TextEncoder:
    """A transformers folder; `name` is what the registry's claims call it (setup.model)."""

    name: str
    path: Path
    precision: str = "float32"


@dataclass(frozen=True)
class VisionEncoder:
    """A timm architecture and the user's weights; `name` as the registry's setup.reference."""

    name: str
    timm: str
    weights: Path
    image_size: int | None = None  # None: the model's own (DINOv2: 518)
    precision: str = "float32"


@dataclass(frozen=True)
class FlickrMap:
    """Table 3's last column: Flickr30k R@1 of a map fitted on every train pair and the val
    pairs (29,000 + 1,014), from the flickr30k profile's Karpathy file and image stage. With
    `pairfree_seeds`, Table 4's setting too: each text encoder's map fitted without pairs on
    the flickr30k profile's pair-free pools, with its aligner (`flickr30k.eval.pairfree_pool`,
    `flickr30k.eval.pairfree`, the trained arms' own), once per seed; with `classes`, each
    such map scored zero-shot on the class sets named (prh.classsets: in100, cifar10,
    cifar100 -> the user's folder), their images embedded by the flickr30k image encoder."""

    dataset: Path
    image: Path
    pairfree_seeds: tuple[int, ...] = ()
    classes: tuple[tuple[str, Path], ...] = ()  # (class set, folder), in CLASS_SETS order
    inputs: str = "benchmark"  # PAIRFREE_INPUTS


@dataclass(frozen=True)
class CocoSet:
    """Table 3's COCO column (prh.coco): the Karpathy JSON, the folder of its images (val2014
    for the test split), the split and how many of its photos (assumed: the 5,000 test
    photos), each with caption `caption_idx`."""

    dataset: Path
    images: Path
    split: str = "test"
    n_rows: int = 5000
    caption_idx: int = 0


COCO_KEYS = ("dataset", "images", "split", "n_rows", "caption_idx")


def _coco(raw: Any, where: str, path: Path) -> CocoSet:
    if not isinstance(raw, dict) or not {"dataset", "images"} <= set(raw):
        raise ParamsError(f"{where}: expected null or {{dataset: data/coco/dataset_coco.json, "
                          f"images: data/coco/val2014}}, got {raw!r}")
    _unknown(raw, COCO_KEYS, f"{SECTION}.coco: ", path)
    split = raw.get("split", "test")
    if split not in ("train", "val", "test"):
        raise ParamsError(f"{where}.split: {split!r}, choose one of ['train', 'val', 'test']")
    return CocoSet(Path(raw["dataset"]), Path(raw["images"]), split,
                   _int(raw, "n_rows", 5000, 2, where), _int(raw, "caption_idx", 0, 0, where))


@dataclass(frozen=True)
class ReferenceConfig:
    """The section's knobs; defaults are platonic-rep's and the calibrated-similarity paper
    runner's (provenance.yaml, `wit1024`)."""

    data: Path
    text: tuple[TextEncoder, ...]
    vision: tuple[VisionEncoder, ...]
    stsb: Path | None = None
    flickr: FlickrMap | None = None
    coco: CocoSet | None = None  # Table 3's COCO column, scored like WIT-1024
    arms: Path | None = None  # the train stage's runs/text: each ARM-sSEED scored on STS-B
    #                           and, with flickr.pairfree_seeds, in Table 4's setting
    caption_idx: int = 0
    n_rows: int = 1024
    k: int = 10
    q_outlier: float = 0.95
    clip_mode: str = "per_sample"
    protocol: str = "platonic-rep"  # prh.features.PROTOCOLS: the paper's is the first
    score_precision: str = "float32"  # prh.layers.SCORE_PRECISIONS: platonic-rep's float32
    n_permutations: int = 500
    alpha: float = 0.05
    seed: int = 0
    n_resamples: int = 10_000
    ci_level: float = 0.95
    batch_size: int = 32
    device: str = "cuda"


KEYS = ("data", "text", "vision", "stsb", "flickr", "coco", "arms", "caption_idx", "n_rows", "k",
        "q_outlier", "clip_mode", "protocol", "score_precision", "n_permutations", "alpha",
        "seed", "n_resamples", "ci_level", "batch_size", "device")


def _int(sec: dict[str, Any], key: str, default: int, lo: int, where: str) -> int:
    v = sec.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ParamsError(f"{where}.{key}: expected an integer >= {lo}, got {v!r}")
    return v


def _frac(sec: dict[str, Any], key: str, default: float, where: str, closed: bool) -> float:
    v = sec.get(key, default)
    ok = isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 1 + closed * 1e-12
    if not ok or (not closed and v >= 1):
        raise ParamsError(f"{where}.{key}: expected a fraction in (0, {1 if closed else '1)'}"
                          f"{']' if closed else ''}, got {v!r}")
    return float(v)


def _encoders(raw: Any, where: str, cls: type, keys: tuple[str, ...],
              required: tuple[str, ...]) -> tuple[Any, ...]:
    if not isinstance(raw, list):
        raise ParamsError(f"{where}: expected a list of mappings with {list(required)}")
    out, names = [], set()
    for i, rec in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(rec, dict):
            raise ParamsError(f"{at}: expected a mapping with {list(required)}, got {rec!r}")
        _unknown(rec, keys, f"{at}: ", Path(where.split(":")[0]))
        missing = [k for k in required if not rec.get(k)]
        if missing:
            raise ParamsError(f"{at}: missing {missing}")
        if rec["name"] in names:
            raise ParamsError(f"{at}: name {rec['name']!r} listed twice")
        names.add(rec["name"])
        precision = rec.get("precision", "float32")
        allowed = PRECISIONS if cls is TextEncoder else tuple(DTYPES)
        if precision not in allowed:
            raise ParamsError(f"{at}.precision: {precision!r}, choose one of {list(allowed)}")
        vals = {k: rec[k] for k in keys if k in rec}
        for k in ("path", "weights"):
            if k in vals:
                vals[k] = Path(vals[k])
        size = vals.get("image_size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                 or size < 14):
            raise ParamsError(f"{at}.image_size: expected null or an integer >= 14, got {size!r}")
        out.append(cls(**vals))
    return tuple(out)


def _flickr(raw: Any, where: str, path: Path) -> FlickrMap:
    if not isinstance(raw, dict) or not {"dataset", "image"} <= set(raw):
        raise ParamsError(f"{where}: expected null or {{dataset: the Karpathy JSON, image: the "
                          f"flickr30k image stage's folder}}, got {raw!r}")
    _unknown(raw, FLICKR_KEYS, f"{SECTION}.flickr: ", path)
    seeds = [] if raw.get("pairfree_seeds") is None else raw["pairfree_seeds"]
    if not isinstance(seeds, list) or len(set(map(str, seeds))) != len(seeds) or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ParamsError(f"{where}.pairfree_seeds: expected a list of distinct integers >= 0 "
                          f"(the aligner's seeds), got {seeds!r}")
    classes = {} if raw.get("classes") is None else raw["classes"]
    if not isinstance(classes, dict) or set(classes) - set(CLASS_SETS) or not all(
            isinstance(v, str) and v.strip() for v in classes.values()):
        raise ParamsError(f"{where}.classes: expected a mapping from {list(CLASS_SETS)} to the "
                          f"folder of each class set, got {classes!r}")
    if classes and not seeds:
        raise ParamsError(f"{where}.classes: zero-shot scores a pair-free map; set "
                          f"{SECTION}.flickr.pairfree_seeds too")
    inputs = raw.get("inputs", "benchmark")
    if inputs not in PAIRFREE_INPUTS:
        raise ParamsError(f"{where}.inputs: {inputs!r}, choose one of {list(PAIRFREE_INPUTS)}")
    return FlickrMap(Path(raw["dataset"]), Path(raw["image"]), tuple(seeds),
                     tuple((c, Path(classes[c])) for c in CLASS_SETS if c in classes), inputs)


def load_reference(path: str | Path = "params.yaml") -> ReferenceConfig:
    """The `wit1024` section, checked whole; the rest of params.yaml is validated too (the
    training profile's sections; under the web-text profile its top level)."""
    path = Path(path)
    if read_top_level(path)["profile"] not in WEB_TEXT:
        load_params(path)
    raw = read_yaml(path, "run from the repository root or pass --params")
    where = f"{path}: {SECTION}"
    sec = raw.get(SECTION)
    if not isinstance(sec, dict):
        raise ParamsError(f"{where}: the section is missing; the repository's params.yaml "
                          "shows every key")
    _unknown(sec, KEYS, f"{SECTION}: ", path)
    if not sec.get("data"):
        raise ParamsError(f"{where}.data: the WIT-1024 folder is not set")
    clip_mode = sec.get("clip_mode", "per_sample")
    if clip_mode not in CLIP_MODES:
        raise ParamsError(f"{where}.clip_mode: {clip_mode!r}, choose one of {list(CLIP_MODES)}")
    protocol = sec.get("protocol", "platonic-rep")
    if protocol not in PROTOCOLS:
        raise ParamsError(f"{where}.protocol: {protocol!r}, choose one of {list(PROTOCOLS)}")
    score_precision = sec.get("score_precision", "float32")
    if score_precision not in SCORE_PRECISIONS:
        raise ParamsError(f"{where}.score_precision: {score_precision!r}, choose one of "
                          f"{list(SCORE_PRECISIONS)}")
    n_perm = _int(sec, "n_permutations", 500, 0, where)
    if 0 < n_perm < MIN_PERMUTATIONS:
        raise ParamsError(f"{where}.n_permutations = {n_perm}: use 0 (off) or at least "
                          f"{MIN_PERMUTATIONS}, the fewest whose smallest p-value reaches .05")
    text = _encoders(sec.get("text", []), f"{where}.text", TextEncoder,
                     ("name", "path", "precision"), ("name", "path"))
    vision = _encoders(sec.get("vision", []), f"{where}.vision", VisionEncoder,
                       ("name", "timm", "weights", "image_size", "precision"),
                       ("name", "timm", "weights"))
    if not text or not vision:
        raise ParamsError(f"{where}: list at least one text and one vision encoder")
    n_rows = _int(sec, "n_rows", 1024, 2, where)
    k = _int(sec, "k", 10, 1, where)
    if k >= n_rows - 1:
        raise ParamsError(f"{where}.k = {k}: mutual k-NN needs k < n_rows - 1 = {n_rows - 1}")
    flickr = sec.get("flickr")
    if flickr is not None:
        flickr = _flickr(flickr, f"{where}.flickr", path)
    coco = None if sec.get("coco") is None else _coco(sec["coco"], f"{where}.coco", path)
    if coco and k >= coco.n_rows - 1:
        raise ParamsError(f"{where}.k: mutual k-NN needs k < coco.n_rows - 1 = "
                          f"{coco.n_rows - 1}")
    if sec.get("arms") and not sec.get("stsb") and not (flickr and flickr.pairfree_seeds):
        raise ParamsError(f"{where}.arms: the trained arms are scored on STS-B and on Table "
                          f"4's pair-free setting; set {SECTION}.stsb to the STS-B test file "
                          f"or {SECTION}.flickr.pairfree_seeds")
    device = sec.get("device", "cuda")
    if not isinstance(device, str) or not device:
        raise ParamsError(f"{where}.device: expected a torch device name such as cuda or cpu")
    return ReferenceConfig(
        data=Path(sec["data"]), text=text, vision=vision,
        stsb=Path(sec["stsb"]) if sec.get("stsb") else None, flickr=flickr, coco=coco,
        arms=Path(sec["arms"]) if sec.get("arms") else None,
        caption_idx=_int(sec, "caption_idx", 0, 0, where), n_rows=n_rows, k=k,
        q_outlier=_frac(sec, "q_outlier", 0.95, where, closed=True), clip_mode=clip_mode,
        protocol=protocol, score_precision=score_precision,
        n_permutations=n_perm, alpha=_frac(sec, "alpha", 0.05, where, closed=False),
        seed=_int(sec, "seed", 0, 0, where), n_resamples=_int(sec, "n_resamples", 10_000, 1, where),
        ci_level=_frac(sec, "ci_level", 0.95, where, closed=False),
        batch_size=_int(sec, "batch_size", 32, 1, where), device=device)


def missing_paths(cfg: ReferenceConfig) -> list[str]:
    """Every data folder, model folder and weights path the section names that is not there."""
    paths = [cfg.data, *(t.path for t in cfg.text), *(v.weights for v in cfg.vision)]
    paths += [cfg.stsb] if cfg.stsb else []
    paths += [cfg.coco.dataset, cfg.coco.images] if cfg.coco else []
    paths += [cfg.arms] if cfg.arms else []
    made = []  # outputs of the flickr30k profile's image stage, which no download gives
    if cfg.flickr:
        made = [cfg.flickr.image / f"{s}.npz" for s in FLICKR_SPLITS]
        paths += [cfg.flickr.dataset, *(p for _, p in cfg.flickr.classes)]
        made += [cfg.flickr.image / "pool_images.npz"] if cfg.flickr.pairfree_seeds and \
            cfg.flickr.inputs == "first-caption" else []
    return [str(p) for p in paths if not p.exists()] + [
        f"{p} (made by the image stage of a {PAIRFREE_PROFILE} run: `dvc repro image` "
        f"with `profile: {PAIRFREE_PROFILE}`)" for p in made if not p.exists()]


def recap_score_inputs(path: Path, names: tuple[str, ...]) -> ReferenceConfig | None:
    """For the web-text profile's scoring (`recap.score` names `names`): this section, its
    inputs for those benchmarks checked present and its first vision encoder only (the
    paper's reference); None when no benchmark is named."""
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
