"""params.yaml: every bad parameter stops before any stage runs, naming file, key and fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from harness.params import ParamsError, load_params
from harness.validate import validate_params

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
    (lambda r: r.update(arms=["good", "clip"]), ["arms"]),
    (lambda r: r["world"]["eval"].update(k=0), ["world.eval", "k"]),
    (lambda r: r["world"].pop("theory"), ["missing section", "theory"]),
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
    """harness/provenance.yaml: each flickr30k train key gets its citation from the file (none
    falls back to 'chosen by us'), every entry names a train key, and no citation points to a
    file a clone lacks."""
    from test_self_contained import BANNED

    from harness.params import flatten
    from harness.provenance import SOURCES, provenance
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
