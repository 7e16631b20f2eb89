"""The audit's equivalence margins per metric: the defaults and where each comes from, and the
one reader of params.yaml's `audit.margin` (called when params.yaml is loaded, so a bad margin
stops `harness run --check`, not the audit stage after every training)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from harness.records import names
from prh.io import ContractError

# Equivalence margins per metric when params.yaml has no `audit.margin` for it: the largest
# miss of a printed number that leaves the paper's conclusions as they are (not a resolution
# or a chance level). R@1 .03: its conclusions rest on between-arm gaps of .113 (good - bad,
# .246 - .133) and .128 (good - next-token); two arms each off by .03 keep the smaller above
# .05, about half of it. No margin on single values protects the .015 bad - next-token gap (it
# would need .0075): that order goes through the `ordering` rule ("cannot be separated"). .03
# is 4 to 12 sds of one seed's R@1 (.0024 from the paper's ± .002 over 3 seeds, .0068 from the
# audit article's .0096 seed-to-seed difference). R@5 and fit-pair R@1: .03 as R@1 (no
# conclusion turns on them). Mutual 10-NN .01: a quarter of the smallest gap the paper draws a
# conclusion from on it (good views +.040 over next-token for every seed, WIT-1024; it prints
# no Flickr30k gap), 4 to 8 seed sds (bad views .132 ± .001: sd about .0012). Controls .005:
# 20 times below the lowest arm (.118), so a control within it still says the score comes from
# the pairing. At 3 seeds against the paper's 3 and 1,000 pairs, tests/test_verdict_simulation
# .py measures "reproduced" and "differs" each 5% of the time at a miss of exactly the margin,
# "differs" never at half of it, and power .84 to 1.00 to reproduce a true equality where the
# seed sd is at most a quarter of the margin; below 3 seeds no sampled verdict.
# Public models scored on the same items as the paper (the `evaluated` rule): no sampling
# separates the two numbers, only the protocol's free choices (precision, TF32, padding, the
# clipping mode; platonic-rep's README warns numbers "might vary with different precision").
# WIT mutual 10-NN .005: five rounding units of the printed .001, more than ten times the
# bf16-against-float32 effect measured on real MiniLM (.0004, one neighbour of 2,560 at 256
# items; bench/reference.py), and a tenth of the .05 spread of the Qwen2.5 series the paper
# reads ("grows little with size"). WIT CKA and STS-B Spearman .01: the same five rounding
# units relative to scores about three times larger (CKA .34 to .51; Spearman .35 to .83).
# tests/test_reference.py checks that a bf16 rerun of a float32 number stays inside.
# Pair-free R@1 of a public model against an "at or below" bound near chance (Table 4's
# setting: every encoder but the good-view JEPA at or below .3% of 1,000 test photos) .005,
# as the controls: a rerun up to .3% + .5% (8 photos of 1,000) is still 20 times below the
# good-view JEPA's 16.4%, the contrast the claim is about.
# COCO mutual 10-NN (Table 3's COCO column) .005 as WIT's: the same evaluation on other items.
EVALUATED_MARGINS = {"wit_mknn10": 0.005, "wit_mknn10_clip": 0.005, "coco_mknn10": 0.005,
                     "wit_cka": 0.01,
                     "sts_spearman": 0.01, "pairfree_r_at_1": 0.005}
MKNN_MARGIN = 0.01  # the mutual k-NN's, under its name at the run's k (names.mknn)
MKNN_KEY = "mknn"  # params.yaml's key for it, whatever eval.k is


def default_margins(k: int = names.PAPER_K) -> dict[str, float]:
    """Metric -> its default margin, the mutual k-NN under its name at k."""
    return {"r_at_1": 0.03, "r_at_5": 0.03, "r_at_1_fit": 0.03, names.mknn(k): MKNN_MARGIN,
            "control_random_map_r_at_1": 0.005, "control_shuffled_r_at_1": 0.005,
            **EVALUATED_MARGINS}


DEFAULT_MARGINS = default_margins()  # at the paper's k


class MarginError(ContractError):
    """A margin in params.yaml's `audit.margin` is unknown or not above 0."""


def load_margins(raw: Any, where: str = "params.yaml audit.margin",
                 k: int = names.PAPER_K) -> dict[str, float]:
    """`audit: {margin: {metric: value}}` of params.yaml over `default_margins(k)` (k: the
    run's eval.k). `mknn` is the mutual k-NN's margin at whatever k the run uses (kept under
    its name at k, `names.mknn(k)`); a margin of 0 or below, a metric the audit does not know,
    or a mutual k-NN named at another k than the run's, raises naming the key and the fix."""
    out = default_margins(k)
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        raise MarginError(f"{where}: expected a mapping metric -> margin, got {raw!r}")
    for key, value in raw.items():
        metric = names.mknn(k) if key == MKNN_KEY else key
        if metric not in out and str(metric).startswith(MKNN_KEY):
            raise MarginError(f"{where}.{metric}: eval.k is {k}, so the mutual k-NN is "
                              f"{names.mknn(k)}; name its margin `{MKNN_KEY}` (at any k)")
        if metric not in out:
            raise MarginError(f"{where}.{metric}: unknown metric; margins exist for "
                              f"{sorted(out)} (and `{MKNN_KEY}`, the mutual k-NN at eval.k)")
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0 \
                or not math.isfinite(value):
            raise MarginError(f"{where}.{key}: margin {value!r} must be a finite number above 0 "
                              "(an equivalence margin of 0 can never be met)")
        out[metric] = float(value)
    return out


