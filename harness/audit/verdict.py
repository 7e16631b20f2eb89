"""What every audit rule takes and returns: the `Context` it reads (the registry, the run's
outputs, the margins) and the `Verdict` it gives; rules.py and web_text.py share them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.audit.claims import Claim, Relation
from harness.records import names
from harness.records.schemas import Reference, Results


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str
    evidence: Mapping[str, Any]


@dataclass(frozen=True)
class Context:
    """What the rules read: the registry (for formulas), the run's outputs (None if absent),
    the relations across claims and the equivalence margins per metric."""

    claims: Mapping[str, Claim]
    profile: str
    results: Results | None = None
    theory: Mapping[str, Any] | None = None
    relations: tuple[Relation, ...] = ()
    margins: Mapping[str, float] = field(default_factory=names.default_margins)
    reference: Reference | None = None  # runs/reference/wit1024.json (public models)
    web_text: Mapping[str, Any] | None = None  # runs/recap_scores.json (the recap profile)


def claim_seeds(claim: Claim) -> int:
    """How many seeds the claimed number averages (1 when the registry does not say)."""
    return int(claim.setup.get("seeds") or claim.spread.n or 1)


def with_chance(reason: str, flags: Mapping[str, Any]) -> str:
    """`reason` with each arm at chance in `flags` named: its chance level inside its interval."""
    if not flags:
        return reason
    said = ", ".join(f"{a} at chance ({v['chance']:.4f} inside [{v['ci'][0]:.4f}, "
                     f"{v['ci'][1]:.4f}])" for a, v in flags.items())
    return f"{reason}; {said}"
