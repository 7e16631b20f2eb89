"""The one reader of params.yaml's `audit.margin`: the audit's equivalence margins over the
metric table's defaults (harness.records.names says where each comes from). It is called when
params.yaml is loaded, so a bad margin stops `harness run --check`, not the audit stage after
every training."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from harness.records import names
from prh.io import ContractError

MKNN_KEY = "mknn"  # params.yaml's key for the mutual k-NN's margin, whatever eval.k is


class MarginError(ContractError):
    """A margin in params.yaml's `audit.margin` is unknown or not above 0."""


def load_margins(raw: Any, where: str = "params.yaml audit.margin",
                 k: int = names.PAPER_K) -> dict[str, float]:
    """`audit: {margin: {metric: value}}` of params.yaml over `names.default_margins(k)` (k: the
    run's eval.k). `mknn` is the mutual k-NN's margin at whatever k the run uses (kept under
    its name at k, `names.mknn(k)`); a margin of 0 or below, a metric the audit does not know,
    or a mutual k-NN named at another k than the run's, raises naming the key and the fix."""
    out = names.default_margins(k)
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


