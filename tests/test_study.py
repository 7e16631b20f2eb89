"""The seed plan and its looks, piece by piece: the plan's bad inputs refused in one line before
any training, its hash, the spending of alpha over the looks (against the formulas written out
here), a plan changed after a look refused by `harness plan` and flagged by the audit, the
ledger refusing looks out of order, and what a look does with each claim (decided earlier,
continues, stopped, at the cap). The error rates of whole studies: tests/test_sequential.py."""

from __future__ import annotations

import dataclasses
import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from flickr_audit import REG, ClaimDraw, flickr_results, judge_one
from scipy import stats as sps

from harness.audit.judge import audit, judge_look
from harness.audit.looks import empty_ledger, holds_arms, levels, record
from harness.audit.plan import build_plan, check_plan, look_alphas, plan_hash
from harness.audit.rules import Context
from harness.config.params import load_params
from harness.stages.plan import main as plan_main
from prh.io import ContractError, read_json, write_json

ROOT = Path(__file__).resolve().parents[1]


def flickr_plan(**change: Any) -> dict[str, Any]:
    """The flickr30k profile's plan of params.yaml, with `change` made to its config."""
    params = load_params(ROOT / "params.yaml", "flickr30k")

    cfg = dataclasses.replace(params.plan_config(), **change)
    return dict(build_plan(cfg, REG, "flickr30k", params.margins))


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """params.yaml and the registry in a scratch folder, MLflow in a SQLite file there."""
    shutil.copy2(ROOT / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def edit_plan(ws: Path, **change: Any) -> None:
    raw = yaml.safe_load((ws / "params.yaml").read_text())
    raw["world"]["plan"].update(change)
    (ws / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))


def run_plan(ws: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = plan_main(["--params", "params.yaml", "--claims",
                      str(ROOT / "harness/audit/claims.yaml"), "--looks", "runs/looks.json",
                      "--out", "runs/plan.json", "--table", "runs/plan.md"])
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("change, says", [
    ({"claims": ["paper_good_r2"]}, "'paper_good_r2' is not in the registry"),
    ({"claims": ["t3_good_wit"]}, "'t3_good_wit' is not judged from sampled runs on the world"),
    ({"looks": [2, 4]}, "the first look needs 3 seeds per arm"),
    ({"looks": [3, 3]}, "must increase look by look"),
    ({"r_at_1": {"sd": 0.0, "source": "x", "gap_pair_se": 0.01, "gap_pair_source": "y"}},
     "a seed sd must be above 0"),
    ({"pilot": "pilot/results.json", "pilot_seeds": [0, 1, 7]}, "[7] not among"),
])
def test_a_bad_plan_is_one_line_before_any_training(workspace: Path, change: dict[str, Any],
                                                    says: str, capsys) -> None:
    if change.get("pilot"):
        arm = {"seeds": [0, 1, 2], "metrics": {}}
        write_json(workspace / "pilot" / "results.json",
                   {"arms": {"good": arm, "bad": arm, "ntp": arm}})
    edit_plan(workspace, **change)
    code, err = run_plan(workspace, capsys)
    assert code == 2 and says in err and len(err.splitlines()) == 1, err
    assert not (workspace / "runs" / "plan.json").exists()


def test_the_plan_is_registered_hashed_and_refused_once_changed_after_a_look(
        workspace: Path, capsys) -> None:
    code, _ = run_plan(workspace, capsys)
    plan = read_json(workspace / "runs" / "plan.json")
    assert code == 0 and plan["hash"] == plan_hash(plan)
    assert read_json(workspace / "runs" / "looks.json")["looks"] == []
    with sqlite3.connect(workspace / "mlflow.db") as db:
        tags = dict(db.execute("select key, value from tags"))
    assert tags["prh.role"] == "plan" and tags["prh.plan_hash"] == plan["hash"]
    # a look is taken under it; then the plan's margin of error is changed
    ledger = {**empty_ledger(), "plan_hash": plan["hash"], "plan": plan,
              "looks": [{"look": 1, "seeds": 3, "claims": {}}]}
    write_json(workspace / "runs" / "looks.json", ledger)
    edit_plan(workspace, differs_miss=3)
    code, err = run_plan(workspace, capsys)
    assert code == 2 and "1 look(s) were taken under plan" in err and "differs_miss" in err
    assert read_json(workspace / "runs" / "plan.json") == plan  # the registered one stays
    edited = {**plan, "looks": [3, 4]}
    with pytest.raises(ContractError, match="no longer hashes to its hash"):
        check_plan(edited, "runs/plan.json")


def test_an_audit_under_a_plan_changed_after_data_says_so_for_every_planned_claim() -> None:
    plan = flickr_plan()
    other = flickr_plan(differs_miss=3.0)
    ledger = {**empty_ledger(), "plan_hash": other["hash"], "plan": other,
              "looks": [{"look": 1, "seeds": 3, "claims": {}}]}
    doc = audit(REG, Context(REG.claims, "flickr30k", flickr_results(np.random.default_rng(0), 6)),
                plan, ledger)  # type: ignore[arg-type]
    seq = doc["sequential"]
    assert seq["plan_changed"]["from"] == other["hash"]
    assert any("differs_miss: 3.0 -> 2.0" in d for d in seq["plan_changed"]["diff"])
    rows = {r["id"]: r for r in doc["claims"]}
    for cid in (c["id"] for c in plan["claims"]):
        assert rows[cid]["verdict"] == "inconclusive"
        assert rows[cid]["reason"].startswith("plan changed after data"), rows[cid]["reason"]


def test_alpha_is_spent_as_the_lan_demets_functions_say() -> None:
    """O'Brien-Fleming-type 2 - 2 Phi(z_.975 / sqrt t) and Pocock-type .05 ln(1 + (e - 1) t)
    at t = n / cap, their increments per look; each sums to .05 at the cap."""
    looks = [3, 6, 10]
    obf = [2 - 2 * sps.norm.cdf(1.959964 / math.sqrt(n / 10)) for n in looks]
    pocock = [0.05 * math.log(1 + (math.e - 1) * n / 10) for n in looks]
    for kind, cum in (("obrien_fleming", obf), ("pocock", pocock)):
        got = look_alphas(looks, kind)
        want = [b - a for a, b in zip([0.0, *cum], cum, strict=False)]
        assert got == pytest.approx(want, abs=1e-7) and sum(got) == pytest.approx(0.05)
    plan = flickr_plan()
    for c in plan["claims"]:
        assert sum(c["alpha_reproduced"]) == pytest.approx(0.05)
    assert plan["family_k"] == 26 and plan["alpha_differs"][0] < 0.001


def test_the_ledger_takes_each_look_once_and_in_order() -> None:
    plan = flickr_plan()
    block = {"plan_hash": plan["hash"], "plan_changed": None, "look": 2, "seeds": 6,
             "continuing_arms": [], "next_seeds": None, "claims": {}}
    with pytest.raises(ContractError, match="record the looks in order"):
        record(empty_ledger(), plan, {"claims": [], "sequential": block}, "t", None)  # type: ignore[arg-type]
    first = record(empty_ledger(), plan, {"claims": [], "sequential": {**block, "look": 1,  # type: ignore[arg-type]
                                                                      "seeds": 3}}, "t", None)
    with pytest.raises(ContractError, match="look 1 is recorded already"):
        record(first, plan, {"claims": [], "sequential": {**block, "look": 1, "seeds": 3}},  # type: ignore[arg-type]
               "t", None)
    assert first["plan"]["hash"] == plan["hash"] and first["plan_hash"] == plan["hash"]


def test_a_look_decides_stops_continues_and_caps() -> None:
    """Every planned claim on its own draw, as it says, through two looks of a [3, 6] plan: a
    claim decided at look 1 keeps its verdict at look 2, unjudged; "cannot be separated" on
    1,000 pairs (no power either way by the cap) holds no arm and stops; whatever is still
    undecided at the cap says so with its seeds."""
    plan = flickr_plan(looks=(3, 6))
    rng = np.random.default_rng(4)
    draws = {c["id"]: ClaimDraw(REG.claims[c["id"]], rng, 0.0, 0.1 * c["margin"], 6,
                                c["margin"]) for c in plan["claims"]}
    ledger = empty_ledger()
    rows = [judge_one(REG.claims[cid], d.results(3), levels(plan, 1)) for cid, d in draws.items()]
    _, block = judge_look(rows, plan, ledger, 3)  # type: ignore[arg-type]
    status = {cid: s["status"] for cid, s in block["claims"].items()}
    assert status["paper_good_r1"] == "decided" and block["claims"]["paper_good_r1"][
        "verdict"] == "reproduced"
    # "cannot be separated" on 1,000 pairs: no power either way by the cap, it holds no arm
    # (judged on while the other claims keep bad and next-token running)
    insep = next(c for c in plan["claims"] if c["id"] == "rerun_gap_bad_ntp_r1")
    assert not insep["can_confirm"] and not insep["can_catch"]
    assert not holds_arms(insep, next(r for r in rows if r["id"] == insep["id"]))
    ledger = record(ledger, plan, {"claims": rows, "sequential": block}, "t", None)  # type: ignore[arg-type]
    undecided = {cid for cid, s in status.items() if s == "continues"}
    rows2 = [judge_one(REG.claims[cid], draws[cid].results(6), levels(plan, 2))
             if cid in undecided else {"id": cid, "rule": REG.claims[cid].rule, "verdict": "",
                                       "reason": "", "evidence": {}} for cid in draws]
    _, block2 = judge_look(rows2, plan, ledger, 6)  # type: ignore[arg-type]
    got = {cid: s["status"] for cid, s in block2["claims"].items()}
    assert got["paper_good_r1"] == "decided earlier"
    assert block2["claims"]["paper_good_r1"]["verdict"] == "reproduced"
    reasons = {r["id"]: r["reason"] for r in rows2}
    assert reasons["paper_good_r1"].startswith("decided at look 1 (3 seeds per arm)")
    for cid in (c for c, s in got.items() if s == "at the cap"):
        assert reasons[cid].startswith(("inconclusive at 6 seeds (the plan's cap)",
                                        "pattern not seen at 6 seeds")), reasons[cid]
    assert block2["next_seeds"] is None and block2["final"]


def test_a_run_off_the_plan_judges_no_planned_claim() -> None:
    plan = flickr_plan()
    doc = audit(REG, Context(REG.claims, "flickr30k", flickr_results(np.random.default_rng(1), 4)),
                plan, empty_ledger())  # type: ignore[arg-type]
    assert doc["sequential"]["look"] is None
    rows = {r["id"]: r for r in doc["claims"]}
    assert rows["paper_good_r1"]["verdict"] == "inconclusive"
    assert "4 seeds per arm (the fewest of an arm) is no look of the registered plan" in \
        rows["paper_good_r1"]["reason"]
    with pytest.raises(ContractError, match="records 0 look"):
        audit(REG, Context(REG.claims, "flickr30k",
                           flickr_results(np.random.default_rng(1), 6)), plan, empty_ledger())  # type: ignore[arg-type]

