"""What every audit rule takes and returns: the `Context` it reads (the registry, the run's
outputs, the margins) and the `Verdict` it gives, and what rules.py and web_text.py read of a
claim alike (its seeds, its printed seed sd, its order)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.audit.claims import Claim, Relation
from harness.audit.decide import decide_order, decide_printed_order
from harness.records import names
from harness.records.schemas import Reference, Results
from harness.stats.equivalence import ALPHA
from harness.stats.estimators import TwoLevel


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str
    evidence: Mapping[str, Any]


@dataclass(frozen=True)
class Level:
    """What a sampled claim is judged at: the alpha of "reproduced" (and of an order or a
    pattern seen), the claim's own alpha of "differs" before the family's Holm, and the margin
    (None: the registry's or params.yaml's). A sequential look sets the alphas it spends and
    the margins the plan registered (harness.audit.looks); one fixed look is ALPHA and ALPHA."""

    alpha: float = ALPHA
    alpha_differs: float = ALPHA
    margin: float | None = None


@dataclass(frozen=True)
class Context:
    """What the rules read: the registry (for formulas), the run's outputs (None if absent),
    the relations across claims, the equivalence margins per metric, and per claim the level a
    sequential look judges it at (`levels`; absent: `Level()`)."""

    claims: Mapping[str, Claim]
    profile: str
    results: Results | None = None
    theory: Mapping[str, Any] | None = None
    relations: tuple[Relation, ...] = ()
    margins: Mapping[str, float] = field(default_factory=names.default_margins)
    reference: Reference | None = None  # runs/reference/wit1024.json (public models)
    web_text: Mapping[str, Any] | None = None  # runs/recap_scores.json (the recap profile)
    levels: Mapping[str, Level] = field(default_factory=dict)

    def level(self, claim: Claim) -> Level:
        return self.levels.get(claim.id, Level())


def claim_seeds(claim: Claim) -> int:
    """How many seeds the claimed number averages (1 when the registry does not say)."""
    return int(claim.setup.get("seeds") or claim.spread.n or 1)


# d2(n) = E(range) / sd of n normal draws (Tippett 1925, Biometrika 17; the d2 column of
# control-chart tables, e.g. Montgomery, Introduction to Statistical Quality Control, App. VI)
D2 = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534}


def claim_sd(claim: Claim) -> float | None:
    """The sd of one seed of the claim's recipe where the registry prints its spread over its
    seeds as a half-range (the paper's mean +- half-range over three seeds): range / d2(n) =
    2 h / d2(n), an unbiased estimate with about n - 1 df (Patnaik 1950, Biometrika 37: 1.98
    df at n = 3); None otherwise (no printed seed spread: the rerun's own stands in)."""
    spread = claim.spread
    if spread.kind != "half_range" or spread.half_range is None or spread.n not in D2:
        return None
    return 2 * float(spread.half_range) / D2[int(spread.n)]


def judge_order(claim: Claim, est: TwoLevel, margin: float, claims: Mapping[str, Claim],
                alpha: float = ALPHA, alpha_differs: float | None = None
                ) -> tuple[str, str, dict[str, Any]]:
    """An order claim ("a beats b") on the claim's own profile, the one reading shared by the
    Flickr30k and web-text rules: a gap the article prints ("by +.103") by
    `decide_printed_order`, which also needs the order; otherwise (no gap printed, or one
    only implied by two printed numbers, `check.of`, each judged as a claim of its own) the
    order alone by `decide_order`, with the implied gap said beside it."""
    assert claim.check is not None
    what = f"{claim.check.a} - {claim.check.b} on {claim.check.key}"
    if claim.metric == "difference" and not claim.check.of:
        return decide_printed_order(est, what, claim.scalar(), margin, claim_seeds(claim),
                                    claim.check.min_gap, alpha, claim_sd(claim), alpha_differs)
    verdict, reason, evidence = decide_order(est, what, claim.check.min_gap, alpha,
                                             alpha_differs)
    if claim.check.of:
        a, b = (claims[c].scalar() for c in claim.check.of)
        reason = (f"{reason} (the claim's numbers {a:g} and {b:g} are judged as claims of their "
                  f"own: {', '.join(claim.check.of)})")
    return verdict, reason, evidence


def with_chance(reason: str, flags: Mapping[str, Any]) -> str:
    """`reason` with each arm at chance in `flags` named: its chance level inside its interval."""
    if not flags:
        return reason
    said = ", ".join(f"{a} at chance ({v['chance']:.4f} inside [{v['ci'][0]:.4f}, "
                     f"{v['ci'][1]:.4f}])" for a, v in flags.items())
    return f"{reason}; {said}"
