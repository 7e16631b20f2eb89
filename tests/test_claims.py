"""harness.audit.claims: the registry validates, its numbers are the articles' numbers, and every
kind of bad entry is refused with the entry id and the field named."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness.audit.claims import (
    ARTICLES,
    ClaimsError,
    decimals,
    get_claim,
    load_claims,
    load_registry,
    parse_number,
    parse_registry,
    printed_interval,
)

# the articles' texts are not shipped; point PRH_ARTICLES_DIR at a folder holding them
ARTICLE_DIR = Path(os.environ.get("PRH_ARTICLES_DIR", "articles"))

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
    assert {c.source for c in claims.values()} == {"paper", "code", "rerun", "article", "press"}
    four = get_claim(claims, "wit_good_109m_seed4")
    assert four.value == 0.121 and four.setup["variant"]


@pytest.mark.articles
def test_every_printed_value_appears_in_its_article() -> None:
    if not ARTICLE_DIR.is_dir():
        pytest.skip(f"{ARTICLE_DIR} absent")
    files = [p.read_text(encoding="utf-8") for p in sorted(ARTICLE_DIR.glob("*.txt"))]
    texts = {k: next((t for t in files if phrase in t), "") for k, phrase in ARTICLES.items()}
    if not all(texts.values()):
        pytest.skip(f"{ARTICLE_DIR} lacks one of the articles")
    missing = []
    for c in load_claims().values():
        if c.check is not None and c.check.of:
            continue  # the gap of two claims, each checked on its own
        shown = [c.quote] if c.quote else (
            list(c.printed.values()) if isinstance(c.printed, dict) else [c.printed])
        missing += [(c.id, s) for s in shown if s not in texts[c.reported_by]]
    assert missing == []


def test_rounding_helpers() -> None:
    assert printed_interval(".184") == pytest.approx((0.1835, 0.1845))
    assert printed_interval("42") == pytest.approx((41.5, 42.5))
    assert decimals("5.3e-15") == 16 and decimals("220,992") == 0 and decimals("43.9%") == 1
    assert parse_number("−.009", "x") == -0.009 and parse_number("three", "x") == 3.0
    assert parse_number("six", "x") == 6.0 and parse_number("41.7×", "x") == 41.7


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
    ({"spread": {"kind": "ci", "lo": 0.2, "hi": 0.3}}, "does not contain the value 0.191"),
    ({"spread": {"kind": "half_range", "half_range": -0.01}}, "half_range -0.01 is negative"),
    ({"margin": 0}, "field margin: margin 0 must be above 0"),
    ({"margin": -0.01}, "field margin: margin -0.01 must be above 0"),
    ({"scale": 0}, "field scale: 0 must be above 0"),
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


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "claims.yaml"
    path.write_text(text)
    return path


def test_bad_input_names_claim_id_and_registry_line(tmp_path: Path) -> None:
    head = ("claims:\n"
            "- {id: seed_a, statement: a, value: 0.191, printed: '0.191', metric: wit_mknn10,\n"
            "   where: x, source: paper, kind: web_scale,\n"
            "   reported_by: {article: audit_article, section: s}}\n")
    derived = ("- {id: %s, statement: d, value: 0.2, printed: '0.2', metric: wit_mknn10,"
               " where: x, source: article, kind: derived_arithmetic, formula: '%s',"
               " reported_by: {article: audit_article, section: s}}\n")
    with pytest.raises(ClaimsError, match=r"claims.yaml:5: entry d1 field formula: unknown id "
                                          r"'seed_b' \(did you mean 'seed_a'\?\)"):
        load_registry(write(tmp_path, head + derived % ("d1", "seed_a + seed_b")))
    cyc = head + derived % ("d1", "d2 + seed_a") + derived % ("d2", "d1 - seed_a")
    with pytest.raises(ClaimsError, match=r"claims.yaml:5: entry d1 field formula: formula "
                                          r"cycle d1 -> d2 -> d1"):
        load_registry(write(tmp_path, cyc))
    across = head + ("- {id: r1, statement: r, value: 0.2, printed: '0.2', metric: r_at_1,"
                     " where: x, source: paper, kind: web_scale,"
                     " reported_by: {article: audit_article, section: s}}\n"
                     "relations:\n"
                     "- {id: cmp, type: compare, a: seed_a, op: gt, b: r1, statement: c,\n"
                     "   reported_by: {article: audit_article, section: s}}\n")
    with pytest.raises(ClaimsError, match=r"claims.yaml:7: relation 0 \(relation cmp\) "
                                          r"reading 0: relation across units"):
        load_registry(write(tmp_path, across))
    unknown = across.replace("b: r1", "b: r2")
    with pytest.raises(ClaimsError, match=r"relation cmp\) reading 0: unknown claim id 'r2'"):
        load_registry(write(tmp_path, unknown))
    spread = head.replace("kind: web_scale,", "kind: web_scale, spread: {kind: ci, lo: .1, "
                                              "hi: .15},")
    with pytest.raises(ClaimsError, match=r"claims.yaml:2: entry 0 \(id seed_a\) field spread: "
                                          r"interval \[0.1, 0.15\] does not contain"):
        load_registry(write(tmp_path, spread))


def test_templates_deep_merge_setup_and_null_removes_a_key() -> None:
    doc = {"templates": {"t": {"source": "paper", "kind": "web_scale",
                               "setup": {"dataset": "wit_1024", "n_test": 1024}}},
           "claims": [entry(source=None, kind=None, include="t", setup={"arm": "good"}),
                      entry(id="seed_b", source=None, kind=None, include="t",
                            setup={"dataset": "coco", "n_test": None})]}
    claims = parse_registry(doc)
    assert claims["seed_a"].setup == {"dataset": "wit_1024", "n_test": 1024, "arm": "good"}
    assert claims["seed_b"].setup == {"dataset": "coco"}


def test_relation_readings_need_texts_and_ids() -> None:
    rel = {"id": "r", "type": "compare", "statement": "s",
           "reported_by": {"article": "audit_article", "section": "x"},
           "readings": [{"a": "seed_a", "op": "gt", "b": "seed_b"},
                        {"a": "seed_b", "op": "gt", "b": "seed_a"}]}
    doc = {"claims": [entry(), entry(id="seed_b", value=0.181, printed="0.181")],
           "relations": [rel]}
    with pytest.raises(ClaimsError, match="each reading needs its `reading:` text"):
        parse_registry(doc)
    rel["readings"] = [{**rel["readings"][0], "reading": "one"}]
    with pytest.raises(ClaimsError, match="name at least two readings, or none"):
        parse_registry(doc)


def test_registry_labels() -> None:
    claims = load_claims()
    for cid in ("t3_good_flickr_r1", "t3_ntp_flickr_r1", "t3_bad_flickr_r1",
                "t3_clip_flickr_r1", "t3_mpnet_flickr_r1"):
        assert claims[cid].setup["dataset"] == "flickr30k" and claims[cid].setup["n_test"] == 1000
    assert {claims[c].setup["dataset"] for c in claims if c.endswith("_coco")} == {"coco"}
    assert {claims[c].setup["reference"] for c in claims
            if c.startswith("t3_") and c.endswith("_wit_clip")} == {"clip_vith"}
    assert {(claims[c].setup["dataset"], claims[c].setup["n_test"]) for c in claims
            if c.startswith("t3_") and "_wit" in c} == {("wit_1024", 1024)}
    assert "do not name the variant" in claims["pairfree_clip_r1"].setup["assumed"]
    assert claims["paper_fraction_bad"].reported_by == "audit_article"
    assert "audit article" in claims["paper_fraction_bad"].where
    with_seeds = {c for c in claims if c.startswith("t3_") and "seeds" in claims[c].setup}
    assert with_seeds == {"t3_good_wit", "t3_good_cka", "t3_good_wit_clip"}
    assert claims["param_ratio_660"].source == "article"
    # "660 times" rests on no declared truncation: relation param_ratio_660_rounding reads both
    assert (claims["param_ratio_660"].rounding, claims["param_ratio_660"].formula) == \
        ("nearest", "")
    assert claims["param_ratio_devto"].source == "press"
    assert claims["jepa_tokens_940m"].where != "Appendix C"
    assert "nine models" in claims["contam_max_shift"].statement
    assert claims["qwen72b_params"].scale == 1e9  # ratios across units by scale, not constants
    # no identity relations: no formula is a lone claim id of the same printed value
    lone = [c.id for c in claims.values() if c.formula in claims
            and claims[c.formula].printed == c.printed]
    assert lone == []
