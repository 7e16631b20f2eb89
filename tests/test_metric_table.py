"""The metric table (harness.records.names) is the one home of a metric's label, margin, flat
name and views: a row added there, with prh's per-pair outcome and a claim, reaches results.json,
the audit (its vocabulary and margin), DVC's flat view and the report with no other file
edited; and the lists that read the table hold what each consumer showed before it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from harness.audit import web_text
from harness.audit.claims import REGISTRY, load_registry
from harness.audit.judge import audit
from harness.audit.rules import Context
from harness.records import flat, names, reference
from harness.records.results import aggregate_runs
from harness.report.context import section_paper_vs_rerun

ROOT = Path(__file__).resolve().parents[1]
R_AT_3 = names.Metric("r_at_3", "R@3", "score", "image → text R@3", margin=0.05,
                      short="r_at_3", views=frozenset({"arm"}))


def test_a_metric_added_as_one_row_reaches_results_the_audit_and_the_report(
        monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(names, "TABLE", (*names.TABLE, R_AT_3))
    rng = np.random.default_rng(0)
    arms, seeds, n = ("good", "bad", "ntp"), (0, 1, 2), 1000
    per_query = {(a, s): {"r_at_1_hit": (rng.random(n) < 0.2).astype(float),
                          "r_at_3_hit": (rng.random(n) < 0.3).astype(float),
                          "mknn10": rng.random(n) * 0.3}
                 for a in arms for s in seeds}
    res = aggregate_runs(per_query, {key: {} for key in per_query}, arms, seeds, k=10,
                         level=0.95, n_resamples=200, seed=0)
    # the mean of 3,000 hits at .3 has sd .0084 (sqrt(.21 / 3,000)): .03 is 3.6 sd
    assert abs(res["arms"]["good"]["metrics"]["r_at_3"]["mean"] - 0.3) < 0.03
    assert "r_at_3" in flat.aggregate_metrics(res, 10)["good"]

    doc = yaml.safe_load(REGISTRY.read_text())
    doc["claims"].append({"id": "paper_good_r3", "include": "paper_flickr", "metric": "r_at_3",
                          "value": 0.30, "printed": ".30", "setup": {"arm": "good"},
                          "statement": "Held out - good views, R@3 .30."})
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    reg = load_registry(path)
    row = next(r for r in audit(reg, Context(reg.claims, "flickr30k",
                                             {**res, "profile": "flickr30k", "n_test": n}))
               ["claims"] if r["id"] == "paper_good_r3")
    assert row["verdict"] == "reproduced" and row["evidence"]["margin"] == 0.05  # the row's

    shown = [r for r in section_paper_vs_rerun(res, {})["rows"] if r["metric"] == "r_at_3"]
    assert [r["label"] for r in shown] == ["R@3"] * 3


def test_the_table_gives_each_consumer_the_list_it_showed() -> None:
    assert names.headline(5) == ("r_at_1", "mknn5")
    assert names.arm_metrics(10) == ("r_at_1", "r_at_5", "mknn10")
    assert names.flat_names(10) == {
        "r_at_1": "r_at_1", "r_at_5": "r_at_5", "mknn10": "mknn10", "r_at_1_fit": "r_at_1_fit",
        "control_random_map_r_at_1": "control_random",
        "control_shuffled_r_at_1": "control_shuffled", "chance_r_at_1": "chance"}
    assert names.run_scalars(7) == ("r_at_1_fit", "control_random_map_r_at_1",
                                    "control_shuffled_r_at_1", "chance_r_at_1", "chance_mknn7",
                                    "chance_foscttm")
    assert reference.WIT_METRICS == {"wit_mknn10": ("mutual_knn", 10),
                                     "wit_mknn10_clip": ("mutual_knn", 10),
                                     "wit_cka": ("cka", None)}
    assert reference.COCO_METRICS == {"coco_mknn10": ("mutual_knn", 10)}
    # the margins the audit's design names (the table's MARGINS comment), as literals
    assert names.default_margins(5) == {
        "r_at_1": 0.03, "r_at_5": 0.03, "mknn5": 0.01, "r_at_1_fit": 0.03,
        "control_random_map_r_at_1": 0.005, "control_shuffled_r_at_1": 0.005,
        "wit_mknn10": 0.005, "wit_mknn10_clip": 0.005, "wit_cka": 0.01, "coco_mknn10": 0.005,
        "sts_spearman": 0.01, "pairfree_r_at_1": 0.005}
    assert names.label("mknn5", 5) == "mutual 5-NN"
    assert len({m.name for m in names.TABLE}) == len(names.TABLE)  # one row a name
    # a web-text claim's metric -> its benchmark; the metric each benchmark scores names it back
    assert web_text.BENCHMARK == {"r_at_1": "flickr30k", "mknn10": "wit1024",
                                  "wit_mknn10": "wit1024"}
    for b, (_, at) in names.WEB_TEXT_BENCHMARKS.items():
        assert names.row(at(5), 5).benchmark == b


def test_docs_print_the_table_as_it_is() -> None:
    """docs/contracts.md's metric table is the table's own rendering, every column of it."""
    text = (ROOT / "docs/contracts.md").read_text()
    start, end = (text.index(mark) for mark in names.DOC_MARKS)
    assert text[start + len(names.DOC_MARKS[0]):end].strip() == names.markdown().strip(), \
        "docs/contracts.md: paste harness.records.names.markdown() between its marks"


def test_no_template_header_spells_a_metric_out() -> None:
    """Every table header of the report that names a metric prints the metric table's label
    from the context, so relabelling a row relabels the report; a header in its own words
    ("best R@1") would keep the old ones. What is left of a header once its {{ ... }} are
    removed holds no label of the table and none of the metrics' short words."""
    import re

    scored = [m for m in names.TABLE if m.group != "quantity"]
    words = {w for m in scored for w in names.label(m.at(names.PAPER_K)).split()
             if any(c in w for c in "@-") or w.isupper()} | {"mutual", "Spearman"}
    found, headers = [], 0
    for path in sorted((ROOT / "reports/templates").glob("*.j2")):
        for header in re.findall(r"<th[^>]*>(.*?)</th>", path.read_text(), re.S):
            headers += 1
            text = re.sub(r"{{.*?}}|{%.*?%}", " ", header)
            found += [f"{path.name}: {header}" for w in words
                      if w in re.split(r"[\s(),:;]+", text)]
    assert {"R@1", "R@5", "10-NN", "CKA", "FOSCTTM"} <= words and headers > 50
    assert not found, found


def test_dvc_plots_the_curve_field_prh_names() -> None:
    """dvc.yaml's epoch plot reads the per-epoch field by its name in prh.config (YAML cannot
    import it)."""
    from prh.config import CURVE_TEST

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    plots = [p for s in stages.values() for spec in (s.get("plots") or [])
             if isinstance(spec, dict) for p in spec.values() if isinstance(p, dict)]
    assert [p["y"] for p in plots if p.get("x") == "epoch"] == [CURVE_TEST]
