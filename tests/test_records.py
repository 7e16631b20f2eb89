"""The hand-offs between stages have one home (harness.records, harness.config): names derived
from eval.k, schemas with versions, the per-query file's writer and reader, params.yaml checked
once with suggestions, and a training run's derived values resolved once."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

import numpy as np
import pytest
from test_params import write as write_params

from harness.config.margins import MarginError, load_margins
from harness.config.params import ParamsError, load_params
from harness.config.validate import validate_params
from harness.records import names, schemas, study, verdicts
from harness.records.flat import aggregate_metrics, run_metrics
from harness.records.perquery import read_per_query, write_per_query
from harness.records.results import aggregate_runs
from harness.records.schemas import RESULTS, RUN
from harness.records.verdicts import AUDIT
from harness.report import summary
from prh.align import score_alignment
from prh.io import ContractError
from prh.train_config import TrainConfig, resolve

ROOT = Path(__file__).resolve().parents[1]


def pairs(rng: np.random.Generator, n: int, d: int = 8) -> tuple[np.ndarray, np.ndarray]:
    img = rng.normal(size=(n, d))
    return img, img @ np.linalg.qr(rng.normal(size=(d, d)))[0] + 0.3 * rng.normal(size=(n, d))


@pytest.mark.parametrize("k", [5, 10])
def test_eval_k_names_every_mutual_knn_key_from_prh_to_the_flat_views(k):
    rng = np.random.default_rng(0)
    fit, test = pairs(rng, 60), pairs(rng, 40)
    scores = score_alignment(*fit, *test, k=k)
    assert names.mknn(k) in scores.metrics and names.mknn(k) in scores.per_query
    assert names.chance(names.mknn(k)) in scores.metrics
    assert not any(m.startswith("mknn") and not m.startswith(names.mknn(k))
                   for m in scores.metrics)
    metrics = {names.metric_of(o): {"value": float(v.mean())} for o, v in scores.per_query.items()}
    assert names.mknn(k) in run_metrics(metrics, k)
    per_query = {(arm, s): scores.per_query for arm in ("good", "bad") for s in (0, 1)}
    run = {key: {m: {"value": v} for m, v in scores.metrics.items()} for key in per_query}
    stats = aggregate_runs(per_query, run, ["good", "bad"], [0, 1], k=k, level=0.9,
                           n_resamples=50, seed=0)
    arm = stats["arms"]["good"]
    assert names.mknn(k) in arm["metrics"] and names.chance(names.mknn(k)) in arm["controls"]
    assert stats["k"] == names.results_k(stats) == k
    assert {g["metric"] for g in stats["gaps"]} >= {"r_at_1", names.mknn(k)}
    assert names.mknn(k) in aggregate_metrics(stats, k)["good"]


def test_outcome_and_metric_names_round_trip():
    assert names.metric_of("r_at_1_hit") == "r_at_1" and names.metric_of("mknn10") == "mknn10"
    assert names.outcome_of("r_at_5", ["r_at_1_hit", "r_at_5_hit"]) == "r_at_5_hit"
    assert names.outcome_of("cka_linear", ["r_at_1_hit"]) is None
    assert names.results_k({"k": 5, "arms": {"good": {"metrics": {"mknn10": {}}}}}) == 5
    with pytest.raises(ContractError, match="without its mutual k-NN's k"):
        names.results_k({"arms": {"good": {"metrics": {"mknn5": {}}}}})  # k is not parsed


def test_per_query_round_trip_and_refusals(tmp_path):
    ids = np.array(["a", "b", "c"])
    out = {"r_at_1_hit": np.array([1, 0, 1]), "mknn10": np.array([0.1, 0.2, 0.3])}
    path = tmp_path / "good-s0.npz"
    write_per_query(path, ids, out)
    got_ids, got = read_per_query(path)
    assert list(got_ids) == list(ids) and set(got) == set(out)
    assert got["r_at_1_hit"].dtype == np.float64 and got["mknn10"][2] == 0.3
    assert read_per_query(path.read_bytes(), "rev:HEAD good-s0.npz")[1].keys() == got.keys()
    np.savez(path, ids=ids, **out)  # an older file, without its schema
    with pytest.raises(ContractError, match=r"good-s0.npz: schema 'none'.*dvc repro align@good-0"):
        read_per_query(path)
    np.savez(path, schema=np.array("prh.per_query/2"), ids=ids, **out)
    with pytest.raises(ContractError,
                       match="version 2 of prh.per_query, this code reads version 1"):
        read_per_query(path)
    path.write_bytes(path.read_bytes()[:40])  # truncated
    with pytest.raises(ContractError, match="unreadable per-query file"):
        read_per_query(path)
    with pytest.raises(ValueError, match="reserved"):
        write_per_query(path, ids, {"ids": ids})


FIXTURE = Path(__file__).resolve().parent / "fixtures/pipeline"


def test_a_schema_of_another_version_names_the_stage_to_rerun():
    doc = {**json.loads((FIXTURE / "results.json").read_text()), "x": 1}
    assert RESULTS.check(doc, "r.json")["x"] == 1  # a field no reader needs is let through
    with pytest.raises(ContractError, match=r"r.json: version 0 of prh.results.*dvc repro "
                                            r"aggregate"):
        RESULTS.check({"schema": "prh.results/0"}, "r.json")
    with pytest.raises(ContractError, match=r"schema 'prh.audit/1', expected 'prh.metrics/2'"):
        RUN.check({"schema": "prh.audit/1"}, "good-s0.json")


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r.update(seed=[0]), r"unknown key 'seed' \(did you mean 'seeds'\?\)"),
    (lambda r: r.update(audti={}), r"unknown key 'audti' \(did you mean 'audit'\?\)"),
    (lambda r: r["world"].update(evl={}), r"world: unknown key 'evl' \(did you mean 'eval'\?\)"),
    (lambda r: r["audit"].update(margins={}), r"audit: unknown key 'margins' \(did you mean "
                                              r"'margin'\?\)"),
    (lambda r: r["world"]["train"].update(lamda=0.1), r"unknown key\(s\) \['lamda'\] \(did you "
                                                      r"mean 'lamb'\?\)"),
    (lambda r: r["audit"]["margin"].update(r_at_1=-0.01), "margin -0.01 must be a finite number"),
    (lambda r: r["audit"]["margin"].update(mknn5=0.01), "eval.k is 10, so the mutual k-NN is "
                                                         "mknn10; name its margin `mknn`"),
    (lambda r: r["world"]["contamination"].update(ngram=0), "ngram, hash_size must be >= 1"),
])
def test_params_are_refused_when_read_with_a_suggestion(tmp_path, edit, needle):
    path = write_params(tmp_path, edit)
    with pytest.raises(ParamsError, match=needle):  # what `harness run --check` runs
        validate_params(load_params(path))


def test_margins_follow_eval_k():
    assert load_margins({"mknn": 0.02}, k=5)["mknn5"] == 0.02
    assert load_margins({"mknn5": 0.03}, k=5)["mknn5"] == 0.03
    assert "mknn10" not in load_margins(None, k=5)
    with pytest.raises(MarginError, match="name its margin `mknn`"):
        load_margins({"mknn10": 0.01}, k=5)
    shipped = load_params(ROOT / "params.yaml")  # `mknn` at the shipped k = 10
    assert shipped.margins["mknn10"] == 0.01


def test_next_token_has_no_sigreg_weight_anywhere():
    ntp = resolve(TrainConfig(arm="ntp"), world_size=1)
    assert ntp.lamb is None and ntp.effective_sigreg_weight is None
    good = resolve(TrainConfig(arm="good"), world_size=2)
    assert good.lamb == TrainConfig().lamb and good.effective_sigreg_weight > 0


def test_the_report_words_are_the_audits_words():
    assert set(summary.GLOSS) == set(verdicts.VERDICTS)
    assert sorted(summary.VERDICT_RANK) == sorted(verdicts.VERDICTS)
    assert set(summary.PRINT_BY_ID) <= set(verdicts.VERDICTS)
    assert set(summary.STATUS_ORDER) <= set(verdicts.STATUSES)
    reason = verdicts.not_rerun("scale", "web-scale training") + " (dataset=wit)"
    assert verdicts.category_of(reason) == "scale"
    assert verdicts.gist(reason) == "scale: web-scale training"


DROP = object()  # the edit that deletes the field


@pytest.mark.parametrize("path, value, needle", [
    (("k",), DROP, "k: missing"),
    (("arms", "good", "metrics", "r_at_1", "mean"), DROP,
     "arms.good.metrics.r_at_1.mean: missing"),
    (("gaps", 0, "diff"), DROP, "gaps[0].diff: missing"),
    (("n_test",), "1000", "n_test: expected an integer, found '1000'"),
    (("k",), True, "k: expected an integer, found True"),
    (("arms", "bad", "metrics", "mknn10", "mean"), False,
     "arms.bad.metrics.mknn10.mean: expected a number, found False"),
    (("arms", "ntp", "seeds"), "0,1", "arms.ntp.seeds: expected a list"),
    (("gaps", 1, "ci"), [0.1, "0.2"], "gaps[1].ci[1]: expected a number"),
    (("arms",), [], "arms: expected an object, found list"),
])
def test_results_missing_or_mistyping_a_field_its_readers_need_is_refused_by_path(path, value,
                                                                                needle):
    doc = json.loads((FIXTURE / "results.json").read_text())
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is DROP:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    with pytest.raises(ContractError, match=re.escape(f"r.json: {needle}") + ".*dvc repro "
                                                                             "aggregate"):
        RESULTS.check(doc, "r.json")


def test_a_run_file_without_its_metric_values_is_refused_by_path_and_optionals_may_be_absent():
    doc = json.loads((FIXTURE / "align/good-s0.json").read_text())
    doc.pop("per_query")
    for entry in doc["metrics"].values():
        entry.pop("ci", None)
    assert RUN.check(doc, "good-s0.json", "align@good-0")["k"] == doc["k"]
    doc["metrics"]["r_at_1"]["value"] = None
    with pytest.raises(ContractError, match=r"good-s0.json: metrics.r_at_1.value: expected a "
                                            r"number, found None; rerun `dvc repro align@good-0`"):
        RUN.check(doc, "good-s0.json", "align@good-0")


def test_an_audit_outside_the_vocabulary_is_refused_by_path_and_the_audits_own_passes():
    """The audit's own document (harness.audit.judge on the test registry, every rule) passes
    its reader's check; a verdict or a status the vocabulary lacks is refused by its path, where
    the report would have counted it under no heading and the CI gate never tripped on it."""
    from test_audit import run_small

    doc = json.loads(json.dumps(run_small()))
    assert AUDIT.check(doc, "audit.json") == doc
    for edit, path, word, first in [
            (("claims", 3, "verdict"), r"claims\[3\]\.verdict", "reproduced (mostly)",
             "reproduced"),
            (("arithmetic", 0, "status"), r"arithmetic\[0\]\.status", "held", "holds")]:
        bad = json.loads(json.dumps(doc))
        bad[edit[0]][edit[1]][edit[2]] = word
        with pytest.raises(ContractError, match=rf"audit.json: {path}: '{re.escape(word)}' is not "
                                                rf"one of '{first}', .*; rerun `dvc repro audit`"):
            AUDIT.check(bad, "audit.json")
    del doc["claims"][0]["reason"]
    with pytest.raises(ContractError, match=r"claims\[0\]\.reason: missing"):
        AUDIT.check(doc, "audit.json")


class _Inner(TypedDict):
    mean: float
    ci: NotRequired[list[float]]


class _Record(TypedDict):
    name: str
    n: int
    ok: bool
    word: Annotated[str, ("holds", "fails")]
    per_arm: dict[str, _Inner]
    extra: dict[str, Any]
    rows: NotRequired[list[_Inner]]
    spread: float | None
    best: NotRequired[_Inner | None]


def test_a_typed_record_is_the_shape_its_reader_checks():
    """Each kind of field maps to the shape the module docstring names, written out by hand:
    float is any number, NotRequired is `?`, dict[str, X] is every key, dict[str, Any] any
    object; a field of another type is refused when the record is read, not at a file."""
    inner = {"mean": schemas.NUMBER, "?ci": [schemas.NUMBER]}
    assert schemas.shape_of(_Record) == {
        "name": str, "n": int, "ok": bool, "word": ("holds", "fails"),
        "per_arm": {"*": inner}, "extra": {}, "?rows": [inner],
        "spread": schemas.Nullable(schemas.NUMBER), "?best": schemas.Nullable(inner)}
    assert schemas.shape_rows(schemas.shape_of(_Record))[-4:] == [
        "- `spread`: a number or null", "- `?best`: null, or as below",
        "- `?best.mean`: a number", "- `?best.?ci[]`: a number"]
    rec = schemas.Schema("t.record", 1, "stage", _Record)
    doc = {"schema": "t.record/1", "name": "a", "n": 2, "ok": True, "word": "holds",
           "per_arm": {"good": {"mean": 1}}, "extra": {"x": [1]}, "spread": None}
    assert rec.check(doc, "t.json") == doc  # an int is a number; optionals may be absent
    assert rec.check({**doc, "spread": 0.5, "best": None}, "t.json")  # null where | None
    for field, value, says in [("n", 2.0, "n: expected an integer"),
                               ("spread", "wide", "spread: expected a number"),
                               ("best", {"mean": None}, "best.mean: expected a number"),
                               ("ok", 1, "ok: expected true or false"),
                               ("per_arm", {"good": {"mean": True}},
                                "per_arm.good.mean: expected a number")]:
        with pytest.raises(ContractError, match=re.escape(says)):
            rec.check({**doc, field: value}, "t.json")
    with pytest.raises(TypeError, match="a record's field is"):
        schemas.shape_of(tuple[int, int])
    assert schemas.shape_of(typing.Optional[str]) == schemas.Nullable(str)  # noqa: UP045


@pytest.mark.parametrize("name", ["RUN", "RESULTS", "AUDIT", "REFERENCE", "PLAN", "LOOKS"])
def test_docs_list_the_fields_each_reader_checks(name):
    """docs/contracts.md's field list of each file whose reader checks a shape (the run file,
    results.json, the audit, the reference scores, the seed plan and its ledger) is that shape,
    line for line."""

    text = (FIXTURE.parents[1].parent / "docs/contracts.md").read_text()
    begin, end = f"<!-- fields: {name} -->\n", f"<!-- end of fields: {name} -->"
    listed = text[text.index(begin) + len(begin):text.index(end)].strip().splitlines()
    schema = (getattr(schemas, name, None) or getattr(verdicts, name, None)  # AUDIT: its words
              or getattr(study, name))
    assert listed == schemas.shape_rows(schema.shape), \
        f"docs/contracts.md: paste harness.records.schemas.shape_rows({name}.shape) there"


@pytest.mark.parametrize("block", ["calibrated", "gallery_curve", "trainval_map", "curve",
                                   "per_query"])
def test_a_run_file_missing_a_block_aggregate_reads_names_it_and_the_stage(tmp_path, block):
    """read_align_runs: each block it reads with [] is checked first, so a run file without
    one is a ContractError naming the file and the stage to rerun, not a KeyError."""
    import shutil

    from harness.records.results import read_align_runs

    align = tmp_path / "align"
    shutil.copytree(FIXTURE / "align", align)
    runs = read_align_runs(align, ["good", "bad"], [0, 1], {"good": "p1a2b3c4", "bad": "p1a2b3c4"})
    assert set(runs.per_query) == {(a, s) for a in ("good", "bad") for s in (0, 1)}
    doc = json.loads((align / "bad-s1.json").read_text())
    del doc[block]
    (align / "bad-s1.json").write_text(json.dumps(doc))
    with pytest.raises(ContractError, match=rf"bad-s1.json: no {block}; rerun its align stage"):
        read_align_runs(align, ["good", "bad"], [0, 1], {"good": "p1a2b3c4", "bad": "p1a2b3c4"})
