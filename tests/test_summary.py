"""The report's first page (harness.report.summary), its audit table, the reproducibility checklist
(harness.report.checklist) and the PDF's fit to its pages, on the fixture pipeline outputs with a
real audit (harness.audit over the registry)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from harness.audit.claims import load_registry
from harness.audit.decide import at_chance
from harness.audit.judge import audit
from harness.audit.rules import Context
from harness.report.checklist import checklist
from harness.report.context import ReportPaths, build_context
from harness.report.render import brief, render, write_pdf
from harness.report.summary import (
    HEADLINES,
    Headline,
    audit_table,
    first_page,
    fmt,
    headline_rows,
)
from harness.stages.report import main as report_main
from harness.stats.estimators import TwoLevel

FIX = Path(__file__).parent / "fixtures" / "pipeline"
ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def real_audit(results: dict, profile: str = "world") -> dict:
    reg = load_registry(ROOT / "harness" / "audit" / "claims.yaml")
    return audit(reg, Context(reg.claims, profile, results, load("theory.json")))


@pytest.fixture(scope="module")
def doc() -> dict:
    return real_audit(load("results.json"))


def as_ten_seeds(results: dict) -> dict:
    """The fixture's results read as a 10-seed run: each metric and gap gets a two-level
    estimate with training variance (10 seeds, se from its 95% interval, 9 df), so the rules
    for claims about arms decide (below 3 seeds no pattern is seen or not seen)."""
    def block(entry: dict, value: float) -> dict:
        lo, hi = entry["ci"]
        se = (hi - lo) / (2 * 1.96)
        est = TwoLevel(value, se, 9.0, 10, int(entry["n"]), 0, 10 * se ** 2, se ** 2 / 2,
                       "test: ten seeds", se, 9.0, "test: ten seeds")
        return {**entry, "two_level": est.to_dict()}

    arms = {a: {**b, "metrics": {m: block(e, e["mean"]) if "ci" in e else e
                                 for m, e in b["metrics"].items()}}
            for a, b in results["arms"].items()}
    return {**results, "arms": arms, "gaps": [block(g, g["diff"]) for g in results["gaps"]]}


@pytest.fixture(scope="module")
def ten_seeds() -> dict:
    return real_audit(as_ten_seeds(load("results.json")))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, doc: dict) -> Path:
    """The fixture outputs with the real audit in place of the hand-made one."""
    root = tmp_path_factory.mktemp("pipe")
    shutil.copytree(FIX, root, dirs_exist_ok=True)
    (root / "audit.json").write_text(json.dumps(doc))
    return root


def test_headlines_name_registry_claims():
    ids = {c for c in load_registry(ROOT / "harness" / "audit" / "claims.yaml").claims}
    assert all(i in ids for h in HEADLINES for i in h.ids)


def test_world_banner_and_verdicts_qualified_by_the_data(doc: dict):
    results = load("results.json")
    page = first_page(doc, results, "world")
    assert "generated world" in page["banner"] and "not Flickr30k" in page["banner"]
    rows = {r["ids"][0]: r for r in page["headlines"]}
    gap = next(g for g in results["gaps"] if (g["a"], g["b"]) == ("good", "bad"))
    good_bad = rows["paper_order_good_bad_r1"]
    assert good_bad["rerun"]["value"] == f"{gap['diff']:+.3f}" == "+0.117"
    assert good_bad["paper"] == ".246 vs .133"
    # the fixture's bad arm has 2 seeds: no training variance, so no pattern either way
    assert good_bad["said"] == "inconclusive: too few seeds or pairs to decide"
    flickr = rows["paper_good_r1"]
    assert flickr["said"] == ("not comparable: measured on the generated world, the claim is "
                              "about Flickr30k")
    mean = results["arms"]["good"]["metrics"]["r_at_1"]["mean"]
    assert flickr["rerun"]["value"] == f"{mean:.3f}" and "3 seed(s)" in flickr["rerun"]["what"]
    assert first_page(doc, results, "flickr30k")["banner"] is None


def test_an_arm_at_chance_is_flagged_in_its_headline_and_in_words():
    results = copy.deepcopy(load("results.json"))
    ntp = results["arms"]["ntp"]
    ntp["controls"] = {"chance_r_at_1": {"mean": 0.25}}  # inside ntp's interval [.2, .4]
    doc = real_audit(results)
    assert at_chance(results) == doc["at_chance"] and "ntp" in doc["at_chance"]
    page = first_page(doc, results, "world")
    row = next(r for r in page["headlines"] if r["ids"] == ["paper_order_good_ntp_r1"])
    assert row["chance"] == ["ntp at chance on r_at_1"]
    assert page["chance"] == ["The ntp arm is at chance on r_at_1: its interval [0.200, 0.400] "
                              "reaches the chance level 0.2500, so its orderings against other "
                              "arms say nothing."]
    assert first_page(real_audit(load("results.json")), results, "world")["chance"] == []


def test_arithmetic_findings_are_sentences_with_numbers_by_status(doc: dict):
    page = first_page(doc, None, "world")
    findings = [*page["fails"], *page["ambiguous"], *page["rounding"]]
    for key, status in (("fails", "fails"), ("ambiguous", "ambiguous"),
                        ("rounding", "holds within input rounding")):
        assert {f["status"] for f in page[key]} <= {status}, key
    assert len(page["fails"]) == doc["summary"]["relation fails"] + doc["summary"][
        "check fails"]
    sentence = next(f["sentence"] for f in findings
                    if f["id"] == "ci_50m_good_ntp_is_difference")
    assert "0.125 - 0.079 = 0.046" in sentence and "printed +0.050" in sentence


def test_a_headline_whose_claim_left_the_registry_says_so(doc: dict):
    (row,) = headline_rows(doc, None, [Headline("gone", ("no_such_claim",))])
    assert row["verdict"] is None and "not in this audit" in row["said"]


def test_audit_table_puts_findings_before_what_was_not_rerun(ten_seeds: dict):
    doc = ten_seeds
    table = audit_table(doc, brief)
    verdicts = [r["verdict"] for r in table["rows"]]
    assert verdicts.index("not rerun") > max(i for i, v in enumerate(verdicts)
                                             if v.startswith("pattern"))
    assert verdicts[-1] == "not rerun" and verdicts[0].startswith("pattern")
    assert sum(map(len, table["by_id"].values())) == (doc["summary"]["not rerun"]
                                                      + doc["summary"]["arithmetic holds"])
    assert [c["status"] for c in table["checks"]][0] == "fails"


def test_checklist_answers_from_the_run_files():
    results = load("results.json")
    runs = [json.loads(p.read_text()) for p in sorted((FIX / "align").glob("*.json"))]
    items = {i["item"]: i for i in checklist(results, runs, {"profile": "world"},
                                             load("provenance.json"))["items"]}
    assert items["seeds"]["answer"] == "partial"  # bad and ntp have 2 seeds
    assert "good: seeds 0, 1, 2" in items["seeds"]["evidence"]
    assert items["error_bars"]["answer"] == "yes"
    assert "40 test pairs, 1000 resamples" in items["error_bars"]["evidence"][0]
    assert items["compute"]["answer"] == "partial"
    assert "torch: 2.14.1" in items["compute"]["evidence"]
    assert "1 assumed" in items["hyperparameters"]["evidence"][0]
    empty = {i["item"]: i["answer"] for i in checklist(None, [], None, None)["items"]}
    assert empty == {"seeds": "no", "error_bars": "no", "compute": "no",
                     "data_and_code": "partial", "hyperparameters": "partial"}


def test_report_stage_writes_the_checklist_and_a_pdf_that_fits_its_pages(pipeline, tmp_path,
                                                                         capsys):
    out = tmp_path / "r"
    rc = report_main(["--results", str(pipeline / "results.json"), "--runs-dir",
                      str(pipeline / "align"), "--theory", str(pipeline / "theory.json"),
                      "--contamination", str(pipeline / "contamination.json"), "--audit",
                      str(pipeline / "audit.json"), "--params", str(pipeline / "params.yaml"),
                      "--provenance", str(pipeline / "provenance.json"), "--html",
                      f"{out}.html", "--pdf", f"{out}.pdf", "--checklist", f"{out}.json"])
    assert rc == 0 and "past the margin" not in capsys.readouterr().err
    assert json.loads(Path(f"{out}.json").read_text())["schema"] == "prh.checklist/1"
    html = Path(f"{out}.html").read_text()
    assert html.index("Which claims hold?") < html.index("Claims audit") < html.index(
        "Paper vs rerun") and "Generated data, not Flickr30k." in html


def test_off_page_catches_a_cell_that_runs_off(tmp_path):
    wide = "<table><tr><td style='white-space:nowrap'>" + "no_break_" * 60 + "</td></tr></table>"
    off = write_pdf(f"<html><body><p>fits</p>{wide}</body></html>", tmp_path / "bad.pdf")
    assert off and off[0].startswith("page 1: 'no_break_no_break") and "past the margin" in off[0]


def test_first_page_renders_banner_headlines_and_findings(pipeline):
    paths = ReportPaths(pipeline / "results.json", pipeline / "align", pipeline / "theory.json",
                        pipeline / "contamination.json", pipeline / "audit.json",
                        pipeline / "params.yaml", pipeline / "provenance.json")
    html = render(build_context(paths))
    first = html[:html.index("Claims audit")].replace("<wbr>", "")  # ids break only there
    assert "Good views beat bad views" in first and "+0.117" in first
    assert "checks fail" in first and "ci_50m_good_ntp_is_difference" in first


def test_the_prepare_stage_warnings_reach_the_first_page(pipeline, tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"warnings": ["test split: 998 photos, Karpathy's has 1,000"]}))
    paths = ReportPaths(pipeline / "results.json", pipeline / "align", pipeline / "theory.json",
                        pipeline / "contamination.json", pipeline / "audit.json",
                        pipeline / "params.yaml", pipeline / "provenance.json", summary)
    html = render(build_context(paths))
    first = html[:html.index("Claims audit")].replace("<wbr>", "")
    assert f"<b>data check</b>: {summary}: test split: 998 photos, Karpathy&#39;s has 1,000" \
        in first


def test_the_first_page_says_what_rerunning_the_rest_costs(pipeline, doc: dict):
    """Every claim the world run does not measure on its own data sits under one rerun path;
    the public-model claims under the evaluation-only pipeline with their downloads."""
    from harness.audit.paths import ELSEWHERE, load_paths

    paths = doc["rerun_paths"]
    listed = [c for p in paths.values() for c in p["claims"]]
    assert sorted(listed) == sorted(r["id"] for r in doc["claims"]
                                    if r["verdict"] in ELSEWHERE and r["rerun_path"])
    assert len(listed) == len(set(listed))
    assert "t3_qwen72b_wit" in paths["wit1024"]["claims"]
    assert "Qwen/Qwen2.5-72B (145 GB in bf16)" in paths["wit1024"]["models"]
    assert "t3_good_wit" in paths["unavailable"]["claims"]  # 940M images, the 109M encoder
    assert {"t7_captioner_good", "fixed21m_ntp"} <= set(paths["recap"]["claims"])  # 33M, 1 GPU
    models = {c.setup["model"] for c in load_registry().claims.values() if "model" in c.setup}
    assert models <= set(load_paths()["models"])  # every model's download size is known
    ctx = ReportPaths(pipeline / "results.json", pipeline / "align", pipeline / "theory.json",
                      pipeline / "contamination.json", pipeline / "audit.json",
                      pipeline / "params.yaml", pipeline / "provenance.json")
    first = (html := render(build_context(ctx)))[:html.index("Claims audit")]
    assert "What it costs to rerun the claims this run does not measure" in first
    assert "dvc repro pipelines/wit1024/dvc.yaml" in first and "11.5 A100-hours" in first


def test_claims_about_one_comparison_are_shown_together_and_say_why_they_differ(
        ten_seeds: dict):
    """The paper's "bad beats next-token" and the rerun article's "cannot be separated" read
    one interval; where one pattern shows and the other does not, one sentence says why."""
    doc, results = ten_seeds, as_ten_seeds(load("results.json"))
    rows = {r["ids"][0]: r for r in first_page(doc, results, "world")["headlines"]}
    bad_ntp = rows["paper_order_bad_ntp_r1"]
    verdicts = {r["id"]: r["verdict"] for r in doc["claims"]}
    assert verdicts["paper_order_bad_ntp_r1"] != verdicts["rerun_gap_bad_ntp_r1"]
    assert [a["id"] for a in bad_ntp["also"]] == ["rerun_gap_bad_ntp_r1"]
    lo, hi = next(r for r in doc["claims"] if r["id"] == "rerun_gap_bad_ntp_r1")["evidence"]["ci"]
    why = bad_ntp["why"]
    assert f"[{fmt(lo, True)}, {fmt(hi, True)}]" in why
    assert "paper_order_bad_ntp_r1 says that bad beats ntp, which needs the interval above 0" \
        in why and "rerun_gap_bad_ntp_r1 says that bad and ntp cannot be separated" in why
    good_ntp = rows["paper_order_good_ntp_r1"]  # both patterns seen: shown together, no why
    assert [a["id"] for a in good_ntp["also"]] == ["rerun_gap_good_ntp_r1"]
    assert good_ntp["why"] is None
    table = audit_table(doc, brief)["rows"]
    order = [r["id"] for r in table]
    first = order.index("rerun_gap_bad_ntp_r1")
    pair = {"rerun_gap_bad_ntp_r1", "paper_order_bad_ntp_r1"}
    assert set(order[first - 1:first + 1]) == pair or set(order[first:first + 2]) == pair
    assert [r["id"] for r in table if r.get("why")] in (["rerun_gap_bad_ntp_r1"],
                                                        ["paper_order_bad_ntp_r1"])


@pytest.mark.parametrize(("value", "signed", "text"), [
    (True, False, "yes"), (False, False, "no"), (399, False, "399"), (3, True, "+3"),
    (8.9e-15, False, "8.9e−15"), (-2.5e-5, True, "−2.5e−05"), (0.0393333, False, "0.039"),
    (0.0, True, "+0.000"), (None, False, "—")])
def test_numbers_print_by_their_kind(value, signed, text):
    assert fmt(value, signed) == text


def test_pool_size_panels_name_their_y_axis_in_the_metric_tables_words():
    from harness.records import names
    from harness.report.plots import pool_size_curves

    line = {"n": [10, 100], "mean": [0.3, 0.1], "std": [0.01, None]}
    svg = pool_size_curves({m: {"label": names.label(m, 5), "arms": {"good": line},
                                "chance": {"n": [10, 100], "value": [0.1, 0.01]}}
                            for m in ("r_at_1", "mknn5")})
    assert "test R@1" in svg and "mutual 5-NN" in svg


def test_first_page_reads_the_holm_line_off_the_family_block() -> None:
    fam = {"method": "holm", "alpha": 0.05, "k": 16, "members": [], "differs": 1,
           "beyond_unadjusted": 3}
    line = first_page({"claims": [], "family": fam}, None, "flickr30k")["family"]
    assert line == ("differs: 1 of 16 claims judged from sampled runs (Holm, family-wise 5%); "
                    "2 more at the claim's own 5% level only, not after Holm (inconclusive).")
    assert first_page({"claims": []}, None, "flickr30k")["family"] == ""
    none = first_page({"claims": [], "family": {**fam, "k": 0, "differs": 0,
                                                "beyond_unadjusted": 0}}, None, "world")
    assert none["family"].startswith("differs: none; no claim was judged from sampled runs")
