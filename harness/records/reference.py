"""runs/reference/wit1024.json (schema prh.reference/3): public encoders scored without training,
and the lookups the audit makes in it. One writer (harness.stages.reference), one reader here.

    {"schema": "prh.reference/3",
     "data": {"path", "n", "caption_idx", "sha256"},
     "protocol": {"name" (platonic-rep | padding-invariant), "language", "vision",
                  "score_precision", "clip": {"q", "mode"}, "score", "null", "k"},
     "text": {NAME: {path, class, precision, model_type, hidden, layers, vocab_size,
                     tokenizer_size, tied, causal, parameters, parameters_card, unk_share,
                     unk_rows,
                     max_length, tokens_mean, n_truncated, protocol, degenerate_layers}},
     "vision": {NAME: {timm, weights, sha256, image_size, width, precision, layers, parameters,
                       degenerate_layers}},
     "alignment": {"TEXT|VISION|METRIC": {text, vision, metric, k, best, pair: [text layer,
                   vision layer], scores: [[...]], calibrated: {raw, threshold, p_value,
                   calibrated, null_q50, null_q95, null_q99, alpha, n_permutations} | null,
                   ci: [lo, hi], ci_level, ci_method, n, n_resamples, note, resamples
                   (the interval, in results.json's shape; absent without per_item),
                   per_item: [n] | null (mutual k-NN at the best pair, in item order),
                   degenerate: {MODEL: [collapsed layers]} (prh.layers.degenerate_layers),
                   other_protocol: {name, best, pair}: the same score with the text features
                   by the protocol not chosen (what wit1024.protocol moves)}},
     "sts": {NAME: {spearman, n, path}},
     "flickr": {NAME: {r_at_1, n_pairs, n_test, chance, ci, ci_level, ci_method, n,
                       n_resamples, note, resamples, pooling, pairs} |
                      {skipped: why}},
     "pair_free": {NAME: {seeds: {SEED: prh.pairfree.fit_and_score's scores + zeroshot:
                                  {SET: prh.zeroshot.zeroshot_scores}},
                          spread: {r_at_1 | foscttm | SET_topK: seed_spread}, n_pool, n_test,
                          aligner, inputs, images: {made_by, resize, interpolation,
                          image_size, pooling, unit_rows}}},
     "pair_free_arms": {ARM: {profile, runs: {SEED: as a pair_free entry | {skipped: why}}}},
     "pair_free_images": {as `images` above, encoder: {timm, image_size, width, layers,
                          sha256}, collapsed} | {} (the image rows of every pair_free entry),
     "classes": {SET: {n, n_classes}},
     "sts_arms": {ARM: {profile, values: {SEED: spearman}, n}},
     "coco": {"data": {dataset, images, split, n, caption_idx, sha256},
              "degenerate_layers": {MODEL: [layers]}, "alignment": as WIT's} (with
              wit1024.coco: Table 3's COCO column; the models are `text`'s and `vision`'s)}

METRIC is `mknn{k}` or `cka`. The interval resamples the WIT items (rows) at the best layer
pair, the pair held fixed: it says how much the number depends on which 1,024 items were drawn,
not how far another run on the same items can land (the paper scored the same items).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.records import names
from harness.records.schemas import REFERENCE, Reference
from prh.config import mknn_name
from prh.io import ContractError, read_json, write_json

# the registry's metric names -> (prh.layers metric, k), from the metric table
WIT_METRICS = names.layerwise("alignment")
COCO_METRICS = names.layerwise("coco")  # Table 3's COCO column, the document's `coco` block
STS_METRIC = "sts_spearman"
FLICKR_METRIC = "r_at_1"  # a claim on it with setup.dataset flickr30k: the 30k-pair map's R@1
PAIRFREE_METRIC = "pairfree_r_at_1"  # Table 4's setting: the pair-free map's R@1 per seed
VALUE_KEYS = ("best", "spearman", "r_at_1")  # an entry's number, by kind of entry
# an entry's interval beside its number (harness.stats.estimators.Interval.to_dict and what it
# resamples: harness.data.benchmarks), results.json's shape
INTERVAL_FIELDS = ("ci", "ci_level", "ci_method", "n", "n_resamples", "note", "resamples")


def metric_key(metric: str, k: int | None) -> str:
    """`mknn{k}` for mutual k-NN, the metric's own name otherwise."""
    return mknn_name(k) if metric == "mutual_knn" else metric


def pair_key(text: str, vision: str, metric: str, k: int | None) -> str:
    return f"{text}|{vision}|{metric_key(metric, k)}"


def write_reference(path: str | Path, doc: Mapping[str, Any]) -> None:
    write_json(path, {"schema": str(REFERENCE), **doc})


def read_reference(path: str | Path) -> Reference:
    """The document, checked for its schema; ContractError names the file and the stage."""
    try:
        doc = read_json(path)
    except (OSError, ValueError) as e:
        raise ContractError(f"{path}: cannot read the reference scores ({e}); rerun "
                            "`harness reference`") from e
    return REFERENCE.check(doc, str(path), "reference (harness reference)")


def by_reference(doc: Mapping[str, Any] | None, claim_metric: str
                 ) -> dict[str, dict[str, dict[str, Any]]]:
    """vision encoder -> text encoder -> its alignment entry on `claim_metric` (a WIT metric)."""
    metric, k = WIT_METRICS[claim_metric]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in (doc or {}).get("alignment", {}).values():
        if entry["metric"] == metric_key(metric, k):
            out.setdefault(entry["vision"], {})[entry["text"]] = entry
    return out


def lookup(doc: Mapping[str, Any] | None, model: str | None, reference: str | None,
           claim_metric: str) -> dict[str, Any] | None:
    """The scored entry a claim about `model` (and its vision `reference`) on `claim_metric`
    reads: an alignment entry, or {"spearman", ...} for STS-B; None when it was not scored."""
    if not doc or not model:
        return None
    if claim_metric == PAIRFREE_METRIC:
        return doc.get("pair_free", {}).get(model)
    if claim_metric == STS_METRIC:
        return doc.get("sts", {}).get(model)
    if claim_metric == FLICKR_METRIC:
        entry = doc.get("flickr", {}).get(model)
        return entry if entry and "r_at_1" in entry else None
    if claim_metric in COCO_METRICS and reference:
        metric, k = COCO_METRICS[claim_metric]
        return (doc.get("coco") or {}).get("alignment", {}).get(
            pair_key(model, reference, metric, k))
    if claim_metric not in WIT_METRICS or not reference:
        return None
    metric, k = WIT_METRICS[claim_metric]
    return doc.get("alignment", {}).get(pair_key(model, reference, metric, k))


def lookup_run_k(doc: Mapping[str, Any] | None, model: str | None, reference: str | None,
                 claim_metric: str) -> dict[str, Any] | None:
    """The entry of a mutual k-NN claim's model and reference at the k the run scored
    (`protocol.k`) when that is not the claim's k: the claim then reads "not comparable",
    naming k (harness.audit.setting), rather than "not scored"; None otherwise."""
    table = WIT_METRICS if claim_metric in WIT_METRICS else COCO_METRICS
    if not doc or not model or not reference or claim_metric not in table:
        return None
    metric, k = table[claim_metric]
    run_k = (doc.get("protocol") or {}).get("k")
    if k is None or run_k is None or run_k == k:
        return None
    block = doc if table is WIT_METRICS else (doc.get("coco") or {})
    return block.get("alignment", {}).get(pair_key(model, reference, metric, run_k))


def value(entry: Mapping[str, Any]) -> float:
    """The number an entry holds: a best-layer score, a Spearman or an R@1."""
    return float(next(entry[k] for k in VALUE_KEYS if k in entry))
