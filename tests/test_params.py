"""params.yaml: every bad parameter stops before any stage runs, naming file, key and fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from harness.config.params import ParamsError, load_params
from harness.config.validate import validate_params

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    edit(raw)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_repository_params_load_and_hash_is_stable():
    a, b = load_params(ROOT / "params.yaml"), load_params(ROOT / "params.yaml")
    assert a.profile == "world" and a.hash == b.hash and len(a.hash) == 16
    assert set(a.arms) == {"good", "bad", "ntp"} and len(a.seeds) >= 2


def test_adding_a_seed_keeps_the_params_hash_and_a_train_change_moves_it(tmp_path):
    base = load_params(ROOT / "params.yaml")
    seeds = load_params(write(tmp_path, lambda r: r.update(seeds=[0, 1, 2])))
    assert seeds.hash == base.hash
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    lr = load_params(write(tmp_path, lambda r: r["world"]["train"].update(lr=0.5)))
    assert lr.hash != base.hash


@pytest.mark.parametrize("edit,needles", [
    (lambda r: r.update(profile="imagenet"), ["profile", "unknown profile 'imagenet'"]),
    (lambda r: r["world"]["train"].update(lamb=-0.1), ["world.train", "lamb"]),
    (lambda r: r["world"]["train"].update(epochs=0), ["world.train", "epochs"]),
    (lambda r: r["world"]["train"].update(epochs="ten"), ["world.train", "epochs"]),
    (lambda r: r["world"]["train"].update(max_len=2), ["world.train", "max_len"]),
    (lambda r: r["world"]["train"].update(views={"global_scale": [0.0, 1.5]}),
     ["world.train", "global_scale"]),
    (lambda r: r["world"]["train"].update(learning_rate=1.0), ["world.train", "learning_rate"]),
    (lambda r: r.update(seeds=[0, 0]), ["seeds", "distinct"]),
    (lambda r: r.update(seeds=[2 ** 32]), ["seeds", "[0, 2^32)"]),
    (lambda r: r.update(seeds=[10 ** 20]), ["seeds", "[0, 2^32)"]),
    (lambda r: r.update(arms=["good", "clip"]), ["arms"]),
    (lambda r: r["world"]["eval"].update(k=0), ["world.eval", "k"]),
    (lambda r: r["world"].pop("theory"), ["missing section", "theory"]),
    (lambda r: r.pop("audit"), ["audit", "the section is missing"]),
    (lambda r: r["flickr30k"]["train"].update(lr=float("nan")), ["flickr30k.train", "lr"]),
    (lambda r: r["world"]["probe"].update(text_sources=["martians"]),
     ["world.probe.text_sources", "martians", "people"]),
])
def test_bad_parameter_names_file_and_key(tmp_path, edit, needles):
    path = write(tmp_path, edit)
    with pytest.raises(ParamsError) as err:
        validate_params(load_params(path))
    message = str(err.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message


def test_every_training_default_has_a_source_inside_the_repository(tmp_path):
    """harness/config/provenance.yaml: each flickr30k train key gets its citation from the file
    (none falls back to 'chosen by us'), every entry names a train key, and no citation points
    to a file a clone lacks."""
    from test_self_contained import BANNED

    from harness.config.params import flatten
    from harness.config.provenance import SOURCES, provenance
    from prh.train_config import TrainConfig

    rows = provenance(load_params(write(tmp_path, lambda r: r.update(profile="flickr30k"))))
    train = [r for r in rows if r["key"].startswith("train.")]
    assert train and all(r["citation"] != "assumed: chosen by us" for r in train)
    assert {r["source"] for r in train} == {"rerun_article", "upstream default", "assumed"}
    sources = {k: v for k, v in yaml.safe_load(SOURCES.read_text(encoding="utf-8")).items()
               if k.startswith("train.")}
    keys = {f"train.{k}" for k in flatten(TrainConfig())}
    assert set(sources) <= keys | {".".join(k.split(".")[:2]) for k in keys}
    for text in sources.values():
        assert ".txt" not in text and not BANNED.search(text), text


@pytest.mark.parametrize("profile", ["world", "flickr30k"])
def test_params_yaml_holds_every_knob_the_code_reads(profile):
    """So `dvc exp run -S PROFILE.SECTION.KEY=...` works for every knob (DVC refuses a key
    params.yaml lacks: "Key 'lamb' is not in struct")."""
    from harness.config.params import flatten
    from harness.config.validate import missing_knobs

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())[profile]
    assert missing_knobs(profile, raw) == []
    block = flatten(raw)
    assert block["train.lamb"] == 0.02 and block["train.views.n_local"] == 6


@pytest.mark.parametrize("edit,needle", [
    (lambda r: r["world"]["eval"].update(k=1500), "world.eval.k = 1500: mutual k-NN needs "
     "more than k test pairs and world.data.world has 1000"),
    (lambda r: r["world"]["eval"].update(fit_sizes=[25, 1400]),
     "[1400] exceed the 1000 fit pairs"),
    (lambda r: r["world"]["data"]["world"].update(n_fit=1) or r["world"]["eval"].update(
        fit_sizes=[]),
     "world.data.world has 1 fit pair(s): the Procrustes map needs at least 2"),
    (lambda r: r["world"]["data"]["world"].update(n_objects=2, n_colours=1, n_counts=1,
                                                 n_relations=1), "only 2 distinct scenes"),
    (lambda r: r["world"]["data"]["world"].update(n_test=5), "world.eval.k = 10: mutual k-NN"),
    (lambda r: r["world"]["train"].update(max_len=16), "longest caption has 19 words"),
    (lambda r: r["flickr30k"]["eval"].update(k=1000) or r.update(profile="flickr30k"),
     "the Karpathy split has 1000"),
    (lambda r: r["world"]["eval"].update(pairfree_pool=1001),
     "world.eval.pairfree_pool = 1001: each pair-free pool is at most half the train photos "
     "of world.data.world, 1000"),
    (lambda r: r["flickr30k"]["eval"].update(pairfree_pool=14501) or r.update(profile="flickr30k"),
     "half the train photos of the Karpathy split, 14500"),
])
def test_settings_that_cannot_work_together_fail_before_any_work(tmp_path, edit, needle):
    path = write(tmp_path, edit)
    with pytest.raises(ParamsError) as err:
        validate_params(load_params(path))
    message = str(err.value)
    assert str(path) in message and needle in message
    assert message.count("\n  ") == 1  # one broken rule, one message


def test_each_broken_rule_gets_its_own_message(tmp_path):
    def edit(r):
        r["world"]["eval"].update(k=1500, fit_sizes=[1400])
        r["world"]["train"].update(max_len=16)
    with pytest.raises(ParamsError) as err:
        validate_params(load_params(write(tmp_path, edit)))
    lines = str(err.value).splitlines()[1:]
    assert len(lines) == 3 and [x.split(":")[0].strip() for x in lines] == [
        "world.eval.k = 1500", "world.eval.fit_sizes [1400]", "world.train.max_len = 16"]


def test_ci_level_as_a_percentage_gets_the_one_rule_it_breaks(tmp_path):
    path = write(tmp_path, lambda r: r["world"]["eval"].update(ci_level=95))
    with pytest.raises(ParamsError) as err:
        validate_params(load_params(path))
    assert "ci_level = 95.0: a level is a fraction in (0, 1), e.g. 0.95" in str(err.value)
    assert "n_resamples" not in str(err.value) and "mutual" not in str(err.value)


def test_logged_params_are_the_ones_the_run_uses():
    """MLflow's params (harness.config.runparams.run_params) against the config a train stage builds
    and the views prh.train_config.view_config gives it: views.max_len is train.max_len (48 on
    the world), never the ViewConfig default 64; the mask id is the tokenizer's."""
    from dataclasses import replace

    from harness.config.params import flatten
    from harness.config.runparams import run_params
    from prh.tokenizer import train_tokenizer
    from prh.train_config import TrainConfig, view_config

    params = load_params(ROOT / "params.yaml")
    cfg = params.config(TrainConfig, "train", arm="bad", seed=1)
    tok = train_tokenizer(["a red dog left of a cat", "two blue balls"] * 5, vocab_size=40)
    used = flatten(replace(cfg, views=view_config(cfg, tok)))
    logged = run_params(params, "bad", 1)
    assert logged["train.views.max_len"] == 48 == cfg.max_len
    assert {k: logged[f"train.{k}"] for k in used if k not in ("arm", "seed")} == {
        k: list(v) if isinstance(v, tuple) else v for k, v in used.items()
        if k not in ("arm", "seed")}  # as params.yaml writes them
    assert (logged["arm"], logged["seed"], logged["profile"]) == ("bad", 1, "world")
    # next-token logs none of the keys it never reads (prh.config.JEPA_ONLY), every other
    ntp = run_params(params, "ntp", 1)
    jepa_only = {k for k in logged if k.startswith(("train.lamb", "train.sigreg_weight",
                                                    "train.n_slices", "train.views.",
                                                    "train.model.proj_"))}
    assert jepa_only and not jepa_only & set(ntp)
    assert set(logged) - jepa_only == set(ntp)


def test_flickr30k_with_fewer_than_the_papers_three_seeds_is_warned(tmp_path):
    from harness.config.validate import seed_warnings

    two = load_params(write(tmp_path, lambda r: r.update(profile="flickr30k", seeds=[0, 1])))
    line, off_plan = seed_warnings(two)
    assert "means of 3 seeds" in line and "seeds: [0, 1, 2]" in line
    assert "2 seeds per arm is no look of flickr30k.plan (looks [3, 6, 10])" in off_plan
    three = load_params(write(tmp_path, lambda r: r.update(profile="flickr30k",
                                                            seeds=[0, 1, 2])))
    assert seed_warnings(three) == [] and seed_warnings(load_params(ROOT / "params.yaml")) == []
    # the container's flickr30k command commits the three seeds with the profile
    entry = (ROOT / "docker" / "entrypoint.sh").read_text()
    assert 's/^seeds: .*/seeds: [0, 1, 2]/' in entry


def test_params_nested_past_the_yaml_readers_depth_is_one_line(tmp_path, monkeypatch):
    """LibYAML's parser (prh.io reads with it where PyYAML has it) stops at 1,000 levels;
    PyYAML's own recurses into Python's frame limit. Either way one line naming the file."""
    import yaml

    path = tmp_path / "params.yaml"
    path.write_text("profile: world\nworld: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(ParamsError, match=r"params.yaml: not valid YAML \(.*exceeded maximum "
                                          r"nesting depth.*\); fix it$"):
        load_params(path)
    monkeypatch.delattr(yaml, "CSafeLoader")
    with pytest.raises(ParamsError, match=r"params.yaml: nested too deeply for the YAML reader"):
        load_params(path)
