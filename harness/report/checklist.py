"""A reproducibility checklist filled from the run's own metadata: the experimental items of the
NeurIPS paper checklist (reproducibility, open access to data and code, experimental setting
and details, statistical significance, compute resources), each answered for this run with the
evidence the pipeline's files hold. The report prints it as a section and the report stage
writes it as JSON (schema prh.checklist/1)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from harness.records.schemas import CHECKLIST, Results

SCHEMA = str(CHECKLIST)


def _item(key: str, question: str, answer: str, evidence: list[str]) -> dict[str, Any]:
    return {"item": key, "question": question, "answer": answer, "evidence": evidence}


def _distinct(runs: Sequence[Mapping[str, Any]], *keys: str) -> list[str]:
    """The distinct values of a nested key over the runs, in first-seen order."""
    seen: list[str] = []
    for r in runs:
        value: Any = r
        for k in keys:
            value = value.get(k) if isinstance(value, Mapping) else None
        if value is not None and str(value) not in seen:
            seen.append(str(value))
    return seen


def seeds_item(results: Results | None) -> dict[str, Any]:
    arms = (results or {}).get("arms", {})
    evidence = [f"{arm}: seeds {', '.join(map(str, b.get('seeds', [])))}"
                for arm, b in arms.items()]
    few = [arm for arm, b in arms.items() if len(b.get("seeds", [])) < 3]
    if few:
        evidence.append(f"fewer than 3 seeds for {', '.join(few)}: the audit's intervals then "
                        "resample test pairs only and do not estimate training variance")
    answer = "no" if not arms else "partial" if few else "yes"
    return _item("seeds", "Are the random seeds stated, with more than one run per setting?",
                 answer, evidence or ["runs/results.json absent: seeds unknown"])


def error_bars_item(results: Results | None) -> dict[str, Any]:
    metrics = [m for b in (results or {}).get("arms", {}).values()
               for m in b.get("metrics", {}).values() if "ci" in m]
    gaps = (results or {}).get("gaps", [])
    if not metrics:
        return _item("error_bars", "Are error bars reported, and is it said how they are "
                     "computed and what variability they capture?", "no",
                     ["no interval in runs/results.json"])
    m = metrics[0]
    evidence = [f"{m.get('ci_level', 0.95):.0%} intervals, {m.get('ci_method')}, "
                f"{m.get('n')} test pairs, {m.get('n_resamples')} resamples",
                "seed spread per arm: mean, half-range, std, min and max over seeds"]
    if gaps:
        evidence.append(f"{len(gaps)} paired gaps between arms: {gaps[0].get('ci_method')}")
    tl = m.get("two_level") or {}
    if tl.get("method"):
        widened = (", widened by the claim's own seed noise (a replication on the same test "
                   "pairs)" if tl.get("training_variance") else "")
        evidence.append(f"the audit's verdicts on a printed number: {tl['method']}{widened}")
    if tl.get("method_population") not in (None, tl.get("method")):
        evidence.append(f"beyond these test pairs: {tl['method_population']}")
    return _item("error_bars", "Are error bars reported, and is it said how they are computed "
                 "and what variability they capture?", "yes", evidence)


def compute_item(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    evidence = []
    for key in ("gpu", "cuda", "driver", "torch", "python", "image_digest"):
        values = _distinct(runs, "environment", key)
        if values:
            evidence.append(f"{key}: {', '.join(values)}")
    evidence.append("wall time per run: not recorded in the run files (MLflow records each "
                    "run's start and end)")
    return _item("compute", "Are the compute resources (hardware, software, time) stated?",
                 "partial" if evidence[:-1] else "no", evidence)


def data_code_item(results: Results | None, runs: Sequence[Mapping[str, Any]],
                   params: Mapping[str, Any] | None) -> dict[str, Any]:
    profile = (results or {}).get("profile") or (params or {}).get("profile")
    world = ((params or {}).get("world") or {}).get("data", {}).get("world", {})
    data = (f"data: generated from seed {world.get('seed')} by prh.world (no download)"
            if profile == "world" else
            f"data: the user's copy of {profile} (Karpathy split), not redistributable here")
    commits = _distinct(runs, "run", "git_commit")
    dirty = "True" in _distinct(runs, "run", "git_dirty")
    evidence = [data, f"data hash: {(results or {}).get('data_hash')}",
                f"code: git commit {', '.join(commits) or 'unknown'}"
                + (" with uncommitted changes" if dirty else ""),
                f"params hash: {(results or {}).get('params_hash')}"]
    answer = "yes" if commits and not dirty else "partial"
    return _item("data_and_code", "Are the data and code available, with the exact version "
                 "that produced the numbers?", answer, evidence)


def hyperparameters_item(provenance: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    if not provenance:
        return _item("hyperparameters", "Are all hyperparameters stated, with how they were "
                     "chosen?", "partial", ["no provenance table: params.yaml values only"])
    sources = Counter(str(p.get("source")) for p in provenance)
    evidence = [f"{len(provenance)} settings in params.yaml, by source: "
                + ", ".join(f"{n} {s}" for s, n in sources.most_common())]
    assumed = [str(p.get("key")) for p in provenance if p.get("source") == "assumed"]
    if assumed:
        evidence.append(f"assumed by this rerun (no published value): {', '.join(assumed)}")
    return _item("hyperparameters", "Are all hyperparameters stated, with how they were "
                 "chosen?", "yes", evidence)


def checklist(results: Results | None, runs: Sequence[Mapping[str, Any]],
              params: Mapping[str, Any] | None,
              provenance: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The checklist document: one answer (yes / partial / no) and its evidence per item."""
    items = [seeds_item(results), error_bars_item(results), compute_item(runs),
             data_code_item(results, runs, params), hyperparameters_item(provenance)]
    return {"schema": SCHEMA, "profile": (results or {}).get("profile"), "items": items}
