"""harness.report.measures in the rendered report: calibrated alignment, five captions and the pool
size, pair-free alignment, determinism, what shakes each headline number, the world's settings.

Inputs are the fixture pipeline (tests/fixtures/pipeline) with the newer blocks added by the
functions that write them (prh.calibrate, harness.stats, prh.gallery) on hand-made numbers."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import yaml
from test_report import Cells

from harness.records.results import aggregate_calibrated
from harness.report.context import ReportPaths, build_context, registry_setups
from harness.report.measures import section_text_sources
from harness.report.render import render, write_pdf
from harness.stats.estimators import seed_spread
from prh.calibrate import calibrate
from prh.gallery import curve_over_seeds

FIX = Path(__file__).parent / "fixtures" / "pipeline"
ROOT = Path(__file__).resolve().parents[1]
SEEDS = {"good": (0, 1, 2), "bad": (0, 1), "ntp": (0, 1)}
NULL = np.arange(19) / 100  # K = 19 null scores 0, .01, ..., .18


RAW = (0.5, 0.4, 0.15)  # mknn10 observed at seeds 0, 1, 2 of every arm


def calibrated_blocks() -> dict:
    """results.json's arms.ARM.calibrated: seed s of every arm observes RAW[s] (mknn10) and .6
    (CKA) against NULL."""
    runs = {(arm, s): {"mknn10": calibrate(RAW[s], NULL), "cka_linear": calibrate(0.6, NULL)}
            for arm, seeds in SEEDS.items() for s in seeds}
    return {arm: aggregate_calibrated(runs, [arm], list(seeds))[arm]
            for arm, seeds in SEEDS.items()}


def gallery_curve(seed: int) -> list[dict]:
    chance = {"r_at_1": 0.1, "r_at_1_i2t_all": 0.1, "mknn10_captions": 0.2}
    return [{"n_photos": n, "n_captions": 5.0 * n, "draws": 1 if n == 40 else 5,
             "metrics": {"r_at_1": 0.3 + 0.01 * seed + (40 - n) / 100,
                         "r_at_1_i2t_all": 0.5 + 0.01 * seed,
                         "mknn10_captions": 0.4 - 0.01 * seed},
             "chance": {k: v * 10 / n for k, v in chance.items()}}
            for n in (10, 20, 40)]


def with_measures(root: Path) -> Path:
    """A copy of the fixture pipeline at `root` with every block the new sections read."""
    shutil.copytree(FIX, root)
    results = json.loads((root / "results.json").read_text())
    cal = calibrated_blocks()
    for arm, block in results["arms"].items():
        block["calibrated"] = cal[arm]
        block["gallery_curve"] = curve_over_seeds({str(s): gallery_curve(s) for s in SEEDS[arm]})
        block["metrics"]["r_at_1_i2t_all"] = {
            **seed_spread({str(s): 0.5 + 0.01 * s for s in SEEDS[arm]}), "ci": [0.41, 0.63],
            "ci_method": "percentile bootstrap over test pairs of the seed-mean outcome"}
        block["controls"] = {"chance_r_at_1": seed_spread({str(s): 0.025 for s in SEEDS[arm]}),
                             "chance_mknn10": seed_spread({str(s): 10 / 39 for s in SEEDS[arm]})}
    results["arms"]["good"]["metrics"]["r_at_1"]["values"]["0"] = 0.246  # the paper's value
    for arm in ("good", "bad"):
        statuses = {s: "ok" if (arm, s) != ("bad", 1) else "collapsed" for s in SEEDS[arm]}
        r1 = {s: 0.0 if v == "collapsed" else 0.2 + 0.02 * s for s, v in statuses.items()}
        fos = {s: 1.0 if v == "collapsed" else 0.1 for s, v in statuses.items()}
        results["arms"][arm]["pair_free"] = {
            "r_at_1": seed_spread(r1), "foscttm": seed_spread(fos),
            "chance_r_at_1": seed_spread({s: 0.025 for s in statuses}),
            "chance_foscttm": seed_spread({s: 0.5 for s in statuses})}
        for s, status in statuses.items():
            path = root / "align" / f"{arm}-s{s}.json"
            run = json.loads(path.read_text())
            run["pair_free"] = {"status": status, "r_at_1": r1[s], "foscttm": fos[s],
                                "chance_r_at_1": 0.025, "chance_foscttm": 0.5,
                                "n_pool_images": 500, "n_pool_texts": 500, "n_test": 40,
                                **({"inputs": "benchmark"} if arm == "good" else {})}
            path.write_text(json.dumps(run))
    (root / "results.json").write_text(json.dumps(results))
    return root


def probe(diffs: dict[str, float]) -> dict:
    sweep = [{"arm": arm, "lamb": lamb, "r_at_1": 0.1 + lamb, "r_at_5": 0.3, "mknn10": 0.2,
              "chance_r_at_1": 0.025} for arm in ("good", "bad") for lamb in (0.005, 0.02, 0.08)]
    return {"schema": "prh.probe/1", "profile": "world", "params_hash": "x",
            "probe": {"arms": ["good", "bad"], "seed": 0, "epochs": 5,
                      "lambdas": [0.005, 0.02, 0.08]},
            "main_epochs": 20, "lambda_sweep": sweep,
            "determinism": {"arm": "good", "seed": 0, "lamb": 0.02, "epochs": 5, "device": "cpu",
                            "torch": "2.14.1", "max_abs_diff": diffs,
                            "bit_identical": max(diffs.values()) == 0.0},
            "text_sources": text_sources()}


def gap(source: str, value: float, ci: tuple[float, float], metric: str = "r_at_1") -> dict:
    return {"metric": metric, "source": source, "value": value, "ci": list(ci), "n": 40,
            "ci_level": 0.95, "ci_method": "paired percentile bootstrap over test pairs"}


def text_sources() -> dict:
    """The probe's Table 7 block: people's good views .30 against bad .10 (40 test pairs); on
    the captioner's texts good scores 1 hit of 40 (.025, chance) and bad none."""
    r1 = {("people", "good"): 0.3, ("people", "bad"): 0.1, ("captioner", "good"): 0.025,
          ("captioner", "bad"): 0.0}
    return {"sources": ["people", "captioner"], "k": 10, "seed": 0, "epochs": 5,
            "lamb": {"good": 0.02, "bad": 0.02},
            "rows": [{"source": s, "arm": a, "r_at_1": v, "r_at_5": 0.5, "mknn10": 0.2,
                      "chance_r_at_1": 0.025} for (s, a), v in r1.items()],
            "gaps": [gap("people", 0.2, (0.1, 0.3)), gap("captioner", 0.025, (0.0, 0.075)),
                     gap("people - captioner", 0.175, (0.05, 0.3)),
                     gap("people", 0.05, (-0.01, 0.1), "mknn10"),
                     gap("captioner", 0.0, (-0.05, 0.05), "mknn10"),
                     gap("people - captioner", 0.05, (-0.02, 0.12), "mknn10")]}


def paths(root: Path, probe_file: Path | None = None, params: Path | None = None) -> ReportPaths:
    return ReportPaths(root / "results.json", root / "align", root / "theory.json",
                       root / "contamination.json", root / "audit.json",
                       params or root / "params.yaml", root / "provenance.json", None, probe_file)


def cells_of(html: str) -> dict[str, str]:
    parser = Cells()
    parser.feed(html)
    return parser.cells


class Measured(NamedTuple):
    root: Path  # the fixture's files with the measures and a probe file
    html: str
    ctx: dict  # the report's context, without params.yaml


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    root = with_measures(tmp_path_factory.mktemp("m") / "p")
    (root / "probe.json").write_text(json.dumps(probe({"final.r_at_1": 0.0, "weights": 0.0})))
    ctx = build_context(paths(root, root / "probe.json"))
    return Measured(root, render(ctx), ctx)


@pytest.fixture(scope="module")
def with_params(measured: Measured) -> tuple[dict, str]:
    """The measured report's context and HTML with the repository's params.yaml."""
    ctx = build_context(paths(measured.root, measured.root / "probe.json", ROOT / "params.yaml"))
    return ctx, render(ctx)


def test_calibrated_score_threshold_and_p_value_by_hand(measured: Measured) -> None:
    cells = cells_of(measured.html)
    # the 19 nulls are 0, .01, ..., .18. Seeds 0 and 1 (.5, .4) lie above all of them: tau =
    # .18 (the 19th of the 20 values), p = 1/20. Seed 2 (.15) ties one null and lies below
    # three: tau = .17 (the 19th of 0, ..., .15, .15, ..., .18), p = (1 + 4)/20, calibrated 0.
    cal = [(0.5 - 0.18) / 0.82, (0.4 - 0.18) / 0.82, 0.0]
    assert cells["calibrated.good.mknn10.raw"] == \
        f"{np.mean(RAW):.3f} ± {np.std(RAW, ddof=1):.3f}"
    assert cells["calibrated.good.mknn10.threshold"] == f"{np.mean([0.18, 0.18, 0.17]):.3f}"
    assert cells["calibrated.good.mknn10.p_value"] == "0.2500"  # the largest over seeds
    assert cells["calibrated.bad.mknn10.p_value"] == "0.0500"  # seeds 0 and 1 only
    assert cells["calibrated.good.mknn10.calibrated"] == \
        f"{np.mean(cal):.3f} ± {np.std(cal, ddof=1):.3f}"
    assert cells["calibrated.bad.cka_linear.calibrated"] == f"{(0.6 - 0.18) / 0.82:.3f} ± 0.000"
    assert "smallest p-value K permutations can give is 1/(K + 1)" in measured.html


def test_one_against_all_captions_with_chance_on_the_whole_split(
        measured: Measured) -> None:
    cells = cells_of(measured.html)
    assert cells["captions.good.r_at_1_i2t_all"] == f"{np.mean([0.5, 0.51, 0.52]):.3f}"
    assert cells["captions.good.r_at_1_i2t_all.ci"] == "[0.410, 0.630]"
    assert cells["captions.good.r_at_1_i2t_all.chance"] == "0.0250"  # 1/40, the 40-photo pool
    assert cells["captions.bad.r_at_1.chance"] == "0.0250"
    assert cells["captions.ntp.mknn10.chance"] == f"{10 / 39:.4f}"  # from the controls


def test_pair_free_rows_and_the_paper_as_context(measured: Measured) -> None:
    html = measured.html
    cells = cells_of(html)
    assert cells["pair_free.good.r_at_1"] == f"{np.mean([0.2, 0.22, 0.24]):.3f} ± 0.020"
    assert cells["pair_free.bad.foscttm"] == f"0.550 ± {np.std([0.1, 1.0], ddof=1):.3f}"
    assert "s0: ok; s1: collapsed <b>(1 collapsed)</b>" in html
    assert cells["pair_free.ntp.r_at_1"] == "not run"
    paired = json.loads((measured.root / "results.json").read_text())["arms"]["good"]["metrics"]
    assert cells["pair_free.good.paired"] == \
        f"{paired['r_at_1']['mean']:.3f}[{paired['r_at_1']['ci'][0]:.3f}, " \
        f"{paired['r_at_1']['ci'][1]:.3f}]"  # Cells strips each piece of text: no space
    assert cells["pair_free.paper.pairfree_jepa_r1"] == "16.4%"
    assert cells["pair_free.paper.pairfree_chance"] == "0.1%"
    assert "on a different data set" in html
    # how the rows were prepared, from the run files (one arm's predate the record)
    assert cells["pair_free.inputs"] == \
        "Rows prepared aseval.pairfree_inputs: benchmark and not recorded"


def test_bit_identical_only_when_every_difference_is_zero(measured: Measured,
                                                          tmp_path: Path) -> None:
    assert cells_of(measured.html)["determinism.verdict"] == "bit-identical"
    root = measured.root
    (tmp_path / "probe.json").write_text(json.dumps(probe({"final.r_at_1": 0.0,
                                                           "weights": 3e-7})))
    cells = cells_of(render(build_context(paths(root, tmp_path / "probe.json"))))
    assert cells["determinism.verdict"] == "not bit-identical: largest difference 3.00e-07 in " \
                                           "weights"
    assert cells["determinism.weights"] == "3.00e-07"


def svg_of(html: str, key: str) -> str:
    return next(s for s in re.findall(r"<svg.*?</svg>", html, re.S) if f'id="{key}-paper-0"' in s)


def test_the_paper_line_sits_at_the_registry_value(measured: Measured) -> None:
    html = measured.html
    paper = registry_setups()["paper_good_r1"]["value"]
    assert paper == 0.246
    assert cells_of(html)["shake.good.r_at_1.paper"] == "0.246"
    assert "paper (Flickr30k) <span" in html
    svg = svg_of(html, "good-r_at_1")
    line = re.search(r'<g id="good-r_at_1-paper-0">\s*<path d="M [\d.]+ ([\d.]+)\s*'
                     r'L [\d.]+ ([\d.]+)', svg)
    dot = re.search(r'<g id="good-r_at_1-dot-s0">.*?<use [^>]*y="([\d.]+)"', svg, re.S)
    other = re.search(r'<g id="good-r_at_1-dot-s1">.*?<use [^>]*y="([\d.]+)"', svg, re.S)
    assert line[1] == line[2]  # horizontal
    assert float(line[1]) == pytest.approx(float(dot[1]), abs=1e-3)  # seed 0 scored .246
    assert abs(float(line[1]) - float(other[1])) > 1  # seed 1 (.575) sits elsewhere
    # every subplot of the row carries the line at the same height (shared y axis)
    for i in range(1, 5):
        assert re.search(rf'<g id="good-r_at_1-paper-{i}">\s*<path d="M [\d.]+ {line[1]}', svg)


def test_each_headline_number_has_a_panel_with_its_probe_epochs(
        measured: Measured) -> None:
    panels = measured.ctx["sections"]["shakes"]["panels"]
    assert [(p["arm"], p["metric"]) for p in panels] == [
        (a, m) for a in ("bad", "good", "ntp") for m in ("r_at_1", "mknn10")]
    assert measured.ctx["sections"]["shakes"]["probe_epochs"] == (5, 20)
    assert "at 5 of the main runs' 20 epochs" in measured.html
    assert cells_of(measured.html)["shake.bad.mknn10.paper"] == "0.132"
    assert cells_of(measured.html)["shake.ntp.r_at_1.chance"] == "0.0250"


def test_missing_probe_and_pair_free_say_not_run(tmp_path: Path) -> None:
    html = render(build_context(paths(FIX)))
    cells = cells_of(html)
    assert cells["determinism.verdict"] == "not run: no probe file given (--probe)"
    assert cells["text_sources.verdict"] == "not run: no probe file given (--probe)"
    assert cells["pair_free.status"].startswith("not run")
    assert cells["calibrated.status"].startswith("not run")
    assert cells["pair_free.good.r_at_1"] == "not run"
    (tmp_path / "probe.json").write_text(json.dumps(
        {"schema": "prh.probe/1", "skipped": "probe.arms is empty"}))
    ctx = build_context(paths(FIX, tmp_path / "probe.json"))
    assert cells_of(render(ctx))["determinism.verdict"] == "not run: probe.arms is empty"
    ctx = build_context(paths(FIX, tmp_path / "absent.json"))
    assert ctx["sections"]["determinism"]["absent"]["reason"] == "file not found"
    assert "stage probe (`dvc repro probe`)" in render(ctx)


def test_each_text_source_shows_its_gap_beside_prop_3s_prediction(
        measured: Measured, with_params: tuple[dict, str]) -> None:
    ctx, html = with_params
    cells = cells_of(html)
    assert cells["text_sources.people.gap.r_at_1"] == "0.200"
    assert cells["text_sources.people.result"] == "test R@1 above 0; mutual 10-NN holds 0"
    # 1 hit of 40 at chance 1/40: P(X >= 1) = 1 - .975^40 = .64, not above chance
    assert cells["text_sources.captioner.result"] == "both arms at chance: not read"
    assert cells["text_sources.difference.captioner.r_at_1"] == "0.175"
    # its interval lies above 0, but the captioner's arms are at chance: nothing to read
    assert cells["text_sources.difference.captioner.result"] == "a source at chance: not read"
    rows = {r["source"]: r for r in ctx["sections"]["text_sources"]["rows"]}
    # params.yaml's world: 5 captions, 8 voices: 1/5 + (4/5)(1/8) = .3 for good people views
    assert rows["people"]["sharing"] == pytest.approx((0.3, 1.0))
    assert rows["captioner"]["sharing"] == (1.0, 1.0)
    assert rows["people"]["predicted"] == "above 0"
    assert rows["captioner"]["predicted"].startswith("0 ")
    assert ctx["sections"]["text_sources"]["differences"][0]["predicted"] == "above 0"
    assert "two recaptions only (one captioner, one prompt): good 0.096, bad 0.092, ratio " \
           "1.04" in html
    assert "states the image's background shade" not in html  # params.yaml: no leak
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["world"]["data"]["world"].update(captioner_leak=0.5, background=0.3)
    (measured.root / "leak.yaml").write_text(yaml.safe_dump(raw))
    leaky = render(build_context(paths(measured.root, measured.root / "probe.json",
                                       measured.root / "leak.yaml")))
    assert "states the image's background shade in a fraction 0.50 of its texts" in leaky
    assert not measured.ctx["sections"]["text_sources"]["world"]  # no prediction without params
    live = text_sources()
    live["rows"][3]["r_at_1"] = 0.1  # the captioner's bad views: 4 hits of 40, above chance
    assert section_text_sources({"text_sources": live}, None, None, {})[
        "differences"][0]["reading"] == "above 0"
    assert section_text_sources({"schema": "prh.probe/1"}, None, None, {})["not_run"] == \
        "the probe file predates the text-source probe: `dvc repro probe`"
    del live["k"]  # a probe file from before k was recorded: its labels would be guesses
    assert section_text_sources({"text_sources": live}, None, None, {})["not_run"] == (
        "the probe file's text_sources does not record its mutual k-NN's k (written before it "
        "did): `dvc repro probe`")


def test_world_settings_come_from_params(tmp_path: Path) -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["world"]["data"]["world"]["style_strength"] = 2
    params["world"]["data"]["world"].pop("regularity", None)
    params["world"]["image"]["jitter"] = 0.25
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    html = render(build_context(paths(FIX, params=tmp_path / "params.yaml")))
    cells = cells_of(html)
    assert cells["world.data.world.style_strength"] == "2"
    assert cells["world.data.world.regularity"] == "0.0000"  # prh.world's default, not set
    assert cells["world.image.jitter"] == "0.2500"
    assert '<b><span class="mono">style_strength</span> = 2</b>' in html
    assert "colour jitter = 0.25" in html
    params["profile"] = "flickr30k"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    results = json.loads((FIX / "results.json").read_text())
    (tmp_path / "results.json").write_text(json.dumps({**results, "profile": "flickr30k"}))
    ctx = build_context(ReportPaths(tmp_path / "results.json", FIX / "align",
                                    FIX / "theory.json", FIX / "contamination.json",
                                    FIX / "audit.json", tmp_path / "params.yaml"))
    assert "<h2>The world</h2>" not in render(ctx)


@pytest.mark.slow  # a WeasyPrint PDF (about 12 s): .ci/run's pipeline section
def test_the_new_sections_fit_their_pdf_pages(with_params: tuple[dict, str],
                                              tmp_path: Path) -> None:
    ctx, html = with_params
    assert ctx["sections"]["world"]["rows"]  # the world section is in, with its table
    assert write_pdf(html, tmp_path / "r.pdf") == []  # nothing runs off a page
