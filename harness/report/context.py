"""The report's context: every number, table and figure of the paper-vs-rerun report, computed
from the files the pipeline wrote (formats in docs/contracts.md); harness.report.render turns it
into HTML and PDF, and the `report` stage (harness/stages/report.py) writes both.

The sections follow what a rerun report shows (the rerun article, "Our rerun": controls,
fit-pair against test scores, the fit-size curve, best against last epoch, the effective SIGReg
weight) and what an audit shows (the audit article, "The Numbers That Shake the Headline Sit in
the Same Paper"). The measurement sections (calibrated alignment, five captions and the pool
size, pair-free alignment, what shakes each headline number, determinism, the world's
settings) are built by harness.report.measures.

A missing or unreadable input never becomes zeros: its section says "absent", with the path
and the stage that writes it. Run files whose params or data hash differ from `results.json`
are named in a warning at the top of the report.

The paper-vs-rerun section puts each audited claim next to the rerun number it is about: the
claim's `metric` and `setup.arm`, read from the audit row when it carries them, else from the
claims registry (harness/audit/claims.yaml) by claim id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from markupsafe import Markup

from harness.audit.claims import REGISTRY
from harness.records import names
from harness.records.runfile import RUN_FILE, check_run_file, run_name
from harness.records.schemas import (
    CONTAMINATION,
    PROBE,
    RESULTS,
    THEORY,
    Results,
    Schema,
)
from harness.records.study import PLAN
from harness.records.verdicts import AUDIT, Audit
from harness.report import measures, plots
from harness.report.checklist import checklist
from harness.report.measures import clean_scores
from harness.report.render import brief, rows_and_tables, source_date, table_of
from harness.report.study import section_study
from harness.report.summary import audit_table, first_page
from prh.config import CURVE_TEST
from prh.io import ContractError, file_sha256, read_json

STAGES = {
    "results": "stage aggregate (`dvc repro aggregate`)",
    "runs": "stage align@ARM-SEED (`dvc repro align@ARM-SEED`)",
    "theory": "stage theory (`dvc repro theory`)",
    "contamination": "stage contamination (`dvc repro contamination`)",
    "audit": "stage audit (`dvc repro audit`)",
    "params": "params.yaml (kept in the repository; no stage writes it)",
    "provenance": "harness.config.provenance.provenance(), or a --provenance JSON/YAML list",
    "probe": "stage probe (`dvc repro probe`)",
    "plan": "stage plan (`dvc repro plan`)",
}
SCHEMAS = {"results": RESULTS, "audit": AUDIT, "probe": PROBE, "theory": THEORY,
           "contamination": CONTAMINATION}  # input -> the schema it must carry
ENV_KEYS = ("hash", "python", "torch", "cuda", "cudnn", "gpu", "driver", "image_digest")


@dataclass(frozen=True)
class ReportPaths:
    """Every input of the report; `provenance` is the optional hyperparameter-source list."""

    results: Path
    runs_dir: Path
    theory: Path
    contamination: Path
    audit: Path
    params: Path
    provenance: Path | None = None
    prepared: Path | None = None  # the prepare stage's summary.json (its data-check warnings)
    probe: Path | None = None  # the probe stage's JSON (lambda sweep, determinism)
    claims: Path = REGISTRY  # the registry the audit judged (the audit stage's --claims)
    plan: Path | None = None  # the registered seed plan (runs/plan.json)


def absent(path: Path | str, stage: str, reason: str) -> dict[str, str]:
    return {"path": str(path), "stage": STAGES[stage], "reason": reason}


def load_input(path: Path, stage: str, schema: Schema | None = None) -> tuple[Any, dict | None]:
    """(data, None) when the file reads and has the expected schema, else (None, absence)."""
    if not path.exists():
        return None, absent(path, stage, "file not found")
    try:
        if path.suffix in {".yaml", ".yml"}:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        else:
            data = read_json(path)
    except (ContractError, yaml.YAMLError) as e:
        return None, absent(path, stage, f"unreadable: {e}")
    problem = schema and schema.unreadable(data)
    if problem:
        return None, absent(path, stage, f"{problem}; rerun the stage")
    return data, None


def load_runs(runs_dir: Path) -> tuple[list[dict], list[dict]]:
    """Per-run metric files `ARM-sSEED.json`, sorted by (arm, seed), and the ones refused."""
    runs, problems = [], []
    files = sorted(runs_dir.glob("*.json")) if runs_dir.is_dir() else []
    for path in files:
        m = RUN_FILE.match(path.name)
        if not m:
            continue
        data, missing = load_input(path, "runs")
        try:
            if missing:
                raise ContractError(missing["reason"])
            check_run_file(path.name, data, str(path))
        except ContractError as e:
            problems.append(missing or absent(path, "runs", str(e)))
            continue
        arm, seed = m["arm"], int(m["seed"])
        runs.append({"label": run_name(arm, seed), "arm": arm, "seed": seed, "path": str(path),
                     "sha256": file_sha256(path), **data})
    runs.sort(key=lambda r: (r["arm"], r["seed"]))
    return runs, problems


def metric_value(run: Mapping, name: str) -> float | None:
    entry = run.get("metrics", {}).get(name)
    return None if entry is None else entry.get("value")


def best_and_last(curve: Sequence[Mapping], key: str = CURVE_TEST) -> dict | None:
    """Best epoch (first epoch reaching the maximum) and last epoch of a per-epoch curve."""
    pts = [(r["epoch"], r[key]) for r in curve if r.get(key) is not None]
    if not pts:
        return None
    best = max(pts, key=lambda p: p[1])
    last = pts[-1]
    return {"best_epoch": best[0], "best": best[1], "last_epoch": last[0], "last": last[1],
            "best_minus_last": best[1] - last[1]}


def registry_setups(path: Path = REGISTRY) -> dict[str, dict]:
    """Claim id -> {setup, metric, spread text, value, printed, source, kind, where, statement}
    from the claims registry, for audit rows that do not carry them and for the paper's values
    beside the measurements; an unreadable registry gives {} (no paper values are shown)."""
    from harness.audit.claims import load_claims

    try:
        claims = load_claims(path)
    except ContractError:
        return {}
    return {cid: {"setup": dict(c.setup), "metric": c.metric, "spread": spread_text(c.spread),
                  "value": c.scalar(), "printed": c.printed, "source": c.source, "kind": c.kind,
                  "where": c.where, "statement": c.statement} for cid, c in claims.items()}


def spread_text(spread: Any) -> str | None:
    """A registry spread as printed, with its number of seeds when known."""
    if spread.kind == "none":
        return None
    text = spread.printed or (f"± {spread.half_range}" if spread.kind == "half_range"
                              else f"[{spread.lo}, {spread.hi}]")
    return f"{text} ({spread.n} seeds)" if spread.n else text


def paper_claims(audit: Audit | None, registry: Mapping[str, Mapping]) -> dict:
    """(arm, metric) -> the audited claims about that number (paper's and rerun article's),
    each as printed, with its spread and verdict. Curve points and other variants of the
    recipe (`setup.variant`) are left to section 6."""
    out: dict[tuple[str, str], list[dict]] = {}
    for row in (audit or {}).get("claims", []):
        known = registry.get(row.get("id"), {})
        setup = row.get("setup") or known.get("setup") or {}
        arm, metric = setup.get("arm"), row.get("metric") or known.get("metric")
        if not arm or not metric or setup.get("variant"):
            continue
        out.setdefault((arm, metric), []).append({
            "id": row.get("id"), "source": row.get("source"), "printed": row.get("printed"),
            "spread": row.get("spread") if isinstance(row.get("spread"), str)
            else known.get("spread"), "verdict": row.get("verdict")})
    return out


def section_paper_vs_rerun(results: Results, claims: Mapping) -> dict:
    rows, k = [], names.results_k(results)
    for arm, block in results.get("arms", {}).items():
        for metric, m in block.get("metrics", {}).items():
            rows.append({"arm": arm, "metric": metric, "label": names.label(metric, k),
                         "seeds": block.get("seeds", []),
                         "mean": m.get("mean"), "ci": m.get("ci"), "ci_method": m.get("ci_method"),
                         "n": m.get("n"), "level": m.get("ci_level"),
                         "claims": claims.get((arm, metric), [])})
    levels = {r["level"] for r in rows if r["level"] is not None}
    gaps = [{**g, "contains_zero": None if not g.get("ci") else
             "yes" if g["ci"][0] <= 0 <= g["ci"][1] else "no"}
            for g in results.get("gaps", [])]
    return {"rows": rows, "gaps": gaps, "level": levels.pop() if len(levels) == 1 else None,
            "ci_method": next((r["ci_method"] for r in rows if r["ci_method"]), None)}


def section_seed_spread(results: Results) -> dict:
    metrics: dict[str, dict] = {}
    for arm, block in results.get("arms", {}).items():
        for metric, m in block.get("metrics", {}).items():
            entry = metrics.setdefault(metric, {"rows": [], "per_arm": {}, "means": {},
                                                "outliers": {}, "plot": False})
            entry["plot"] |= "ci" in m  # plot the scored metrics, tabulate controls and chance
            values = {str(k): v for k, v in m.get("values", {}).items()}
            outliers = [str(s) for s in m.get("outliers", [])]
            entry["rows"].append({"arm": arm, "values": values, "mean": m.get("mean"),
                                  "half_range": m.get("half_range"), "std": m.get("std"),
                                  "min": m.get("min"), "max": m.get("max"), "outliers": outliers})
            entry["per_arm"][arm] = values
            entry["means"][arm] = m.get("mean")
            entry["outliers"][arm] = outliers
    k = names.results_k(results)
    for metric, entry in metrics.items():
        svg = plots.seed_dots(entry.pop("per_arm"), names.label(metric, k), entry.pop("means"),
                              entry.pop("outliers")) if entry.pop("plot") else None
        entry["svg"] = svg and Markup(svg)
    return {"metrics": metrics}


def section_runs(runs: Sequence[Mapping]) -> dict:
    """Controls, fit-pair vs test, best vs last epoch, and the curves of every run."""
    k = names.results_k(runs[0]) if runs else names.PAPER_K
    columns = [{"key": m, "label": names.label(m, k)} for m in names.in_view("run", k)]
    rows = []
    for r in runs:
        rows.append({"label": r["label"], **{c["key"]: metric_value(r, c["key"]) for c in columns},
                     "epochs": best_and_last(r.get("curve") or [])})
    curves = {r["label"]: r["curve"] for r in runs if r.get("curve")}
    fits = {r["label"]: r["fit_size_curve"] for r in runs if r.get("fit_size_curve")}
    best = {row["label"]: {"epoch": row["epochs"]["best_epoch"], "value": row["epochs"]["best"]}
            for row in rows if row["epochs"]}
    r1 = names.label("r_at_1", k)
    curve_svg = plots.epoch_curves(curves, CURVE_TEST, best, r1) if curves else None
    fit_svg = plots.fit_size_curves(fits, r1) if fits else None
    return {"columns": columns, "rows": rows, "r1": r1,
            "curve_svg": curve_svg and Markup(curve_svg),
            "fit_svg": fit_svg and Markup(fit_svg)}


def hyperparameters(params: Any, provenance: Sequence[Mapping] | None) -> list[dict]:
    """The provenance list when there is one, else every params.yaml value with no source."""
    if provenance is not None:
        return [{"key": p.get("key"), "value": p.get("value"), "source": p.get("source"),
                 "citation": p.get("citation"), "assumed": p.get("source") == "assumed"}
                for p in provenance]
    rows, _ = rows_and_tables(params or {})
    return [{"key": k, "value": v, "source": None, "citation": None, "assumed": False}
            for k, v in rows]


def load_profile_params(path: Path) -> tuple[Any, dict | None]:
    """(harness.config.params.Params, None) when params.yaml loads, else (None, absence)."""
    from harness.config.params import load_params

    if not path.exists():
        return None, absent(path, "params", "file not found")
    try:
        return load_params(path), None
    except ContractError as e:
        return None, absent(path, "params", f"not a valid params file: {e}")


def load_provenance(path: Path | None, params: Any, no_params: dict | None
                    ) -> tuple[list | None, dict | None]:
    """The hyperparameter provenance: the list file at `path` when given, else
    `harness.config.provenance.provenance` of the loaded params (their absence when they did not
    load)."""
    if path is not None:
        data, missing = load_input(path, "provenance")
        if data is not None and not isinstance(data, list):
            return None, absent(path, "provenance", "expected a list of records")
        return data, missing
    from harness.config.provenance import provenance

    if params is None:
        return None, no_params
    try:
        return provenance(params), None
    except (ContractError, ValueError, KeyError) as e:
        return None, absent(params.path, "provenance",
                            f"the provenance table cannot be built ({e!r})")


def section_flat(data: Mapping) -> dict:
    rows, tables = rows_and_tables(data)
    return {"rows": rows, "tables": {k: table_of(v) for k, v in tables.items()}}


def section_provenance(results: Results | None, runs: Sequence[Mapping],
                       inputs: Sequence[Mapping]) -> dict:
    envs: list[dict] = []
    for r in runs:
        env = r.get("environment")
        if env is None:
            continue
        match = next((e for e in envs if e["fingerprint"] == env), None)
        if match is None:
            envs.append(match := {"fingerprint": env, "runs": []})
        match["runs"].append(r["label"])
    keys = {k for e in envs for k in e["fingerprint"]}
    env_rows = [{"key": k, "values": [e["fingerprint"].get(k) for e in envs]}
                for k in [k for k in ENV_KEYS if k in keys] + sorted(keys - set(ENV_KEYS))]
    return {"runs": [{"label": r["label"], "path": r["path"], "sha256": r["sha256"],
                      **r.get("run", {})} for r in runs],
            "aggregate": None if results is None else {
                k: results.get(k) for k in ("profile", "params_hash", "data_hash", "n_test")},
            "environments": [e["runs"] for e in envs], "env_rows": env_rows,
            "missing_env": [r["label"] for r in runs if "environment" not in r],
            "inputs": list(inputs)}


def hash_warnings(results: Results | None, runs: Sequence[Mapping], runs_dir: Path,
                  params: Any = None) -> list[str]:
    """Runs scored under other params than params.yaml gives their arm (Params.arm_hash; without
    params.yaml, than the arm's first run) or from another data hash than the aggregate, and
    listed runs not found."""
    if results is None:
        return []
    out = []
    first: dict[str, tuple[str, Any]] = {}
    for r in sorted(runs, key=lambda r: str(r["path"])):
        run = r.get("run", {})
        arm = run.get("arm")
        expected = {"data_hash": ("results.json's", results.get("data_hash"))}
        if params is not None and arm in params.arms:
            expected["params_hash"] = (f"params.yaml's for {arm}", params.arm_hash(arm))
        else:
            expected["params_hash"] = first.setdefault(
                arm, (f"{Path(r['path']).name}'s", run.get("params_hash")))
        for key, (whose, want) in expected.items():
            if run.get(key) != want:
                out.append(f"{r['path']}: {key} {run.get(key)!r} differs from {whose} "
                           f"{want!r}; rerun `dvc repro` so that every file comes from the "
                           "same params and data")
    have = {Path(r["path"]).name for r in runs}
    for listed in results.get("runs", []):
        if Path(listed).name not in have:
            out.append(f"results.json lists {listed}, not found in {runs_dir}; rerun its "
                       f"stage, {STAGES['runs']}")
    return out


def data_warnings(summary: Path | None) -> list[str]:
    """The prepare stage's warnings (differences from Karpathy's Flickr30k that keep the
    protocol), each prefixed by its file; none without the file."""
    if summary is None or not summary.is_file():
        return []
    return [f"{summary}: {w}" for w in read_json(summary).get("warnings", [])]


def build_context(paths: ReportPaths) -> dict:
    """Every number, table and figure of the report, from the pipeline's files only."""
    results, no_results = load_input(paths.results, "results", SCHEMAS["results"])
    audit, no_audit = load_input(paths.audit, "audit", SCHEMAS["audit"])
    theory, no_theory = load_input(paths.theory, "theory", SCHEMAS["theory"])
    contamination, no_contamination = load_input(paths.contamination, "contamination",
                                                 SCHEMAS["contamination"])
    params, no_params = load_input(paths.params, "params")
    profile_params, no_profile = load_profile_params(paths.params)
    provenance, no_provenance = load_provenance(paths.provenance, profile_params, no_profile)
    runs, run_problems = load_runs(paths.runs_dir)
    no_runs = None if runs else absent(paths.runs_dir / "ARM-sSEED.json", "runs",
                                       "no run files found")
    inputs = [{"name": name, "path": str(p), "sha256": file_sha256(p) if p.exists() else None}
              for name, p in (("results", paths.results), ("audit", paths.audit),
                              ("theory", paths.theory), ("contamination", paths.contamination),
                              ("params", paths.params))]
    probe, no_probe = (load_input(paths.probe, "probe", SCHEMAS["probe"]) if paths.probe
                       else (None, None))
    plan, no_plan = (load_input(paths.plan, "plan", PLAN) if paths.plan
                     else (None, absent("runs/plan.json", "plan", "no --plan given")))
    registry = registry_setups(paths.claims)
    claims = paper_claims(audit, registry)
    clean = clean_scores(runs, contamination or {})
    sections = {
        "paper_vs_rerun": {"absent": no_results, "audit_absent": no_audit,
                           **(section_paper_vs_rerun(results, claims) if results else {})},
        "seed_spread": {"absent": no_results, **(section_seed_spread(results) if results else {})},
        "runs": {"absent": no_runs, "problems": run_problems,
                 **(section_runs(runs) if runs else {})},
        "sigreg": {"absent": no_runs, "weights": [
            {"label": r["label"], "value": r.get("effective_sigreg_weight")} for r in runs],
            "hyper": (hyper := hyperparameters(params, provenance)),
            "assumed": [h for h in hyper if h["assumed"]], "params_absent": no_params,
            "provenance_absent": no_provenance},
        "claims": {"absent": no_audit, "theory_absent": no_theory,
                   **(audit_table(audit, brief) if audit else {}),
                   "theory": section_flat(theory) if theory is not None else None},
        "study": {"absent": no_plan, **section_study(plan, audit)},
        "contamination": {"absent": no_contamination,
                          **(section_flat(contamination) if contamination is not None else {}),
                          "clean": clean},
        "provenance": {"absent": no_results if not runs else None,
                       **section_provenance(results, runs, inputs)},
    }
    profile = (results or {}).get("profile") or (params or {}).get("profile")
    sections.update(measures.sections(results, runs, probe, profile_params, profile=profile,
                                      registry=registry, clean=clean, missing={
                                          "results": no_results, "probe": no_probe,
                                          "params": no_profile}))
    return {"title": "Proving and Improving the Platonic Representation Hypothesis with JEPAs: "
                     "rerun and audit",
            "profile": profile, "first_page": first_page(audit, results, profile),
            "checklist": checklist(results, runs, params, provenance),
            "created": source_date(),
            "summary": summary(results, audit, runs, sections),
            "warnings": hash_warnings(results, runs, paths.runs_dir, profile_params),
            "data_warnings": data_warnings(paths.prepared),
            "mlflow_run_id": (results or {}).get("mlflow_run_id"),  # the pipeline's MLflow run
            "sections": sections}


def summary(results: Results | None, audit: Audit | None, runs: Sequence[Mapping],
            sections: Mapping) -> dict:
    """What the first page says about the run itself: arms and seeds, test pairs, run files,
    and the sections whose input is absent."""
    return {
        "arms": {arm: b.get("seeds", []) for arm, b in (results or {}).get("arms", {}).items()},
        "n_test": (results or {}).get("n_test"),
        "n_runs": len(runs),
        "absent": [{"section": name, **s["absent"]} for name, s in sections.items()
                   if s.get("absent")],
        "results_absent": results is None, "audit_absent": audit is None,
    }
