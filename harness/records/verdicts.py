"""The audit's vocabulary: the verdict of a claim, the status of a check, the `--fail-on`
names of the CI gate and the reasons a claim is not rerun. The audit writes these words; the
report's summary and the CI gate read them from here."""

from __future__ import annotations

VERDICTS = ("reproduced", "differs", "inconclusive", "inconclusive (underpowered)",
            "pattern seen on another profile", "pattern not seen on another profile",
            "not comparable", "not rerun", "arithmetic holds",
            "arithmetic holds within input rounding", "arithmetic fails", "informational")
# "informational": a relation whose check is by design no finding (the registry's
# `informational:` says why); it is shown with what its check found (`found`), never counted
STATUSES = ("holds", "informational", "holds within input rounding", "ambiguous", "fails")
FAIL_ON = {  # `--fail-on` names -> the verdicts/statuses that trip it
    "differs": {"differs"},
    "arithmetic": {"arithmetic fails", "relation fails", "check fails"},
    "ambiguous": {"relation ambiguous"},
    "inconclusive": {"inconclusive", "inconclusive (underpowered)"},
    "not-seen": {"pattern not seen on another profile"},
}
# why a claim is not rerun (the registry's `why_not_rerun`) -> what it says; "metadata": a
# description of the setup, with nothing to measure
WHY_NOT_RERUN = {"data": "needs data this pipeline does not have",
                 "scale": "web-scale training, beyond this pipeline",
                 "compute": "pretrained large models or extra runs, beyond this pipeline's "
                            "compute"}
NOT_RERUN_CATEGORIES = (*WHY_NOT_RERUN, "metadata")


def not_rerun(category: str, text: str) -> str:
    """A "not rerun" reason: `CATEGORY: text`, the one format `category_of` reads back."""
    if category not in NOT_RERUN_CATEGORIES:
        raise ValueError(f"not-rerun category {category!r}, expected {NOT_RERUN_CATEGORIES}")
    return f"{category}: {text}"


def category_of(reason: str) -> str:
    """The category of a "not rerun" reason (`not_rerun`): data, scale, compute, metadata."""
    return reason.split(":")[0]


def gist(reason: str) -> str:
    """A reason without its parenthesised details (the claim's setup, the numbers)."""
    return reason.split(" (")[0]
