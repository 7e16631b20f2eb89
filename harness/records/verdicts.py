"""The audit's vocabulary and its file: the verdict of a claim, the status of a check, the
`--fail-on` names of the CI gate, the reasons a claim is not rerun, and `AUDIT`, the format of
reports/audit.json with the shape its readers check (a verdict or a status outside the
vocabulary is refused). The audit writes these words; the report's summary and the CI gate read
them from here; `family_line` says the audit's Holm family in one line. AUDIT lives here rather
than beside the other formats (harness.records.schemas) so that only the audit's writer and
readers depend on these words: a new verdict or reason reruns the audit and the report, never a
training."""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from harness.records.schemas import Schema

VERDICTS = ("reproduced", "differs", "inconclusive", "inconclusive (underpowered)",
            "pattern seen on another profile", "pattern not seen on another profile",
            "not comparable", "not rerun", "arithmetic holds",
            "arithmetic holds within input rounding", "arithmetic fails", "informational")
# "informational": a relation whose check is by design no finding (the registry's
# `informational:` says why); it is shown with what its check found (`found`), never counted
STATUSES = ("holds", "informational", "holds within input rounding", "ambiguous", "fails")


# what the report, the CI gate (a baseline audit) and the web-text report read of the audit:
# docs/contracts.md, "Audit"
class ClaimRow(TypedDict):
    """One claim's verdict and what it was decided from."""

    id: str
    kind: str
    rule: str
    verdict: Annotated[str, VERDICTS]
    reason: str
    evidence: dict[str, Any]


class CheckRow(TypedDict):
    """One arithmetic check of printed (or rerun) numbers."""

    id: str
    status: Annotated[str, STATUSES]


class AtChance(TypedDict):
    ci: list[float]
    chance: float


class RerunPath(TypedDict):
    claims: list[str]


class Family(TypedDict):
    """The Holm family of the claims judged from sampled runs (harness.audit.judge.family)."""

    k: int
    differs: int
    alpha: float
    beyond_unadjusted: int


class StudyClaim(TypedDict):
    """A planned claim's standing at a look (harness.audit.looks.apply_look)."""

    status: str
    verdict: Annotated[str, VERDICTS]
    history: list[dict[str, Any]]


class Sequential(TypedDict):
    """The look a run is of its registered plan (harness.audit.looks): `harness next` and the
    report read it."""

    plan_hash: str
    looks: list[int]
    look: int | None
    seeds: int
    family_k: int
    claims: dict[str, StudyClaim]
    continuing_arms: list[str]
    next_seeds: int | None


class Audit(TypedDict):
    """reports/audit.json."""

    profile: NotRequired[str]
    claims: list[ClaimRow]
    arithmetic: list[CheckRow]
    at_chance: NotRequired[dict[str, dict[str, AtChance]]]  # arm -> metric -> its interval
    rerun_paths: NotRequired[dict[str, RerunPath]]
    summary: dict[str, int]
    family: NotRequired[Family]  # the first page's Holm line (family_line)
    sequential: NotRequired[Sequential]  # under a registered seed plan: the look it is


AUDIT = Schema("prh.audit", 1, "audit", Audit)  # reports/audit.json

# The CI gate's `--fail-on` names (harness.audit.gate). The rerun's own findings trip it as
# they stand: a claim with one of these verdicts, an arm at chance (the audit's `at_chance`), a
# count check of the rerun's own scores that fails.
GATE_VERDICTS = {"differs": ("differs",),
                 "inconclusive": ("inconclusive", "inconclusive (underpowered)"),
                 "not-seen": ("pattern not seen on another profile",)}
# The articles' printed numbers are the same on every rerun of one registry (the paper's own
# inconsistencies fail on a clean clone), so their checks trip the gate only as a change against
# a baseline audit (`--baseline`): a check with this status that the baseline's did not have.
GATE_PRINTED = {"arithmetic": "fails", "ambiguous": "ambiguous"}
# "changed": any claim's verdict or any check's status other than the baseline's.
FAIL_ON = (*GATE_VERDICTS, "at-chance", *GATE_PRINTED, "changed")
# the arithmetic checks of the rerun's own numbers, results.json against itself (judge.py)
COUNT_CHECK, MEAN_CHECK, GAP_CHECK = RERUN_CHECKS = (
    "count out of n", "mean of the seeds", "gap of the means")
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


def family_line(audit: Audit | None) -> str:
    """The Holm line of the first page: how many of the audit's sampled claims differ after
    the family step, and how many only before it; '' when the audit has no family block (an
    audit written before it existed)."""
    fam = (audit or {}).get("family")
    if not fam:
        return ""
    if not fam["k"]:
        return ("differs: none; no claim was judged from sampled runs (each needs 3 seeds per "
                "arm and the claim's own data), so there is no Holm family.")
    line = (f"differs: {fam['differs']} of {fam['k']} claims judged from sampled runs (Holm, "
            f"family-wise {fam['alpha']:.0%})")
    only = fam["beyond_unadjusted"] - fam["differs"]
    if only:
        line += (f"; {only} more at the claim's own {fam['alpha']:.0%} level only, not after "
                 "Holm (inconclusive)")
    return line + "."
