"""The generated world: Karpathy format, determinism, the caption style as the nuisance."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from prh.data import load_karpathy
from prh.io import atomic_dir
from prh.views import choose_captions
from prh.world import (
    COLOURS,
    OBJECTS,
    VOICE_WORDS,
    WorldConfig,
    render_caption,
    sample_scene,
    sample_style,
    typical_colour,
    typical_companion,
    voice_sharing,
    write_world,
)

SMALL = WorldConfig(n_train=12, n_fit=4, n_test=4, captions_per_photo=3)


def make(tmp_path, cfg=SMALL):
    with atomic_dir(tmp_path / "w") as tmp:
        write_world(cfg, tmp)
    return tmp_path / "w"


def test_world_is_karpathy_format_with_splits_and_images(tmp_path):
    out = make(tmp_path)
    data = json.loads((out / "dataset.json").read_text())
    splits = [im["split"] for im in data["images"]]
    assert splits.count("train") == 12 and splits.count("val") == 4 and splits.count("test") == 4
    for im in data["images"]:
        assert len(im["sentences"]) == 3 and (out / "images" / im["filename"]).exists()
        assert im["sentids"] == [s["sentid"] for s in im["sentences"]]
        assert all(s["raw"].split() == s["tokens"] and s["raw"] for s in im["sentences"])
    assert len({im["imgid"] for im in data["images"]}) == 20


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a, b = make(tmp_path / "a"), make(tmp_path / "b")
    c = make(tmp_path / "c", WorldConfig(**{**SMALL.__dict__, "seed": 1}))
    assert (a / "dataset.json").read_bytes() == (b / "dataset.json").read_bytes()
    assert (a / "images" / "000003.png").read_bytes() == (b / "images" / "000003.png").read_bytes()
    assert (a / "dataset.json").read_bytes() != (c / "dataset.json").read_bytes()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), strength=st.integers(0, 6))
def test_caption_names_the_scene_and_carries_exactly_its_voice(seed, strength):
    cfg = WorldConfig(style_strength=strength)
    rng = np.random.default_rng(seed)
    scene, style = sample_scene(cfg, rng), sample_style(cfg, rng)
    words = render_caption(scene, style, cfg, rng).split()
    s = style["synonyms"]
    text = " ".join(words)
    assert OBJECTS[scene["obj_a"]][s] in text and COLOURS[scene["col_b"]][s] in text
    voice = set(VOICE_WORDS[3 * style["voice"]: 3 * style["voice"] + 3])
    fillers = [w for w in words if w in VOICE_WORDS]
    assert len(fillers) == strength and set(fillers) <= voice


def _typical_shares(cfg: WorldConfig, n: int = 4000) -> np.ndarray:
    rng = np.random.default_rng(0)
    scenes = [sample_scene(cfg, rng) for _ in range(n)]
    return np.mean([[s["obj_b"] == typical_companion(s["obj_a"], cfg),
                     s["col_a"] == typical_colour(s["obj_a"], cfg),
                     s["col_b"] == typical_colour(s["obj_b"], cfg)] for s in scenes], axis=0)


@pytest.mark.parametrize("r", [0.0, 0.5, 1.0])
def test_regularity_is_the_share_of_typical_factors(r):
    """P(typical) = r + (1 - r) / choices: B's kind has n_objects - 1 choices, a colour
    n_colours; within 4 binomial SE over 4,000 scenes."""
    cfg = WorldConfig(regularity=r)
    n = 4000
    expect = [r + (1 - r) / (cfg.n_objects - 1), r + (1 - r) / cfg.n_colours,
              r + (1 - r) / cfg.n_colours]
    # col_b: a uniform draw still hits B's typical colour 1 / n_colours of the time
    got = _typical_shares(cfg, n)
    se = np.sqrt(np.array(expect) * (1 - np.array(expect)) / n)
    assert np.all(np.abs(got - expect) <= 4 * se + 1e-12), (got, expect)


def test_regularity_zero_keeps_the_independent_world():
    """r = 0 draws nothing extra: the same scenes as a world without the knob's draws."""
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    cfg = WorldConfig()
    for _ in range(50):
        oa, ob = rng_b.choice(cfg.n_objects, size=2, replace=False)
        want = {"obj_a": int(oa), "col_a": int(rng_b.integers(cfg.n_colours)),
                "count_a": int(rng_b.integers(cfg.n_counts)),
                "rel": int(rng_b.integers(cfg.n_relations)), "obj_b": int(ob),
                "col_b": int(rng_b.integers(cfg.n_colours))}
        assert sample_scene(cfg, rng_a) == want


def test_interrupted_generation_leaves_no_output(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "w") as tmp:
            write_world(SMALL, tmp)
            raise RuntimeError("killed")
    assert not (tmp_path / "w").exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key,value,needle", [
    ("n_objects", 99, "n_objects: must be in [1, 12]"),
    ("style_strength", -1, "style_strength: must be >= 0"),
    ("regularity", 1.5, "regularity: a probability in [0, 1]"),
    ("n_train", 1.5, "n_train=1.5 has type float; expected int"),
    ("colours", 3, "unknown key(s) ['colours']"),
])
def test_bad_world_config_names_the_key(key, value, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        WorldConfig.from_dict({key: value}, where="params.yaml world.data.world")


def test_the_captioner_writes_every_text_of_a_scene_in_one_wording(tmp_path):
    out = make(tmp_path)
    states = json.loads((out / "world.json").read_text())["states"]
    corpus = load_karpathy(out / "dataset.json", source="captioner")
    for photo in corpus.photos:
        state = states[photo.id]
        style = state["captioner_style"]
        assert len(photo.captions) == SMALL.captions_per_photo
        # without the voice's filler words every text is the scene in the one style's words
        voice = set(VOICE_WORDS[3 * style["voice"]: 3 * style["voice"] + 3])
        bare = {" ".join(w for w in t.split() if w not in voice) for t in photo.captions}
        plain = render_caption(state["scene"], style, WorldConfig(style_strength=0), None)
        assert bare == {plain}


def test_the_captioner_has_its_own_stream_so_people_and_images_stay_the_same(
        tmp_path, monkeypatch):
    """The captioner's draws leave the people captions and the images byte for byte alone."""
    import prh.world

    first = make(tmp_path / "a")

    def other_draws(scene, cfg, rng, shade):
        rng.random(1000)
        return {}, ["x"]

    monkeypatch.setattr(prh.world, "captioner_texts", other_draws)
    second = make(tmp_path / "b")
    images = [json.loads((d / "dataset.json").read_text())["images"] for d in (first, second)]
    assert [i["sentences"] for i in images[0]] == [i["sentences"] for i in images[1]]
    assert [i["texts"] for i in images[0]] != [i["texts"] for i in images[1]]
    for name in ("000000.png", "000019.png"):
        assert (first / "images" / name).read_bytes() == (second / "images" / name).read_bytes()


def test_a_leaking_captioner_states_each_images_background_and_nothing_else_moves(tmp_path):
    """captioner_leak 1: every captioner text ends by naming its image's background shade (the
    shade world.json records, which the PNG shows); people captions and images are byte for
    byte those of the same world without the leak. At .5 about half the texts leak."""
    import dataclasses

    from prh.world import LEAK_WORDS

    base = dataclasses.replace(SMALL, n_train=60, background=0.5)
    plain, leaky = make(tmp_path / "a", base), \
        make(tmp_path / "b", dataclasses.replace(base, captioner_leak=1.0))
    docs = [json.loads((d / "dataset.json").read_text())["images"] for d in (plain, leaky)]
    assert [i["sentences"] for i in docs[0]] == [i["sentences"] for i in docs[1]]
    states = json.loads((leaky / "world.json").read_text())["states"]
    for record in docs[1]:
        shade = states[str(record["imgid"])]["background_shade"]
        assert all(t.endswith(LEAK_WORDS[shade > 0]) for t in record["texts"]["captioner"])
        corner = np.asarray(Image.open(leaky / "images" / record["filename"]))[:2, :2]
        if abs(0.5 * shade / 3) > 4 * 255 * base.pixel_noise:  # clear of the pixel noise
            assert (corner.mean() > 128) == (shade > 0), record["filename"]
        assert (plain / "images" / record["filename"]).read_bytes() == \
            (leaky / "images" / record["filename"]).read_bytes()
    half = make(tmp_path / "c", dataclasses.replace(base, captioner_leak=0.5))
    texts = [t for i in json.loads((half / "dataset.json").read_text())["images"]
             for t in i["texts"]["captioner"]]
    leaked = sum(t.endswith(LEAK_WORDS) for t in texts) / len(texts)
    assert abs(leaked - 0.5) < 4 * (0.25 / len(texts)) ** 0.5  # 4 binomial sds (204 texts)
    with pytest.raises(ValueError, match="captioner_leak: 0.5 leaks the image's background"):
        WorldConfig.from_dict({"captioner_leak": 0.5})


@pytest.mark.parametrize("source", ["people", "captioner"])
def test_voice_sharing_is_the_rate_two_good_views_share_a_voice(tmp_path, source):
    """Simulated with the arms' own caption draw (prh.views.choose_captions) on a written world:
    the share of view pairs whose two texts carry one voice, against the closed form."""
    cfg = WorldConfig(n_train=400, n_fit=4, n_test=4, captions_per_photo=3, n_voices=4)
    out = make(tmp_path, cfg)
    states = json.loads((out / "world.json").read_text())["states"]
    photos = load_karpathy(out / "dataset.json", source=source).split("train")
    voices = np.array([[states[p.id]["styles"][j]["voice"] if source == "people"
                        else states[p.id]["captioner_style"]["voice"] for j in range(3)]
                       for p in photos]).ravel()
    first = np.arange(len(photos)) * 3
    rows = choose_captions(first, np.full(len(photos), 3), 400, True, np.random.default_rng(0))
    shared = (voices[rows[0::2]] == voices[rows[1::2]]).mean()  # 200 pairs x 400 samples
    expect = voice_sharing(source, True, cfg)
    assert expect == (1.0 if source == "captioner" else 1 / 3 + (2 / 3) / 4)
    # the 80,000 pairs are not independent (400 samples): the rate's sd is at most the spread
    # of 400 per-sample rates, sqrt(.25 / 400) = .025; 4 sd of it
    assert shared == pytest.approx(expect, abs=0.1)
    assert voice_sharing(source, False, cfg) == 1.0
    assert voice_sharing(source, True, WorldConfig(style_strength=0)) is None  # no voice words
