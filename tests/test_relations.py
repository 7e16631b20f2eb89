"""Each relation type across claims fails on a constructed bad input and holds on a good one,
so no check in the audit is one that cannot fail; two readings that disagree are "ambiguous"
and both are named."""

from __future__ import annotations

from typing import Any

import pytest

from harness.audit.claims import ClaimsError, parse_full_registry
from harness.audit.relations import check_relation, grimmer_feasible

REP = {"article": "audit_article", "section": "x"}


def c(cid: str, value: Any, printed: Any, metric: str = "wit_mknn10", **extra: Any
      ) -> dict[str, Any]:
    return {"id": cid, "statement": cid, "value": value, "printed": printed, "metric": metric,
            "where": "x", "source": "paper", "kind": "web_scale", "reported_by": REP, **extra}


CLAIMS = [
    c("good", 0.125, "0.125", setup={"arm": "good"}), c("bad", 0.063, "0.063",
                                                          setup={"arm": "bad"}),
    c("ntp", 0.079, "0.079", setup={"arm": "ntp"}),
    c("gap_ok", 0.062, "+0.062", "difference"), c("gap_bad", 0.050, "+0.050", "difference"),
    c("floor", 0.056, "+.056", "difference"), c("gap_low", 0.054, "+0.054", "difference"),
    c("r1_good", 0.246, ".246", "r_at_1", setup={"arm": "good"}),
    c("r1_bad", 0.133, ".133", "r_at_1", setup={"arm": "bad"}),
    c("r1_ntp", 0.118, ".118", "r_at_1", setup={"arm": "ntp"}),
    c("seeds", {"s1": 0.129, "s2": 0.118, "s3": 0.127},
      {"s1": "0.129", "s2": "0.118", "s3": "0.127"}),
    c("ci_wide", 0.063, "+0.063", "difference",
      spread={"kind": "ci", "lo": 0.043, "hi": 0.083, "printed": "[0.043, 0.083]"}),
    c("ci_narrow", 0.063, "+0.063", "difference",
      spread={"kind": "ci", "lo": 0.058, "hi": 0.068, "printed": "[0.058, 0.068]"}),
    c("gap_ci_ok", 0.103, "+.103", "difference", setup={"n_test": 1000},
      spread={"kind": "ci", "lo": 0.075, "hi": 0.131}),
    c("gap_ci_thin", 0.103, "+.103", "difference", setup={"n_test": 1000},
      spread={"kind": "ci", "lo": 0.098, "hi": 0.108}),
    c("hr_ok", 0.118, ".118", "r_at_1", setup={"seeds": 3, "n_test": 1000},
      spread={"kind": "half_range", "half_range": 0.002, "printed": "± .002"}),
    c("hr_bad", 0.118, ".118", "r_at_1", setup={"seeds": 3, "n_test": 100},
      spread={"kind": "half_range", "half_range": 0.002, "printed": "± .002"}),
    c("chance", 0.001, ".001", "chance_r_at_1"), c("pool_1k", 1000, "1,000", "count"),
    c("pool_15k", 15000, "15,000", "count"),
    c("shift", 0.002, "0.002"), c("clean", 0.193, "0.193"), c("full", 0.184, "0.184"),
    c("seed1", 0.191, "0.191"),
    c("ratio_660", 660, "660", "ratio"), c("ratio_660_6", 660.6, "660.6", "ratio"),
]

# type -> (fields that hold, fields that fail)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "difference": ({"printed": "gap_ok", "a": "good", "b": "bad"},
                   {"printed": "gap_bad", "a": "good", "b": "ntp"}),  # .046 printed as .050
    "compare": ({"a": "good", "op": "gt", "b": "ntp"}, {"a": "bad", "op": "gt", "b": "ntp"}),
    "per_seed_bound": ({"bound": "floor", "op": "ge", "means": ["gap_ok"]},
                       {"bound": "floor", "op": "ge", "means": ["gap_ok", "gap_low"]}),
    "bound": ({"bound": "shift", "op": "le", "quantity": "abs(clean - seed1)"},
              {"bound": "shift", "op": "le", "quantity": "abs(clean - full)"}),
    "same_order": ({"a": ["r1_good", "r1_bad", "r1_ntp"], "b": ["r1_good", "r1_bad", "r1_ntp"]},
                   {"a": ["r1_good", "r1_bad", "r1_ntp"], "b": ["good", "bad", "ntp"]}),
    "interval_vs_seeds": ({"interval": "ci_wide", "seeds": "seeds"},
                          {"interval": "ci_narrow", "seeds": "seeds"}),
    "binomial_min": ({"interval": "gap_ci_ok"}, {"interval": "gap_ci_thin"}),
    "grimmer": ({"mean": "hr_ok"}, {"mean": "hr_bad"}),
    "chance_pool": ({"chance": "chance", "pool": "pool_1k", "k": 1},
                    {"chance": "chance", "pool": "pool_15k", "k": 1}),
    # "660" is 660.6 without its decimals; rounded, 660.6 is 661
    "printed_as": ({"printed": "ratio_660", "quantity": "ratio_660_6", "rounding": "down"},
                   {"printed": "ratio_660", "quantity": "ratio_660_6", "rounding": "nearest"}),
}


def run(rtype: str, fields: dict[str, Any] | None = None,
        readings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    rel = {"id": "rel", "type": rtype, "statement": "s", "reported_by": REP,
           **({"readings": readings} if readings else fields)}
    reg = parse_full_registry({"claims": CLAIMS, "relations": [rel]})
    return check_relation(reg.relations[0], reg.claims)


@pytest.mark.parametrize("rtype", sorted(CASES))
def test_each_relation_holds_on_good_input_and_fails_on_bad(rtype: str) -> None:
    good, bad = CASES[rtype]
    assert run(rtype, good)["status"] == "holds"
    assert run(rtype, bad)["status"] == "fails"


def test_failures_carry_their_numbers() -> None:
    diff = run("difference", CASES["difference"][1])
    assert diff["readings"][0]["recomputed"] == pytest.approx(0.046)
    assert "against printed +0.050" in diff["detail"]
    seeds = run("interval_vs_seeds", CASES["interval_vs_seeds"][1])["readings"][0]
    # t(2, .975) * sd(.129, .118, .127) / sqrt(3)
    assert seeds["needed_half_width"] == pytest.approx(4.3027 * 0.0058595 / 3 ** 0.5, rel=1e-3)
    assert "covers test pairs only" in seeds["detail"]
    thin = run("binomial_min", CASES["binomial_min"][1])["readings"][0]
    assert thin["min_width"] == pytest.approx(0.9 * 2 * 1.96 * (0.103 * 0.897 / 1000) ** 0.5,
                                              rel=1e-3)
    assert run("same_order", CASES["same_order"][1])["detail"] == \
        "good > bad > ntp against good > ntp > bad"


def test_two_readings_that_disagree_are_ambiguous_and_both_named() -> None:
    good, bad = CASES["bound"]
    out = run("bound", readings=[{"reading": "against the mean", **bad},
                                 {"reading": "against the first seed", **good}])
    assert out["status"] == "ambiguous"
    assert out["detail"].startswith("reading 1 (against the mean): fails")
    assert "reading 2 (against the first seed): holds" in out["detail"]
    both_hold = run("bound", readings=[{"reading": "one", **good}, {"reading": "two", **good}])
    assert both_hold["status"] == "holds"


def test_printed_as_names_its_rounding() -> None:
    out = run("printed_as", CASES["printed_as"][1])["readings"][0]
    assert out["printed_stands_for"] == pytest.approx([659.5, 660.5])
    assert out["detail"].endswith("stands for [659.5, 660.5) when rounded")
    with pytest.raises(ClaimsError, match="unknown value 'up'"):
        run("printed_as", {**CASES["printed_as"][0], "rounding": "up"})
    with pytest.raises(ClaimsError, match="relation across units"):
        run("printed_as", {**CASES["printed_as"][0], "quantity": "good"})


@pytest.mark.parametrize("mean, half, seeds, n, ok", [
    (".118", ".002", 3, 1000, True),    # e.g. 116, 118, 120 out of 1,000
    (".118", ".002", 3, 100, False),    # hundredths: the mean cannot round to .118
    (".5", ".1", 2, 10, True),          # 4/10 and 6/10
    (".50", ".05", 2, 10, False),       # two seeds 1/10 apart have a mean ending in 5
    (".50", ".00", 1, 4, True),
    (".50", ".10", 1, 4, False),        # one seed has no spread
])
def test_grimmer_feasibility(mean: str, half: str, seeds: int, n: int, ok: bool) -> None:
    assert grimmer_feasible(mean, half, seeds, n) is ok
