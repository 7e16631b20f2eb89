"""harness.report.context and harness.report.plots on the fixture pipeline outputs
(tests/fixtures/pipeline)."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.audit.claims import load_claims
from harness.report import plots
from harness.report.context import ReportPaths, best_and_last, build_context
from harness.report.render import fmt_num, render, write_pdf
from harness.stages.report import main as report_main

FIX = Path(__file__).parent / "fixtures" / "pipeline"
EPOCH = "1700000000"


def paths_in(root: Path, provenance: bool = True) -> ReportPaths:
    return ReportPaths(root / "results.json", root / "align", root / "theory.json",
                       root / "contamination.json", root / "audit.json", root / "params.yaml",
                       root / "provenance.json" if provenance else None)


class Cells(HTMLParser):
    """Text of every element carrying a `data-k` attribute, keyed by it."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, str] = {}
        self._key: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        key = dict(attrs).get("data-k")
        if key is not None:
            self._key = key
            self.cells[key] = ""

    def handle_endtag(self, tag: str) -> None:
        self._key = None

    def handle_data(self, data: str) -> None:
        if self._key is not None:
            self.cells[self._key] += data.strip()


@pytest.fixture(scope="module")
def html() -> str:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", EPOCH)
        return render(build_context(paths_in(FIX)))


@pytest.fixture(scope="module")
def cells(html: str) -> dict[str, str]:
    parser = Cells()
    parser.feed(html)
    return parser.cells


def load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def test_aggregate_numbers_in_html_equal_results_json(cells: dict[str, str]) -> None:
    results = load("results.json")
    n_checked = 0
    for arm, block in results["arms"].items():
        for metric, m in block["metrics"].items():
            assert cells[f"rerun.{arm}.{metric}.mean"] == f"{m['mean']:.3f}"
            ci = f"[{m['ci'][0]:.3f}, {m['ci'][1]:.3f}]" if "ci" in m else "—"
            assert cells[f"rerun.{arm}.{metric}.ci"] == ci
            assert cells[f"spread.{arm}.{metric}.half_range"] == f"{m['half_range']:.3f}"
            for seed, v in m["values"].items():
                assert cells[f"seed.{arm}.{metric}.{seed}"] == f"{v:.3f}"
            n_checked += 1
    for g in results["gaps"]:
        key = f"gap.{g['a']}.{g['b']}.{g['metric']}"
        assert cells[key] == f"{g['diff']:.3f}"
        assert cells[key + ".ci"] == f"[{g['ci'][0]:.3f}, {g['ci'][1]:.3f}]"
    assert n_checked == 9


def test_run_numbers_in_html_equal_run_files(cells: dict[str, str]) -> None:
    for path in sorted((FIX / "align").glob("*.json")):
        run = json.loads(path.read_text())
        label = path.stem
        for name in ("r_at_1", "r_at_1_fit", "control_random_map_r_at_1",
                     "control_shuffled_r_at_1"):
            assert cells[f"run.{label}.{name}"] == f"{run['metrics'][name]['value']:.3f}"
        tests = [c["r_at_1_test"] for c in run["curve"]]
        assert cells[f"run.{label}.best"] == f"{max(tests):.3f}"
        assert cells[f"run.{label}.last"] == f"{tests[-1]:.3f}"
        weight = run["effective_sigreg_weight"]
        expected = "none (no SIGReg term)" if weight is None else f"{weight:.4f}"
        assert cells[f"sigreg.{label}"] == expected


def test_claims_sit_beside_the_rerun_number_they_are_about(html: str,
                                                            cells: dict[str, str]) -> None:
    audit = load("audit.json")
    for claim in audit["claims"]:
        if claim["rule"] == "measured":
            assert cells[f"claim.{claim['id']}"] == claim["printed"]
    for verdict, n in audit["summary"].items():
        assert cells[f"verdicts.{verdict}"] == str(n)
    spread = load_claims()["paper_ntp_r1"].spread
    assert f"{spread.printed} ({spread.n} seeds)" in html
    assert "(&lt;b&gt;not&lt;/b&gt; rerun)" in html  # statements are escaped too
    ctx_rows = build_context(paths_in(FIX))["sections"]["paper_vs_rerun"]["rows"]
    placed = {(r["arm"], r["metric"]): [c["id"] for c in r["claims"]] for r in ctx_rows}
    assert placed[("good", "r_at_1")] == ["paper_good_r1", "rerun_good_r1"]
    assert placed[("bad", "mknn10")] == ["paper_bad_mknn10"]


def test_clean_subset_scores_by_hand(cells: dict[str, str]) -> None:
    clean = set(load("contamination.json")["clean_ids"]["test"])
    for name in ("good-s0", "ntp-s1"):
        with np.load(FIX / "align" / f"{name}.npz") as z:
            ids, hit = z["ids"].astype(str), z["r_at_1_hit"]
        keep = np.array([i in clean for i in ids])
        assert keep.sum() == 37
        assert cells[f"clean.{name}.r_at_1_hit.full"] == f"{hit.mean():.3f}"
        assert cells[f"clean.{name}.r_at_1_hit.clean"] == f"{hit[keep].mean():.3f}"


def test_caption_with_script_is_escaped_and_the_only_script_is_the_filter(html: str) -> None:
    assert "a red ball &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; on the grass" in html
    assert html.lower().count("<script") == 1  # the audit's verdict filter, inline
    assert "<script>\n/* The audit's verdict filter" in html
    assert "two blue cubes &amp; a green cone" in html


def test_report_is_self_contained(html: str) -> None:
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)|url\((?!data:|#)", html)
    assert "<metadata>" not in html  # no RDF block (creator, date) from matplotlib
    assert html.count("<svg") == 10  # seed dots of r_at_1 and mknn10 (not of the CI-less
    # r_at_1_fit), the epoch curves, the fit-size curve, what shakes R@1 and mutual 10-NN of
    # each of the 3 arms (the fixture has no gallery curve: no pool-size plots)
    assert html.count("@font-face") == 3
    assert '<meta name="dcterms.created" content="2023-11-14T22:13:20Z">' in html


@pytest.mark.slow  # two WeasyPrint PDFs (about 25 s): .ci/run's pipeline section
def test_pdf_is_byte_stable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    first = render(build_context(paths_in(FIX)))
    second = render(build_context(paths_in(FIX)))
    assert first == second
    write_pdf(first, tmp_path / "a.pdf")
    write_pdf(second, tmp_path / "b.pdf")
    a, b = (tmp_path / "a.pdf").read_bytes(), (tmp_path / "b.pdf").read_bytes()
    assert a.startswith(b"%PDF-") and a == b


def test_missing_inputs_render_absent_sections(tmp_path: Path) -> None:
    ctx = build_context(paths_in(tmp_path / "nowhere"))
    html = render(ctx)
    sections = ctx["sections"]
    for name in ("paper_vs_rerun", "seed_spread", "runs", "claims", "contamination"):
        assert sections[name]["absent"] is not None, name
    assert html.count("<b>absent</b>") >= 7
    for stage in ("stage aggregate (`dvc repro aggregate`)", "stage audit (`dvc repro audit`)",
                  "stage contamination (`dvc repro contamination`)",
                  "stage theory (`dvc repro theory`)"):
        assert stage in html
    assert str(tmp_path / "nowhere" / "results.json") in html
    assert 'data-k="rerun.' not in html and 'data-k="run.' not in html
    assert "0.000" not in html


def test_a_results_file_missing_a_field_is_an_absent_box_naming_it(tmp_path: Path) -> None:
    """The report reads results.json through RESULTS's shape: a file without a field its
    sections compute from is one absent box naming the field, not a KeyError midway."""
    root = tmp_path / "p"
    shutil.copytree(FIX, root)
    doc = json.loads((root / "results.json").read_text())
    del doc["arms"]["good"]["metrics"]["r_at_1"]["mean"]
    (root / "results.json").write_text(json.dumps(doc))
    ctx = build_context(paths_in(root))
    reason = ctx["sections"]["paper_vs_rerun"]["absent"]["reason"]
    assert reason == "arms.good.metrics.r_at_1.mean: missing; rerun the stage"
    assert "<b>absent</b>" in render(ctx)


def test_partial_inputs_keep_what_is_there(tmp_path: Path) -> None:
    root = tmp_path / "p"
    shutil.copytree(FIX, root)
    (root / "audit.json").unlink()
    (root / "contamination.json").write_text('{"counts": {"exact": 2')  # cut off mid-write
    ctx = build_context(paths_in(root))
    html = render(ctx)
    assert ctx["sections"]["paper_vs_rerun"]["absent"] is None
    assert ctx["sections"]["paper_vs_rerun"]["audit_absent"]["reason"] == "file not found"
    assert "unreadable" in ctx["sections"]["contamination"]["absent"]["reason"]
    assert 'data-k="rerun.good.r_at_1.mean"' in html and 'data-k="paper.' not in html


def test_run_from_another_params_hash_is_named(tmp_path: Path) -> None:
    root = tmp_path / "p"
    shutil.copytree(FIX, root)
    run_path = root / "align" / "bad-s1.json"
    run = json.loads(run_path.read_text())
    run["run"]["params_hash"] = "ffff0000"
    run_path.write_text(json.dumps(run))
    (root / "align" / "ntp-s1.json").unlink()
    ctx = build_context(paths_in(root))
    assert len(ctx["warnings"]) == 2
    assert "bad-s1.json: params_hash 'ffff0000' differs" in ctx["warnings"][0]
    assert "lists runs/align/ntp-s1.json, not found" in ctx["warnings"][1]
    assert "<b>mismatch</b>" in render(ctx)


def test_hyperparameters_without_provenance_list_say_so(tmp_path: Path) -> None:
    ctx = build_context(paths_in(FIX, provenance=False))
    sec = ctx["sections"]["sigreg"]
    assert sec["provenance_absent"] is not None  # the fixture params.yaml is not a full profile
    assert {h["key"] for h in sec["hyper"]} >= {"train.lamb", "train.batch_size"}
    assert all(h["source"] is None for h in sec["hyper"])


def test_cli_writes_html(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    rc = report_main(["--results", str(FIX / "results.json"), "--runs-dir", str(FIX / "align"),
              "--theory", str(FIX / "theory.json"), "--contamination",
              str(FIX / "contamination.json"), "--audit", str(FIX / "audit.json"),
              "--params", str(FIX / "params.yaml"), "--provenance", str(FIX / "provenance.json"),
              "--html", str(out)])
    assert rc == 0 and "<h2>Provenance</h2>" in out.read_text()
    none = [str(tmp_path / f"none.{ext}") for ext in ("json", "yaml")]
    assert report_main(["--results", none[0], "--runs-dir", str(tmp_path), "--theory", none[0],
                        "--contamination", none[0], "--audit", none[0], "--params", none[1],
                        "--html", str(out), "--strict"]) == 1


def test_best_and_last_by_hand() -> None:
    curve = [{"epoch": 1, "r_at_1_test": 0.04}, {"epoch": 2, "r_at_1_test": 0.148},
             {"epoch": 3, "r_at_1_test": 0.148}, {"epoch": 4, "r_at_1_test": 0.125}]
    assert best_and_last(curve) == {"best_epoch": 2, "best": 0.148, "last_epoch": 4,
                                    "last": 0.125, "best_minus_last": pytest.approx(0.023)}
    assert best_and_last([]) is None


@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_best_is_never_below_last(values: list[float]) -> None:
    out = best_and_last([{"epoch": i + 1, "r_at_1_test": v} for i, v in enumerate(values)])
    assert out["best"] >= out["last"] and out["best_epoch"] <= out["last_epoch"]
    assert out["best"] == max(values)


@pytest.mark.parametrize(("value", "text"), [(0.2431, "0.243"), (None, "—"), (7, "7"),
                                             (0.0004, "0.0004"), (0.0, "0.000"), (True, "yes"),
                                             (False, "no"), ("abc", "abc"),
                                             (5.3e-15, "5.30e-15")])
def test_fmt_num(value: object, text: str) -> None:
    assert fmt_num(value) == text


def test_plots_are_deterministic_svg_without_dates() -> None:
    per_arm = {"good": {"0": 0.24, "1": 0.25}, "bad": {"0": 0.14}}
    a = plots.seed_dots(per_arm, "r_at_1", {"good": 0.245, "bad": 0.14}, {"good": ["1"]})
    b = plots.seed_dots(per_arm, "r_at_1", {"good": 0.245, "bad": 0.14}, {"good": ["1"]})
    assert a == b and a.startswith("<svg") and "<dc:date>" not in a


def test_intervals_print_the_configured_level(tmp_path: Path) -> None:
    root = tmp_path / "fix"
    shutil.copytree(FIX, root)
    results = json.loads((root / "results.json").read_text())
    for block in results["arms"].values():
        for m in block["metrics"].values():
            if "ci" in m:
                m["ci_level"] = 0.9
    (root / "results.json").write_text(json.dumps(results))
    html = render(build_context(paths_in(root)))
    assert "90% interval</th>" in html and "90% paired interval</th>" in html
    assert "95% interval" not in html


def test_the_report_of_a_revision_or_experiment_reads_its_files_there(tmp_path: Path,
                                                                      monkeypatch) -> None:
    """`harness report --rev NAME` renders the files as committed at NAME (a DVC experiment's
    ref here), whatever the workspace holds now: every number cell equals the fixture's."""
    import subprocess

    layout = {"results.json": "runs/results.json", "theory.json": "runs/theory.json",
              "contamination.json": "runs/contamination.json", "audit.json": "reports/audit.json",
              "params.yaml": "params.yaml", "align": "runs/align"}
    for src, dst in layout.items():
        (tmp_path / dst).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (FIX / src).is_dir() else shutil.copy2)(FIX / src, tmp_path / dst)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "run"],
                ["update-ref", f"refs/exps/ab/{'c' * 38}/lamb04", "HEAD"]):
        subprocess.run([*git, *cmd], check=True)
    shutil.rmtree(tmp_path / "runs")  # the workspace has moved on
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    args = ["--params", "params.yaml", "--results", "runs/results.json", "--runs-dir",
            "runs/align", "--theory", "runs/theory.json", "--contamination",
            "runs/contamination.json", "--audit", "reports/audit.json", "--html", "at.html"]
    assert report_main([*args, "--rev", "lamb04"]) == 0
    at_rev = Cells()
    at_rev.feed((tmp_path / "at.html").read_text())
    direct = Cells()
    direct.feed(render(build_context(paths_in(FIX, provenance=False))))
    assert at_rev.cells and at_rev.cells == direct.cells
    assert report_main([*args, "--rev", "nosuchrev"]) == 2


def test_the_templates_only_print():
    """Every flag, count and comparison the report shows is computed in its context
    (harness.report): no template compares values, filters rows by a field or tests
    membership, so what a row says is tested with the context, not through HTML."""
    tags = re.compile(r"\{[{%](.*?)[%}]\}", re.S)
    computing = re.compile(r"==|!=|<=|>=|(?<![-\w])[<>](?![-\w=])|\bselectattr\b|\brejectattr\b"
                           r"|\|\s*(sum|map|select|reject)\b|\bequalto\b"
                           r"|\S\s+(not\s+)?in\s+(?!\S+\.items\(\))")
    found = []
    for path in sorted(Path("reports/templates").glob("*.j2")):
        for tag in tags.findall(path.read_text()):
            body = tag.strip().lstrip("-").strip()
            if body.startswith("for ") and " if " not in body:
                continue  # a loop names what it loops over
            if computing.search(body):
                found.append(f"{path.name}: {body[:80]}")
    assert not found, found


def test_the_flags_the_templates_print_are_computed_in_the_context(tmp_path: Path) -> None:
    """What test_the_templates_only_print moved out of the templates, asserted on the
    fixture's known values: the gaps' intervals ([-.042, .267] holds 0; [.075, .363] and
    [.038, .175] do not), counts per verdict, the rows a printed page lists by id, the checks
    that hold, the assumed settings, runs without a fingerprint."""
    sec = build_context(paths_in(FIX))["sections"]
    assert [g["contains_zero"] for g in sec["paper_vs_rerun"]["gaps"]] == ["yes", "no", "no"]
    assert sec["paper_vs_rerun"]["ci_method"].startswith("percentile bootstrap")
    claims = sec["claims"]
    assert claims["verdicts"] == {"arithmetic holds": 1, "not comparable": 5, "not rerun": 1}
    assert sorted(r["verdict"] for r in claims["rows"] if r["listed_by_id"]) == [
        "arithmetic holds", "not rerun"]
    assert claims["holds"] == [c["id"] for c in claims["checks"] if c["holds"]]
    assert {"wit_42x", "tokens_14x"} <= set(claims["holds"])
    assert [h["key"] for h in sec["sigreg"]["assumed"]] == ["train.batch_size"]
    assert sec["provenance"]["missing_env"] == []
    root = tmp_path / "fix"
    shutil.copytree(FIX, root)
    run = root / "align" / "bad-s0.json"
    doc = json.loads(run.read_text())
    del doc["environment"]
    run.write_text(json.dumps(doc))
    assert build_context(paths_in(root))["sections"]["provenance"]["missing_env"] == ["bad-s0"]
