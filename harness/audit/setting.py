"""Is an evaluation run's setting the claim's? The facts of the paper's benchmarks, public models
and vision references (public_setups.yaml) against what the reference stage recorded
(runs/reference/wit1024.json: `data`, `protocol`, `text`, `vision`, each entry's `degenerate`).
Every difference is named; any one makes the claim "not comparable" (harness.audit.rules
`rule_evaluated`). A number from another benchmark size, a model of another architecture or
size under the claim's name, another image size or collapsed features says nothing about the
paper's. What these facts cannot tell apart: checkpoints of one shape (a base model and its
-Instruct tuning, bert-base-cased and -uncased); the weights' digest can, where the setups
file records the public file's."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from harness.records import reference
from prh.io import read_yaml

SETUPS = Path(__file__).with_name("public_setups.yaml")


@cache
def load_setups(path: Path = SETUPS) -> dict[str, Any]:
    return read_yaml(path, "the file ships with the package")


def _layerwise(bench: Mapping[str, Any], metric: str, data: Mapping[str, Any],
               proto: Mapping[str, Any]) -> list[str]:
    """A layer-wise benchmark's rows, caption, digest and protocol (WIT-1024, COCO)."""
    out = []
    if data.get("n") != bench["rows"]:
        out.append(f"the run scored {data.get('n')} rows, the benchmark has {bench['rows']}")
    if data.get("caption_idx") != bench["caption_idx"]:
        out.append(f"caption {data.get('caption_idx')} of each row, the paper's protocol "
                   f"scores caption {bench['caption_idx']}")
    if bench.get("sha256") and data.get("sha256") != bench["sha256"]:
        out.append(f"the rows' digest {data.get('sha256')} is not the published "
                   f"{bench['sha256']}")
    if proto.get("name") != bench["protocol"]:
        out.append(f"text features by the {proto.get('name') or 'unrecorded'} protocol, the "
                   f"paper's is {bench['protocol']} (wit1024.protocol)")
    if {**reference.WIT_METRICS, **reference.COCO_METRICS}[metric][1] is not None \
            and proto.get("k") != bench["k"]:
        out.append(f"k = {proto.get('k')}, the claim's k = {bench['k']}")
    if proto.get("clip") != bench["clip"]:
        out.append(f"outlier clipping {proto.get('clip')}, platonic-rep's {bench['clip']}")
    return out


def _benchmark(name: str | None, metric: str, doc: Mapping[str, Any], entry: Mapping[str, Any]
               ) -> list[str]:
    bench = load_setups()["benchmarks"].get(str(name))
    if bench is None:
        return [f"the registry holds no facts of the benchmark {name!r} to check the run against"]
    if metric in reference.WIT_METRICS:
        return _layerwise(bench, metric, doc.get("data") or {}, doc.get("protocol") or {})
    if metric in reference.COCO_METRICS:
        return _layerwise(bench, metric, (doc.get("coco") or {}).get("data") or {},
                          doc.get("protocol") or {})
    if metric == reference.STS_METRIC and entry.get("n") != bench["rows"]:
        return [f"{entry.get('n')} STS-B pairs scored, the test split has {bench['rows']}"]
    if metric == reference.FLICKR_METRIC and entry.get("n_test") != bench["n_test"]:
        return [f"{entry.get('n_test')} Flickr30k test pairs, the Karpathy test split has "
                f"{bench['n_test']}"]
    return []


def _model(name: str, got: Mapping[str, Any] | None) -> list[str]:
    setups = load_setups()
    want = setups["models"].get(name)
    if want is None:
        return [f"the registry holds no facts of {name} to check the run against"]
    if not got or "hidden" not in got:
        return [f"the run records no architecture of {name} (rerun `harness reference`)"]
    out = [f"{name} is a {want[k]} {k.replace('_', ' ')}, the scored model's is {got.get(k)}"
           if k == "model_type" else f"{name} has {k} {want[k]}, the scored model {got.get(k)}"
           for k in ("model_type", "hidden", "layers") if got.get(k) != want[k]]
    count, card = got.get("parameters_card"), float(want["parameters"])
    if count is None or abs(count - card) > setups["parameter_tolerance"] * card:
        out.append(f"{name} has {card:.3g} parameters by its model card, the scored model "
                   f"{count if count is None else f'{count:.3g}'}")
    return out


def _arch(timm_name: str) -> tuple[str, str | None]:
    arch, _, tag = timm_name.partition(".")
    return arch, tag or None


def _reference(name: str, got: Mapping[str, Any] | None) -> list[str]:
    want = load_setups()["references"].get(name)
    if want is None:
        return [f"the registry holds no facts of the vision reference {name} to check against"]
    return _vision(name, want, got)


def _vision(name: str, want: Mapping[str, Any], got: Mapping[str, Any] | None) -> list[str]:
    """A vision encoder's architecture, input size, width, depth and digest against `want`."""
    if not got or "width" not in got:
        return [f"the run records no architecture of {name} (rerun `harness reference`)"]
    out = []
    (arch, tag), (warch, wtag) = _arch(str(got.get("timm"))), _arch(want["timm"])
    if arch != warch or (tag and tag != wtag):
        out.append(f"{name} is timm's {want['timm']}, the scored model {got.get('timm')}")
    out += [f"{name} {what} {want[k]}, the scored model {got.get(k)}"
            for k, what in (("image_size", "runs at"), ("width", "has width"),
                            ("layers", "has layers")) if got.get(k) != want[k]]
    if want.get("sha256") and got.get("sha256") != want["sha256"]:
        out.append(f"the weights' sha256 {str(got.get('sha256'))[:16]}... is not the public "
                   f"file's {want['sha256'][:16]}...")
    return out


def assumed(setup: Mapping[str, Any]) -> str | None:
    """What the registry assumes of the claim's benchmark (`assumed:` in the setups file)."""
    return (load_setups()["benchmarks"].get(str(setup.get("dataset"))) or {}).get("assumed")


def differences(setup: Mapping[str, Any], metric: str, doc: Mapping[str, Any],
                entry: Mapping[str, Any]) -> list[str]:
    """Every way the run behind `entry` (a lookup in `doc`) differs from the setting of a claim
    with this `setup` on `metric`; [] when it is the claim's."""
    model = str(setup.get("model"))
    out = _benchmark(setup.get("dataset"), metric, doc, entry)
    out += _model(model, (doc.get("text") or {}).get(model))
    if metric in reference.WIT_METRICS or metric in reference.COCO_METRICS:
        ref = str(setup.get("reference"))
        out += _reference(ref, (doc.get("vision") or {}).get(ref))
    return out + _collapsed(model, doc, entry)


def pairfree_assumed() -> str:
    return load_setups()["benchmarks"]["flickr30k"]["pair_free"]["assumed"]


def pairfree_differences(setup: Mapping[str, Any], doc: Mapping[str, Any],
                         entry: Mapping[str, Any]) -> list[str]:
    """Every way a pair-free score (`entry`, doc's `pair_free` of the claim's model) differs from
    Table 4's setting: the pools' and test sizes, the aligner's constants, how the rows were
    prepared (`wit1024.flickr.inputs`), the image encoder (doc's `pair_free_images`), the text
    model's facts, and collapsed rows on either side; [] when it is the claim's."""
    want = load_setups()["benchmarks"]["flickr30k"]["pair_free"]
    model = str(setup.get("model"))
    out = [f"{what} {entry.get(k)}, the setting's {want[k]:,}"
           for k, what in (("n_pool", "pools of"), ("n_test", "test pairs"))
           if entry.get(k) != want[k]]
    aligner = {k: (entry.get("aligner") or {}).get(k) for k in want["aligner"]}
    if aligner != want["aligner"]:
        out.append(f"the aligner's constants {aligner}, the benchmark's {want['aligner']} "
                   "(flickr30k.eval.pairfree)")
    if entry.get("inputs") != want["inputs"]:
        out.append(f"rows prepared by wit1024.flickr.inputs: {entry.get('inputs')}, the "
                   f"benchmark's are {want['inputs']}")
    images = doc.get("pair_free_images") or {}
    out += _vision("the pair-free image encoder", want["encoder"], images.get("encoder"))
    out += [f"image rows by {k} {images.get(k)}, the benchmark's {v}"
            for k, v in want["rows"].items() if images.get("encoder") and images.get(k) != v]
    if images.get("collapsed"):
        out.append("the image pool's rows collapse (every cosine between photos within "
                   "float32 rounding, as timm's random initialisation gives): there is no "
                   "geometry to align")
    return out + _model(model, (doc.get("text") or {}).get(model)) + _collapsed(model, doc, {})


def _collapsed(model: str, doc: Mapping[str, Any], entry: Mapping[str, Any]) -> list[str]:
    """The scored features that collapse: the entry's layers, and the text model's last
    hidden state (the pooling of STS-B, R@1 and the pair-free rows)."""
    collapsed = dict(entry.get("degenerate") or {})
    text = (doc.get("text") or {}).get(model) or {}
    if text.get("layers") in (text.get("degenerate_layers") or []) and model not in collapsed:
        collapsed[model] = [text["layers"]]  # the last hidden state: STS-B's and R@1's pooling
    return [f"{who}'s features collapse at layers {layers} (every cosine between items within "
            "float32 rounding, as timm's random initialisation gives): its neighbours there are "
            "rounding noise" for who, layers in collapsed.items()]
