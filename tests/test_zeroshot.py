"""Zero-shot classification through a map (prh.zeroshot) and the class-set readers
(prh.classsets): top-k ranks against brute force with ties against the true class, the floors
of a collapsed image side and of identical class prompts, a planted classifier recovered, the
benchmark's prompts, and every reader error naming the file and the fix."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from prh import align, classsets, zeroshot
from prh.io import ContractError


def brute_ranks(q: np.ndarray, c: np.ndarray, y: np.ndarray) -> np.ndarray:
    """How many other classes score at least as high as the true one, class by class."""
    out = []
    for i in range(len(q)):
        s = [float(q[i] @ c[j]) for j in range(len(c))]
        out.append(sum(s[j] >= s[y[i]] for j in range(len(c)) if j != y[i]))
    return np.array(out)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(2, 7), st.integers(1, 4), st.integers(0, 2 ** 31 - 1))
def test_class_ranks_equal_brute_force_on_tie_heavy_integers(n, n_classes, d, seed):
    """Small integer scores tie often; their products are exact, so brute force with exact
    comparisons is the reference and ties count against the true class."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-2, 3, (n, d)).astype(np.float64)
    c = rng.integers(-2, 3, (n_classes, d)).astype(np.float64)
    y = rng.integers(0, n_classes, n)
    got = zeroshot.class_ranks(q, c, y, chunk=max(1, n // 3))
    assert got.tolist() == brute_ranks(q, c, y).tolist()


def identity_map(d: int) -> align.ProcrustesMap:
    return align.ProcrustesMap(np.zeros(d), np.zeros(d), np.eye(d))


def test_a_planted_classifier_is_recovered_and_the_floors_hold():
    """Images near their class's prompt vector: top-1 is 1. A collapsed image side (every
    image the same point, which a map fitted on it centres to 0) ties every class: 0, never
    k / C. Identical prompts for every class: 0 too. The chance field is k / C."""
    rng = np.random.default_rng(0)
    classes = rng.standard_normal((10, 16))
    y = np.repeat(np.arange(10), 20)
    images = classes[y] + 0.05 * rng.standard_normal((200, 16))
    got = zeroshot.zeroshot_scores(identity_map(16), images, classes, y, k=1)
    assert got == {"top_k": 1.0, "k": 1, "chance": 0.1, "n": 200, "n_classes": 10}
    flat = np.tile(classes[:1], (200, 1))
    at_mean = align.ProcrustesMap(classes[0], np.zeros(16), np.eye(16))
    assert zeroshot.zeroshot_scores(at_mean, flat, classes, y, k=5)["top_k"] == 0.0
    same = np.tile(classes[:1], (10, 1))
    assert zeroshot.zeroshot_scores(identity_map(16), images, same, y, k=5)["top_k"] == 0.0


def test_the_map_prepares_both_sides_as_its_fit_did():
    """Scores go through the map: images centred on its image mean and mapped, prompts centred
    on its text mean. A rotated text space with the map's rotation gives the planted answer;
    the identity map on the same inputs does not."""
    rng = np.random.default_rng(1)
    rot = np.linalg.qr(rng.standard_normal((8, 8)))[0]
    classes = rng.standard_normal((6, 8))
    y = np.repeat(np.arange(6), 10)
    images = classes[y] + 0.05 * rng.standard_normal((60, 8)) + 3.0
    pmap = align.ProcrustesMap(np.full(8, 3.0), np.full(8, -1.0), rot)
    text = classes @ rot - 1.0
    assert zeroshot.zeroshot_scores(pmap, images, text, y, k=1)["top_k"] == 1.0
    assert zeroshot.zeroshot_scores(identity_map(8), images, text, y, k=1)["top_k"] < 0.5


def test_class_embeddings_average_each_class_prompts_on_the_captions_scale():
    vecs = {"a photo of a cat.": [1.0, 0.0], "a photo of the cat.": [3.0, 2.0],
            "dog - a domestic animal": [0.0, 5.0]}
    got = zeroshot.class_embeddings(lambda texts: np.array([vecs[t] for t in texts]),
                                    [["a photo of a cat.", "a photo of the cat."],
                                     ["dog - a domestic animal"]])
    assert got.tolist() == [[2.0, 1.0], [0.0, 5.0]]
    with pytest.raises(ValueError, match="at least one prompt"):
        zeroshot.class_embeddings(lambda t: np.ones((len(t), 2)), [["x"], []])


def test_the_benchmarks_prompts():
    assert len(zeroshot.CIFAR_TEMPLATES) == 18 == len(set(zeroshot.CIFAR_TEMPLATES))
    assert zeroshot.CIFAR_TEMPLATES[0].format("aquarium_fish") == "a photo of a aquarium_fish."
    assert zeroshot.in100_prompt("Goose", "web-footed long-necked birds") == \
        "Goose - web-footed long-necked birds"
    assert zeroshot.TOP_K == {"in100": 5, "cifar10": 1, "cifar100": 5}


# ------------------------------------------------------------------------------ class sets
def write_in100(root, wnids=None, per_class=1):
    """A miniature ImageNet-100: the real 100 ids, `per_class` tiny photos each."""
    wnids = classsets.in100_wnids() if wnids is None else wnids
    lines = [f"{w}\tclass {i}\tdefinition of class {i}" for i, w in enumerate(wnids)]
    (root / "classes.tsv").parent.mkdir(parents=True, exist_ok=True)
    (root / "classes.tsv").write_text("\n".join(lines) + "\n")
    rng = np.random.default_rng(0)
    for w in wnids:
        (root / "val" / w).mkdir(parents=True, exist_ok=True)
        for j in range(per_class):
            Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(
                root / "val" / w / f"ILSVRC2012_val_{j:08d}.JPEG")
    return root


def test_in100_reads_the_classes_in_sorted_wnid_order(tmp_path):
    ids = classsets.in100_wnids()
    assert len(ids) == 100 == len(set(ids)) and list(ids) == sorted(ids)
    assert ids[0] == "n01558993"  # American robin, the benchmark's first prompt
    cs = classsets.read_in100(write_in100(tmp_path / "in100", per_class=2))
    assert len(cs.names) == 100 and cs.labels.tolist() == np.repeat(np.arange(100), 2).tolist()
    assert cs.names[3] == "class 3" and cs.definitions[3] == "definition of class 3"
    assert cs.images[0].parent.name == ids[0]


def test_in100_errors_name_the_file_and_the_fix(tmp_path):
    root = write_in100(tmp_path / "in100")
    with pytest.raises(ContractError, match="classes.tsv: not the ImageNet-100 classes: 1 "
                                            "missing .*'n01558993'.* 1 not in it"):
        text = (root / "classes.tsv").read_text().replace("n01558993", "n99999999")
        (root / "classes.tsv").write_text(text)
        classsets.read_in100(root)
    (root / "classes.tsv").write_text("n01558993\tonly a name\n")
    with pytest.raises(ContractError, match=r"classes.tsv, line 1: expected 3 tab-separated"):
        classsets.read_in100(root)
    write_in100(root)
    for f in (root / "val" / "n01558993").iterdir():
        f.unlink()
    with pytest.raises(ContractError, match="n01558993: no validation image of n01558993"):
        classsets.read_in100(root)
    with pytest.raises(ContractError, match="cannot read the class list"):
        classsets.read_in100(tmp_path / "nowhere")


def write_cifar(root, name, n):
    folder, batches, label_key, names_key, meta = classsets.CIFAR[name]
    base = root / folder
    base.mkdir(parents=True)
    n_classes = 10 if name == "cifar10" else 100
    names = [f"c_{i}".encode() for i in range(n_classes)]
    with (base / meta).open("wb") as f:
        pickle.dump({names_key: names}, f)
    rng = np.random.default_rng(0)
    per = n // len(batches)
    for b in batches:
        with (base / b).open("wb") as f:
            pickle.dump({b"data": rng.integers(0, 255, (per, 3072), dtype=np.uint8),
                         label_key: rng.integers(0, n_classes, per).tolist()}, f)
    return root


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_reads_the_official_pickles(tmp_path, name):
    root = write_cifar(tmp_path, name, classsets.CIFAR_N)
    cs = classsets.read_cifar(root, name)
    assert cs.images.shape == (classsets.CIFAR_N, 32, 32, 3) and cs.images.dtype == np.uint8
    assert cs.names[1] == "c_1" and len(cs.labels) == classsets.CIFAR_N
    folder, batches, *_ = classsets.CIFAR[name]
    first = pickle.load((tmp_path / folder / batches[0]).open("rb"))[b"data"][0]
    assert (cs.images[0].transpose(2, 0, 1).reshape(-1) == first).all()  # channel planes


def test_a_short_cifar_archive_is_refused(tmp_path):
    root = write_cifar(tmp_path, "cifar10", 500)
    with pytest.raises(ContractError, match="500 training images .* expected 50000"):
        classsets.read_cifar(root, "cifar10")
    with pytest.raises(ContractError, match="cannot read the CIFAR batch"):
        classsets.read_cifar(tmp_path / "nowhere", "cifar100")
    other = write_cifar(tmp_path / "other", "cifar100", 500)
    with (other / "cifar-100-python" / "train").open("wb") as f:  # CIFAR-10's label key
        pickle.dump({b"data": np.zeros((500, 3072), np.uint8), b"labels": [0] * 500}, f)
    with pytest.raises(ContractError, match=r"cifar-100-python/train: not a batch of the "
                                            r"official cifar100 python archive \(KeyError"):
        classsets.read_cifar(other, "cifar100")
