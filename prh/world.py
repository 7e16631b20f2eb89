"""The embedded default data set: a finite hidden world rendered as captions and as images.

It follows the paper's setup as the rerun article describes it ("What the paper proves": a
hidden world whose states appear as a photo or as a caption, each appearance carrying its own
nuisance) at a size that trains on two CPU cores:

- a scene (hidden state) is (object A, colour A, count A, relation, object B, colour B);
- a caption renders the scene in a *wording style* drawn once per caption: a template (word
  order), a synonym bank, and a voice whose filler words are scattered through the caption.
  The style is shared by every span of that caption and independent across a scene's
  captions, so bad views (spans of one caption) share it and good views (spans of different
  captions) do not (Prop. 3, in the rerun article's "What the paper proves": a bad view
  spends directions on nuisance exactly when its correlation exceeds the k-th world one);
- an image renders the scene as coloured shapes, with its own nuisance: position jitter,
  colour noise, background tint and pixel noise;
- `regularity` gives the world the co-occurrence structure real scenes have (dogs are mostly
  brown, kites fly above houses): with that probability each dependent factor takes its
  parent's typical value (object A's colour, object B's companion kind and colour) instead of
  a uniform draw. At 0 every factor is independent and uniform, so no caption word predicts
  another content word and a next-token objective has no content to learn, only wording.

Two text sources, as Table 7 of the paper sets people's alt-text against one captioner's
recaptions (the audit article, "Where Good Views Come From: Removing the Captioner"):
- "people", the published captions: each caption's wording style drawn independently;
- "captioner": the same number of texts per photo in one wording style drawn once per scene
  and shared by all of them (one captioner, one prompt), so good views cut from different
  texts share the wording as bad views cut from one caption do. They come from their own
  random stream, so the people captions and the images are the same with or without them.
  With `captioner_leak` the captioner, which sees the image, also states the image's rendering
  nuisance (its background, "on a dark background" or "on a pale background" by the shade the
  image drew) in that fraction of its texts, as Recap-DataComp's recaptions carry what their
  captioner's CLIP encoder saw: a nuisance shared by the captioner's views and by the image.

The output is the Karpathy-split JSON that Flickr30k uses (the captioner's texts in each
record's `texts.captioner`, which Karpathy's readers ignore), plus PNG files, so both data sets
go through the same reader and the same stages. Knobs are the paper's quantities and are never
tuned to make an arm win; every default here is assumed by us.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from prh.config import dataclass_from_dict
from prh.data import PEOPLE

OBJECTS = [("dog", "puppy", "hound"), ("cat", "kitten", "feline"), ("ball", "sphere", "orb"),
           ("car", "automobile", "vehicle"), ("tree", "sapling", "oak"),
           ("boat", "ship", "vessel"), ("bird", "sparrow", "finch"), ("horse", "pony", "stallion"),
           ("house", "cabin", "cottage"), ("kite", "glider", "flyer"),
           ("chair", "seat", "stool"), ("lamp", "lantern", "light")]
COLOURS = [("red", "crimson", "scarlet", (220, 40, 40)),
           ("blue", "navy", "azure", (40, 70, 220)),
           ("green", "emerald", "olive", (40, 170, 60)),
           ("yellow", "golden", "lemon", (230, 210, 40)),
           ("purple", "violet", "plum", (140, 50, 180)),
           ("orange", "amber", "tangerine", (240, 140, 30)),
           ("white", "ivory", "snowy", (245, 245, 245)),
           ("black", "dark", "ebony", (20, 20, 20)),
           ("pink", "rosy", "magenta", (240, 120, 180)),
           ("brown", "tan", "chestnut", (130, 80, 40))]
COUNTS = [("one", "a single", "one lone"), ("two", "a pair of", "twin"),
          ("three", "a trio of", "three small"), ("four", "a group of four", "four little")]
RELATIONS = [("left of", "to the left of", "on the left side of"),
             ("right of", "to the right of", "on the right side of"),
             ("above", "over", "higher than"), ("below", "under", "beneath")]
TEMPLATES = ["{count} {ca} {oa} {rel} a {cb} {ob}",
             "a {cb} {ob} with {count} {ca} {oa} {rel} it",
             "there is a {cb} {ob} and {count} {ca} {oa} {rel} it",
             "{count} {oa} coloured {ca} {rel} one {ob} that is {cb}"]
VOICE_WORDS = ["honestly", "basically", "clearly", "quite", "really", "truly", "simply", "nicely",
               "kind", "sort", "rather", "totally", "surely", "plainly", "oddly", "sweetly",
               "calmly", "boldly", "gently", "merely", "frankly", "lovely", "neat", "wow"]
TEXT_SOURCES = (PEOPLE, "captioner")  # the Karpathy sentences; record["texts"]["captioner"]
SHAPES = ["circle", "square", "triangle", "diamond", "cross", "ring", "hbar", "vbar", "plus",
          "tri_down", "dot", "frame"]


@dataclass(frozen=True)
class WorldConfig:
    """Size and nuisance of the generated world (all defaults assumed by us)."""

    seed: int = 0
    n_train: int = 2000          # photos in the training split (Flickr30k: 29,000)
    n_fit: int = 300             # Karpathy "val": the pairs the map is fitted on (Flickr: 1,014)
    n_test: int = 300            # test pairs (Flickr: 1,000)
    captions_per_photo: int = 5  # as Flickr30k
    n_objects: int = 12          # hidden factors: object kinds (<= 12)
    n_colours: int = 10          # colours (<= 10)
    n_counts: int = 4            # counts 1..4
    n_relations: int = 4         # spatial relations
    n_voices: int = 8            # caption voices (the text nuisance); each owns 3 filler words
    style_strength: int = 3      # filler words per caption: 0 = no voice nuisance
    image_size: int = 32         # pixels
    jitter: int = 1              # image nuisance: position jitter in pixels
    colour_noise: float = 0.02   # image nuisance: per-object colour perturbation (fraction)
    pixel_noise: float = 0.01    # image nuisance: per-pixel Gaussian noise (fraction)
    background: float = 0.0      # image nuisance: background shade spread (0 = plain grey)
    regularity: float = 0.0      # P(a dependent factor takes its parent's typical value)
    captioner_leak: float = 0.0  # P(a captioner text states the image's background shade)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "params") -> WorldConfig:
        """Strict build from a mapping (unknown keys and wrong types raise), then validate."""
        cfg = dataclass_from_dict(cls, d, where)
        cfg.validate(where)
        return cfg

    def validate(self, where: str = "params") -> None:
        limits = {"n_objects": len(OBJECTS), "n_colours": len(COLOURS), "n_counts": len(COUNTS),
                  "n_relations": len(RELATIONS), "n_voices": len(VOICE_WORDS) // 3}
        for key, hi in limits.items():
            if not 1 <= getattr(self, key) <= hi:
                raise ValueError(f"{where}.{key}: must be in [1, {hi}], got {getattr(self, key)}")
        for key in ("n_train", "n_fit", "n_test", "captions_per_photo", "image_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"{where}.{key}: must be >= 1, got {getattr(self, key)}")
        if self.image_size < 16:
            raise ValueError(f"{where}.image_size: must be >= 16 pixels, got {self.image_size}")
        for key in ("style_strength", "jitter", "colour_noise", "pixel_noise", "background"):
            if getattr(self, key) < 0:
                raise ValueError(f"{where}.{key}: must be >= 0, got {getattr(self, key)}")
        for key in ("regularity", "captioner_leak"):
            if not 0 <= getattr(self, key) <= 1:
                raise ValueError(f"{where}.{key}: a probability in [0, 1], got "
                                 f"{getattr(self, key)}")
        if self.captioner_leak > 0 and self.background == 0:
            raise ValueError(f"{where}.captioner_leak: {self.captioner_leak} leaks the image's "
                             "background shade, which background 0 does not draw (every image "
                             "plain grey); set background above 0 or captioner_leak to 0")


def typical_colour(obj: int, cfg: WorldConfig) -> int:
    """The colour an object kind mostly has under `regularity`: kind k -> colour k mod n."""
    return obj % cfg.n_colours


def typical_companion(obj: int, cfg: WorldConfig) -> int:
    """The kind object A mostly appears with under `regularity`: kind k -> kind k + 1 mod n."""
    return (obj + 1) % cfg.n_objects


def sample_scene(cfg: WorldConfig, rng: np.random.Generator) -> dict[str, int]:
    """One hidden state: two distinct object kinds, their colours, a count and a relation.

    Under `regularity` r > 0, object B is A's typical companion, and each colour its object's
    typical colour, each with probability r (drawn in that order); at r = 0 the draws are
    exactly the independent uniform ones (the random stream is unchanged).
    """
    oa, ob = rng.choice(cfg.n_objects, size=2, replace=False)
    col_a, count_a = int(rng.integers(cfg.n_colours)), int(rng.integers(cfg.n_counts))
    rel, col_b = int(rng.integers(cfg.n_relations)), int(rng.integers(cfg.n_colours))
    if cfg.regularity > 0:
        typical = rng.random(3) < cfg.regularity
        if typical[0]:
            ob = typical_companion(int(oa), cfg)
        if typical[1]:
            col_a = typical_colour(int(oa), cfg)
        if typical[2]:
            col_b = typical_colour(int(ob), cfg)
    return {"obj_a": int(oa), "col_a": col_a, "count_a": count_a, "rel": rel,
            "obj_b": int(ob), "col_b": col_b}


def sample_style(cfg: WorldConfig, rng: np.random.Generator) -> dict[str, int]:
    """One caption's wording style: template, synonym bank and voice (drawn once per caption)."""
    return {"template": int(rng.integers(len(TEMPLATES))), "synonyms": int(rng.integers(3)),
            "voice": int(rng.integers(cfg.n_voices))}


def render_caption(scene: dict[str, int], style: dict[str, int], cfg: WorldConfig,
                   rng: np.random.Generator) -> str:
    """The scene in the style's words, with `style_strength` voice fillers scattered through it."""
    s = style["synonyms"]
    words = TEMPLATES[style["template"]].format(
        count=COUNTS[scene["count_a"]][s], ca=COLOURS[scene["col_a"]][s],
        oa=OBJECTS[scene["obj_a"]][s], rel=RELATIONS[scene["rel"]][s],
        cb=COLOURS[scene["col_b"]][s], ob=OBJECTS[scene["obj_b"]][s]).split()
    lexicon = VOICE_WORDS[3 * style["voice"]: 3 * style["voice"] + 3]
    for _ in range(cfg.style_strength):
        words.insert(int(rng.integers(len(words) + 1)), lexicon[int(rng.integers(3))])
    return " ".join(words)


LEAK_WORDS = ("on a dark background", "on a pale background")  # shade at or below / above grey


def captioner_texts(scene: dict[str, int], cfg: WorldConfig, rng: np.random.Generator,
                    shade: int = 0) -> tuple[dict[str, int], list[str]]:
    """The "captioner" source for one scene: one style drawn for the scene, then
    `captions_per_photo` texts in it (only the filler words' places and picks differ); each
    ends, with probability `captioner_leak`, by naming the image's background `shade`
    (`render_image`'s, below 0 dark). With no leak the draws are those of a world without it."""
    style = sample_style(cfg, rng)
    texts = [render_caption(scene, style, cfg, rng) for _ in range(cfg.captions_per_photo)]
    if cfg.captioner_leak > 0:
        texts = [f"{t} {LEAK_WORDS[shade > 0]}" if rng.random() < cfg.captioner_leak else t
                 for t in texts]
    return style, texts


def voice_sharing(source: str, good_views: bool, cfg: WorldConfig) -> float | None:
    """P(two views of one sample carry the same voice), the nuisance Prop. 3 is about; None
    when captions carry no voice words (`style_strength` 0). The template and synonym bank,
    which one captioner also fixes per scene, are left out of this number.

    Bad views read one text, so always 1. Good views draw each view's text uniformly with
    replacement among m texts (`prh.views.choose_captions`): the same text with probability
    1/m; two "people" texts share a voice with probability 1/n_voices, two "captioner" texts
    always (one style per scene).
    """
    if source not in TEXT_SOURCES:
        raise ValueError(f"source {source!r}: the world's text sources are {list(TEXT_SOURCES)}")
    if cfg.style_strength == 0:
        return None
    if not good_views or source != PEOPLE:
        return 1.0
    m = cfg.captions_per_photo
    return 1 / m + (1 - 1 / m) / cfg.n_voices


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float,
                fill: tuple[int, int, int]) -> None:
    box = [cx - r, cy - r, cx + r, cy + r]
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
    elif shape == "tri_down":
        draw.polygon([(cx, cy + r), (cx - r, cy - r), (cx + r, cy - r)], fill=fill)
    elif shape == "diamond":
        draw.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill)
    elif shape == "cross":
        draw.line([(cx - r, cy - r), (cx + r, cy + r)], fill=fill, width=2)
        draw.line([(cx - r, cy + r), (cx + r, cy - r)], fill=fill, width=2)
    elif shape == "plus":
        draw.line([(cx - r, cy), (cx + r, cy)], fill=fill, width=2)
        draw.line([(cx, cy - r), (cx, cy + r)], fill=fill, width=2)
    elif shape == "ring":
        draw.ellipse(box, outline=fill, width=2)
    elif shape == "frame":
        draw.rectangle(box, outline=fill, width=2)
    elif shape == "hbar":
        draw.rectangle([cx - r, cy - r / 3, cx + r, cy + r / 3], fill=fill)
    elif shape == "vbar":
        draw.rectangle([cx - r / 3, cy - r, cx + r / 3, cy + r], fill=fill)
    else:  # dot
        draw.ellipse([cx - r / 2, cy - r / 2, cx + r / 2, cy + r / 2], fill=fill)


def render_image(scene: dict[str, int], cfg: WorldConfig, rng: np.random.Generator) -> Image.Image:
    """Object A (count copies) and object B placed by the relation, plus image nuisance."""
    return render_image_shade(scene, cfg, rng)[0]


def render_image_shade(scene: dict[str, int], cfg: WorldConfig, rng: np.random.Generator
                       ) -> tuple[Image.Image, int]:
    """`render_image`, and the background shade it drew, summed over the channels (times
    `background`, the background's offset from grey: what a captioner that sees it can state)."""
    size = cfg.image_size
    shade = int(rng.integers(-38, 39)) + rng.integers(-12, 13, size=3)
    bg = tuple(int(128 + cfg.background * v) for v in shade)
    img = Image.new("RGB", (size, size), bg)
    draw = ImageDraw.Draw(img)

    def colour(index: int) -> tuple[int, int, int]:
        base = np.array(COLOURS[index][3], dtype=float)
        noisy = base + rng.normal(0, 255 * cfg.colour_noise, 3)
        return tuple(int(v) for v in np.clip(noisy, 0, 255))

    # (dx, dy) of group A's centre and B's centre in units of size/4, by relation
    offsets = [((-1, 0), (1, 0)), ((1, 0), (-1, 0)), ((0, -1), (0, 1)), ((0, 1), (0, -1))]
    (ax, ay), (bx, by) = offsets[scene["rel"]]
    q, r = size / 4, size / 8

    def jit() -> float:
        return float(rng.integers(-cfg.jitter, cfg.jitter + 1))

    n = scene["count_a"] + 1
    for i in range(n):  # copies of A spread perpendicular to the relation axis
        t = (i - (n - 1) / 2) * 1.9 * r * 0.7
        cx = size / 2 + ax * q + (t if ay else 0) + jit()
        cy = size / 2 + ay * q + (t if ax else 0) + jit()
        _draw_shape(draw, SHAPES[scene["obj_a"]], cx, cy, r * 0.7, colour(scene["col_a"]))
    _draw_shape(draw, SHAPES[scene["obj_b"]], size / 2 + bx * q + jit(), size / 2 + by * q + jit(),
                r * 1.3, colour(scene["col_b"]))
    pixels = np.asarray(img, dtype=float) + rng.normal(0, 255 * cfg.pixel_noise, (size, size, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)), int(shade.sum())


def write_world(cfg: WorldConfig, out_dir: Path) -> dict[str, Any]:
    """Write `dataset.json` (Karpathy format), `images/*.png` and `world.json` into `out_dir`
    (callers make it atomic: `prh.io.atomic_dir`). Returns split counts."""
    rng = np.random.default_rng(cfg.seed)
    captioner_rng = np.random.default_rng([cfg.seed, 1])  # its own stream (module docstring)
    splits = ["train"] * cfg.n_train + ["val"] * cfg.n_fit + ["test"] * cfg.n_test
    images, states = [], {}
    tmp = Path(out_dir)
    (tmp / "images").mkdir(parents=True, exist_ok=True)
    sentid = 0
    for imgid, split in enumerate(splits):
        scene = sample_scene(cfg, rng)
        styles = [sample_style(cfg, rng) for _ in range(cfg.captions_per_photo)]
        sentences = []
        for style in styles:
            raw = render_caption(scene, style, cfg, rng)
            sentences.append({"raw": raw, "tokens": raw.split(), "sentid": sentid,
                              "imgid": imgid})
            sentid += 1
        filename = f"{imgid:06d}.png"
        image, shade = render_image_shade(scene, cfg, rng)
        image.save(tmp / "images" / filename, optimize=False)
        captioner_style, recaptions = captioner_texts(scene, cfg, captioner_rng, shade)
        images.append({"imgid": imgid, "filename": filename, "split": split,
                       "sentences": sentences, "sentids": [s["sentid"] for s in sentences],
                       "texts": {"captioner": recaptions}})
        states[str(imgid)] = {"scene": scene, "styles": styles,
                              "captioner_style": captioner_style, "background_shade": shade}
    dataset = {"dataset": "world", "images": images}
    (tmp / "dataset.json").write_text(json.dumps(dataset, indent=1) + "\n", encoding="utf-8")
    world = {"config": dataclasses.asdict(cfg), "factors": {
        "objects": [o[0] for o in OBJECTS[:cfg.n_objects]],
        "colours": [c[0] for c in COLOURS[:cfg.n_colours]],
        "counts": [c[0] for c in COUNTS[:cfg.n_counts]],
        "relations": [r[0] for r in RELATIONS[:cfg.n_relations]]}, "states": states}
    (tmp / "world.json").write_text(json.dumps(world, sort_keys=True) + "\n", encoding="utf-8")
    return {"photos": len(images), "captions": sentid,
            "splits": {s: splits.count(s) for s in ("train", "val", "test")}}
