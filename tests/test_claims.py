"""harness.claims: the registry validates, its numbers are the articles' numbers, and every
kind of bad entry is refused with the entry id and the field named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.claims import (
    ARTICLES,
    ClaimsError,
    decimals,
    get_claim,
    load_claims,
    parse_number,
    parse_registry,
    printed_interval,
)

ARTICLE_DIR = Path(__file__).parents[2] / "shared" / "articles"

GOOD: dict[str, Any] = {
    "id": "seed_a", "statement": "A seed value.", "value": 0.191, "printed": "0.191",
    "metric": "wit_mknn10", "where": "Appendix C", "source": "paper", "kind": "web_scale",
    "reported_by": {"article": "audit_article", "section": "The Numbers That Shake"},
}


def entry(**changes: Any) -> dict[str, Any]:
    rec = {**GOOD, **changes}
    return {k: v for k, v in rec.items() if v is not None}


def test_registry_validates_and_covers_every_kind() -> None:
    claims = load_claims()
    assert len(claims) >= 250
    kinds = {c.kind for c in claims.values()}
    assert kinds == {"flickr_measurable", "web_scale", "theory", "derived_arithmetic",
                     "metadata", "ordering"}
    assert {c.source for c in claims.values()} == {"paper", "rerun"}
    four = get_claim(claims, "wit_good_109m_seed4")
    assert four.value == 0.121 and four.setup["variant"]


@pytest.mark.articles
def test_every_printed_value_appears_in_its_article() -> None:
    if not ARTICLE_DIR.is_dir():
        pytest.skip(f"{ARTICLE_DIR} absent")
    texts = {k: (ARTICLE_DIR / f).read_text(encoding="utf-8") for k, f in ARTICLES.items()}
    missing = []
    for c in load_claims().values():
        shown = [c.quote] if c.quote else (
            list(c.printed.values()) if isinstance(c.printed, dict) else [c.printed])
        missing += [(c.id, s) for s in shown if s not in texts[c.reported_by]]
    assert missing == []


def test_rounding_helpers() -> None:
    assert printed_interval(".184") == pytest.approx((0.1835, 0.1845))
    assert printed_interval("42") == pytest.approx((41.5, 42.5))
    assert decimals("5.3e-15") == 16 and decimals("220,992") == 0 and decimals("43.9%") == 1
    assert parse_number("−.009", "x") == -0.009 and parse_number("three", "x") == 3.0


@pytest.mark.parametrize("changes, field", [
    ({"kind": "web_scael"}, "field kind: unknown value 'web_scael' (did you mean 'web_scale'?)"),
    ({"source": None}, "field source"),
    ({"value": "0.1.9"}, "field value: malformed number"),
    ({"printed": "abc"}, "field printed: malformed number"),
    ({"value": 0.2}, "does not round to printed '0.191'"),
    ({"metric": "r_at_2"}, "field metric"),
    ({"reported_by": {"article": "blog", "section": "x"}}, "field reported_by.article"),
    ({"setup": {"arm": "great"}}, "field setup.arm"),
    ({"setup": {"gpu": "A100"}}, "field setup: unknown key"),
    ({"spread": {"kind": "ci", "lo": 0.1}}, "field spread: kind ci needs"),
    ({"kind": "derived_arithmetic"}, "missing field 'formula'"),
    ({"formula": "__import__('os')"}, "field formula"),
    ({"colour": "red"}, "unknown field(s) ['colour']"),
])
def test_validator_names_entry_and_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ClaimsError) as err:
        parse_registry({"claims": [entry(**changes)]}, "reg.yaml")
    msg = str(err.value)
    assert "reg.yaml" in msg and "seed_a" in msg and field in msg


def test_unknown_formula_id_gets_a_suggestion() -> None:
    derived = entry(id="mean_ab", kind="derived_arithmetic", formula="mean(seed_a, seed_bb)",
                    value=0.186, printed="0.186")
    with pytest.raises(ClaimsError, match=r"mean_ab field formula: unknown id 'seed_bb' "
                                          r"\(did you mean 'seed_b'\?\)"):
        parse_registry([entry(), entry(id="seed_b", value=0.181, printed="0.181"), derived])


def test_duplicates_and_unknown_ids_and_templates() -> None:
    with pytest.raises(ClaimsError, match="duplicate id 'seed_a'"):
        parse_registry([entry(), entry()])
    claims = parse_registry([entry()])
    with pytest.raises(KeyError, match="did you mean 'seed_a'"):
        get_claim(claims, "seed_aa")
    doc = {"templates": {"appc": {"source": "paper", "kind": "web_scale"}},
           "claims": [entry(source=None, kind=None, include="appcc")]}
    with pytest.raises(ClaimsError, match="unknown template 'appcc' \\(did you mean 'appc'"):
        parse_registry(doc)
    doc["claims"] = [entry(source=None, kind=None, include="appc")]
    assert parse_registry(doc)["seed_a"].kind == "web_scale"


def test_missing_registry_file(tmp_path: Path) -> None:
    with pytest.raises(ClaimsError, match="registry not found"):
        load_claims(tmp_path / "nope.yaml")
