"""The small numbers-only views DVC shows (`dvc metrics show/diff`, `dvc exp show`) and the
curve files it plots (`dvc plots show/diff`), cut from the rich JSON each stage also writes
(that stays an output for the report, the audit and `harness diff`). Values are rounded to 4
decimals: DVC prints every digit it is given, and a test set of 1,000 pairs resolves .001.

`dvc metrics show` prints one table whose columns are the union of every file's keys, so a
run, an arm and a gap each get a file of their own with the same few keys (`r_at_1`,
`r_at_1_lo`, `r_at_1_hi`, ...): one row each, a handful of columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.records import names

DIGITS = 4
GAP_KEYS = ("r_at_1",)


def _r(x: Any) -> float:
    return round(float(x), DIGITS)


def run_metrics(metrics: Mapping[str, Mapping[str, Any]], k: int) -> dict[str, float]:
    """One align run's scores (run file `metrics`, mutual k-NN at k) flat: each value, and the
    interval ends of R@1 as `r_at_1_lo`/`r_at_1_hi`; controls and chance under short names."""
    out = {short: _r(metrics[key]["value"]) for key, short in names.flat_names(k).items()
           if key in metrics}
    if "ci" in metrics.get("r_at_1", {}):
        out["r_at_1_lo"], out["r_at_1_hi"] = (_r(x) for x in metrics["r_at_1"]["ci"])
    return out


def aggregate_metrics(stats: Mapping[str, Any], k: int) -> dict[str, dict[str, float]]:
    """results.json's per-arm seed means (R@1 with its interval; mutual k-NN at k) and paired
    gaps on R@1 (with theirs): file name (`ARM`, `A-B`) -> its flat metrics, under the run
    files' key names."""
    out: dict[str, dict[str, float]] = {}
    for arm, block in stats.get("arms", {}).items():
        m = block.get("metrics", {})
        row = {key: _r(m[key]["mean"]) for key in names.arm_metrics(k) if key in m}
        if "ci" in m.get("r_at_1", {}):
            row["r_at_1_lo"], row["r_at_1_hi"] = (_r(x) for x in m["r_at_1"]["ci"])
        out[arm] = row
    for gap in stats.get("gaps", []):
        if gap.get("metric") in GAP_KEYS:
            key = gap["metric"]
            out[f"{gap['a']}-{gap['b']}"] = {key: _r(gap["diff"]), f"{key}_lo": _r(gap["ci"][0]),
                                           f"{key}_hi": _r(gap["ci"][1])}
    return out


def curve_rows(curve: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """A curve as the flat records DVC plots read: the `keys` of the records that have all of
    them (DVC refuses a plot whose y field is missing from a record, as on the epochs between
    two evaluations)."""
    return [{k: r[k] for k in keys} for r in curve if all(r.get(k) is not None for k in keys)]
