"""harness.audit: each rule on a hand-made results.json, the rounding-aware arithmetic on a
planted error, GRIM, the params-hash refusal, and the real registry on the world profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.audit import (
    RULES,
    VERDICTS,
    AuditError,
    Context,
    arithmetic_checks,
    audit,
    check_params_hash,
    cli,
    grim,
)
from harness.claims import RULE_NAMES, load_claims, parse_registry

REPO = Path(__file__).parents[1]
FLICKR = {"dataset": "flickr30k", "n_test": 1000, "scale": "flickr"}
REP = {"article": "rerun_article", "section": "Our rerun"}


def claim(cid: str, kind: str, value: float, printed: str, **extra: Any) -> dict[str, Any]:
    return {"id": cid, "statement": cid, "kind": kind, "value": value, "printed": printed,
            "metric": extra.pop("metric", "r_at_1"), "where": "test", "source": "paper",
            "reported_by": REP, **extra}


def metric(mean: float, lo: float, hi: float) -> dict[str, Any]:
    return {"values": {"0": mean}, "mean": mean, "ci": [lo, hi], "n": 1000,
            "ci_method": "percentile bootstrap over test pairs", "n_resamples": 1000}


RESULTS = {
    "schema": "prh.results/1", "profile": "flickr30k", "params_hash": "abc", "n_test": 1000,
    "arms": {"good": {"metrics": {"r_at_1": metric(0.243, 0.217, 0.270)}},
             "bad": {"metrics": {"r_at_1": metric(0.140, 0.119, 0.162),
                                 "mknn10": metric(0.136, 0.1335, 0.1385)}},
             "ntp": {"metrics": {"r_at_1": metric(0.125, 0.105, 0.146)}}},
    "gaps": [{"a": "good", "b": "bad", "metric": "r_at_1", "diff": 0.103, "ci": [0.075, 0.131]},
             {"a": "bad", "b": "ntp", "metric": "r_at_1", "diff": 0.015, "ci": [-0.009, 0.04]},
             {"a": "good", "b": "ntp", "metric": "r_at_1", "diff": 0.118, "ci": [0.089, 0.147]}],
}
THEORY = {"grid": {"params": {"n_worlds": 4}, "max_abs_error_minus_2r": 3e-14,
                   "tie_rows": [{"r": 4}, {"r": 3}]},
          "bound": {"params": {"n_worlds": 300}, "all_hold": True, "largest_ratio": 0.18}}

REGISTRY = [
    claim("good_r1", "flickr_measurable", 0.246, ".246", setup={**FLICKR, "arm": "good"}),
    claim("ntp_r1", "flickr_measurable", 0.118, ".118", setup={**FLICKR, "arm": "ntp"},
          spread={"kind": "half_range", "half_range": 0.002}),
    claim("bad_mknn", "flickr_measurable", 0.132, ".132", metric="mknn10",
          setup={**FLICKR, "arm": "bad"}, spread={"kind": "half_range", "half_range": 0.001}),
    claim("bad_far", "flickr_measurable", 0.300, ".300", setup={**FLICKR, "arm": "bad"},
          spread={"kind": "half_range", "half_range": 0.002}),
    claim("good_curve", "flickr_measurable", 0.036, ".036",
          setup={**FLICKR, "arm": "good", "variant": "epoch 1"}),
    claim("good_other_n", "flickr_measurable", 0.246, ".246",
          setup={**FLICKR, "arm": "good", "n_test": 5000}),
    claim("ord_gb", "ordering", 0.246, ".246", setup=FLICKR, check={"a": "good", "b": "bad",
                                                                    "key": "r_at_1"}),
    claim("ord_bn", "ordering", 0.133, ".133", setup=FLICKR, check={"a": "bad", "b": "ntp",
                                                                    "key": "r_at_1"}),
    claim("ord_bg", "ordering", 0.140, ".140", setup=FLICKR, check={"a": "bad", "b": "good",
                                                                    "key": "r_at_1"}),
    claim("ord_web", "ordering", 0.184, ".184", setup={"scale": "web"},
          check={"a": "good", "b": "ntp", "key": "wit_mknn10"}),
    claim("th_2r", "theory", 6e-14, "6e-14", metric="abs_error",
          check={"key": "grid.max_abs_error_minus_2r", "op": "le", "bound": 1e-9}),
    claim("th_ties", "theory", 4, "4", metric="count",
          check={"key": "grid.tie_rows.r", "op": "eq", "bound": 4}),
    claim("th_grid", "theory", 545, "545", metric="count",
          check={"key": "grid.n_under", "op": "eq", "bound": 545,
                 "requires": {"grid.params.n_worlds": 20}}),
    claim("web", "web_scale", 0.184, ".184", why_not_rerun="scale"),
    claim("meta", "metadata", 1014, "1,014", metric="count"),
    claim("s1", "web_scale", 0.191, ".191"), claim("s2", "web_scale", 0.181, ".181"),
    claim("s3", "web_scale", 0.179, ".179"),
    claim("mean_ok", "derived_arithmetic", 0.184, ".184", formula="mean(s1, s2, s3)"),
    claim("mean_planted", "derived_arithmetic", 0.190, ".190", formula="mean(s1, s2, s3)"),
    claim("floor", "derived_arithmetic", 0.056, ".056", formula="min(s1, s3) - 0.125", op="ge"),
]

EXPECTED = {
    "good_r1": "reproduced", "ntp_r1": "inconclusive", "bad_mknn": "differs",
    "bad_far": "differs", "good_curve": "not rerun", "good_other_n": "not comparable",
    "ord_gb": "reproduced", "ord_bn": "inconclusive", "ord_bg": "differs", "ord_web": "not rerun",
    "th_2r": "reproduced", "th_ties": "differs", "th_grid": "not comparable", "web": "not rerun",
    "meta": "not rerun", "s1": "not rerun", "s2": "not rerun", "s3": "not rerun",
    "mean_ok": "arithmetic holds", "mean_planted": "arithmetic fails",
    "floor": "arithmetic fails",
}


def run_small(profile: str = "flickr30k") -> dict[str, Any]:
    claims = parse_registry(REGISTRY)
    return audit(claims, Context(claims, profile, RESULTS, THEORY))


def test_rules_table_matches_registry_names() -> None:
    assert set(RULES) == set(RULE_NAMES)


def test_each_rule_gives_the_expected_verdict() -> None:
    doc = run_small()
    got = {r["id"]: r["verdict"] for r in doc["claims"]}
    assert got == EXPECTED
    by_id = {r["id"]: r for r in doc["claims"]}
    ntp = by_id["ntp_r1"]["evidence"]  # the rerun article's case: .125 vs .118 +- .002
    assert ntp["claim_in_run_ci"] is True and ntp["run_in_claim_range"] is False
    assert ntp["claim_range"] == pytest.approx([0.116, 0.120])
    assert "setup.n_test: claim 5000, run 1000" in by_id["good_other_n"]["reason"]
    assert "grid.params.n_worlds: claim 20, run 4" in by_id["th_grid"]["reason"]
    assert by_id["web"]["reason"].startswith("scale:")
    assert by_id["ord_bn"]["evidence"]["ci"] == [-0.009, 0.04]
    assert sum(doc["summary"].values()) == len(REGISTRY)


def test_world_profile_makes_flickr_numbers_not_comparable_but_checks_orderings() -> None:
    doc = run_small("world")
    got = {r["id"]: r["verdict"] for r in doc["claims"]}
    assert got["good_r1"] == "not comparable" and got["ord_gb"] == "reproduced"
    reason = next(r["reason"] for r in doc["claims"] if r["id"] == "good_r1")
    assert reason == "setup.dataset: claim flickr30k, run profile world"


def test_planted_arithmetic_error_is_flagged_with_its_numbers() -> None:
    checks = {r["id"]: r for r in run_small()["arithmetic"] if r["check"] == "relation"}
    bad = checks["mean_planted"]
    assert bad["status"] == "fails"
    assert bad["recomputed"] == pytest.approx((0.191 + 0.181 + 0.179) / 3)
    assert bad["recomputed_range"] == pytest.approx([0.551 / 3 - 0.0005, 0.551 / 3 + 0.0005])
    assert bad["printed_stands_for"] == pytest.approx([0.1895, 0.1905])
    assert checks["mean_ok"]["status"] == "holds"  # .1837 prints as .184
    assert checks["floor"]["recomputed"] == pytest.approx(0.054)


def test_grim() -> None:
    assert grim(".243", 1000) and grim("0.193", 981, per_item=10)
    assert not grim(".5", 3)  # 1/3 and 2/3 only
    assert not grim(".2435", 100)  # 24/100 and 25/100 both miss [.24345, .24355)
    results = {"n_test": 200, "arms": {"good": {"metrics": {"r_at_1": {
        "values": {"0": 0.205, "1": 0.2033}}}}}}
    rows = {r["id"]: r["status"] for r in arithmetic_checks({}, results)}
    assert rows == {"results:good-s0:r_at_1": "holds", "results:good-s1:r_at_1": "fails"}


def test_params_hash_mismatch_is_refused_with_both_hashes() -> None:
    with pytest.raises(AuditError, match="params hash abc differs from the expected 94111"):
        check_params_hash(RESULTS, "94111361e304d30c", "runs/results.json")


def test_real_registry_arithmetic_findings() -> None:
    claims = load_claims()
    found = {r["id"]: r for r in arithmetic_checks(claims) if r["status"] != "holds"}
    assert set(found) == {"param_ratio_660", "view_gap_floor_ntp", "view_gap_floor_bad"}
    assert found["param_ratio_660"]["recomputed"] == pytest.approx(660.55, abs=0.01)
    assert found["param_ratio_660"]["status"] == "holds within input rounding"
    assert found["view_gap_floor_ntp"]["recomputed"] == pytest.approx(0.037)
    assert found["view_gap_floor_bad"]["recomputed"] == pytest.approx(0.054)


def test_cli_on_world_profile_gives_every_claim_a_verdict(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    from harness.params import load_params
    params = load_params(REPO / "params.yaml", validate=False)
    results = {**RESULTS, "profile": params.profile, "params_hash": params.hash}
    (tmp_path / "results.json").write_text(json.dumps(results))
    theory = {"grid": {"good_view_max_abs_error": 1e-15, "under_max_abs_error": 2e-15,
                       "threshold_holds": True, "above_min_r": 1,
                       "max_abs_error_minus_2r": 5e-14, "tie_rows": [{"r": 4}]},
              "bound": {"all_hold": True, "largest_ratio": 0.2}}
    (tmp_path / "theory.json").write_text(json.dumps(theory))
    out = tmp_path / "audit.json"
    assert cli(["--claims", str(REPO / "harness/claims.yaml"),
                "--results", str(tmp_path / "results.json"),
                "--theory", str(tmp_path / "theory.json"),
                "--contamination", str(tmp_path / "none.json"),
                "--params", str(REPO / "params.yaml"), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    verdicts = {r["id"]: r["verdict"] for r in doc["claims"]}
    assert set(verdicts.values()) <= set(VERDICTS) and len(verdicts) == len(load_claims())
    assert {verdicts[k] for k in ("theory_good_max_error", "theory_n_under", "theory_n_above",
                                  "theory_err_equals_2r", "theory_tie_rows_r",
                                  "theory_bound_worlds", "theory_bound_max_ratio")} \
        == {"reproduced"}
    assert verdicts["rerun_gap_good_bad_r1"] == "reproduced"
    assert verdicts["paper_order_bad_ntp_r1"] == "inconclusive"
    assert verdicts["paper_good_r1"] == "not comparable"
    assert verdicts["view_gap_floor_bad"] == "arithmetic fails"
    assert str(tmp_path / "results.json") in doc["inputs"]
    printed = capsys.readouterr().out
    assert "arithmetic holds" in printed and "not comparable" in printed
    (tmp_path / "results.json").write_text(json.dumps({**results, "params_hash": "0000"}))
    with pytest.raises(AuditError, match=f"0000 differs from the expected {params.hash}"):
        cli(["--results", str(tmp_path / "results.json"), "--params", str(REPO / "params.yaml"),
             "--claims", str(REPO / "harness/claims.yaml"), "--out", str(out)])
