"""`harness report`: the paper-vs-rerun report as one HTML file and a PDF of the same HTML.

`build_context(paths)` reads the files the pipeline wrote (formats in docs/contracts.md) and
computes every number and figure; `render(context)` fills `reports/templates/report.html.j2`
(the templates only format, they do no statistics); `write_pdf(html, path)` prints that HTML
with WeasyPrint. The sections follow issue 6 ("Reports and diffs"), with the rerun article
(000_03f36f523aa97921.txt, "Our rerun") as the example of what a rerun report shows (controls,
fit-pair vs test scores, fit-size curve, best vs last epoch, effective SIGReg weight) and the
audit article (001_3694a0dfbde3a8c0.txt, "The Numbers That Shake the Headline Sit in the Same
Paper") as the example of an audit section.

A missing or unreadable input never becomes zeros: its section says "absent", with the path
and the stage that writes it. Run files whose params or data hash differ from `results.json`
are named in a warning at the top of the report.

Section 2 puts each audited claim next to the rerun number it is about: the claim's `metric`
and `setup.arm`, read from the audit row when it carries them, else from the claims registry
(harness/claims.yaml) by claim id.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import io
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import yaml
from markupsafe import Markup

from harness import plots
from prh.io import ContractError, read_json, write_bytes, write_text

TEMPLATES = Path(__file__).resolve().parents[1] / "reports" / "templates"
RUN_FILE = re.compile(r"^(?P<arm>[A-Za-z0-9_]+)-s(?P<seed>\d+)\.json$")
STAGES = {
    "results": "aggregate (`harness aggregate`)",
    "runs": "align@ARM-SEED (`harness align --arm ARM --seed SEED`)",
    "theory": "theory (`harness theory`)",
    "contamination": "contamination (`harness contamination`)",
    "audit": "audit (`harness audit`)",
    "params": "params.yaml (kept in the repository; no stage writes it)",
    "provenance": "harness.params.provenance(), or a --provenance JSON/YAML list",
}
SCHEMAS = {"results": "prh.results/1", "audit": "prh.audit/1", "run": "prh.metrics/1"}
RUN_METRICS = ("r_at_1", "r_at_1_fit", "control_random_map_r_at_1", "control_shuffled_r_at_1",
               "chance_r_at_1")
ENV_KEYS = ("hash", "python", "torch", "cuda", "cudnn", "gpu", "driver", "image_digest")
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
FONTS = (("DejaVu Sans", "normal", "DejaVuSans.ttf"),
         ("DejaVu Sans", "bold", "DejaVuSans-Bold.ttf"),
         ("DejaVu Sans Mono", "normal", "DejaVuSansMono.ttf"))
FIRST_COLUMNS = ("id", "check", "kind", "statement", "formula", "expression", "printed",
                 "reported", "value", "recomputed", "computed", "status", "verdict")
LIST_SHOWN = 12  # longer lists of plain values (e.g. clean_ids) are shown as a count
CLEAN_OUTCOMES = ("r_at_1_hit", "mknn10")
MATCHED = {"reproduced", "arithmetic holds"}
NOT_MATCHED = {"differs", "arithmetic fails"}


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


def absent(path: Path | str, stage: str, reason: str) -> dict[str, str]:
    return {"path": str(path), "stage": STAGES[stage], "reason": reason}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_input(path: Path, stage: str, schema: str | None = None) -> tuple[Any, dict | None]:
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
    if schema and (not isinstance(data, dict) or data.get("schema") != schema):
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        return None, absent(path, stage, f"schema {found!r}, expected {schema!r}; rerun the stage")
    return data, None


def load_runs(runs_dir: Path) -> tuple[list[dict], list[dict]]:
    """Per-run metric files `ARM-sSEED.json`, sorted by (arm, seed), and the ones refused."""
    runs, problems = [], []
    files = sorted(runs_dir.glob("*.json")) if runs_dir.is_dir() else []
    for path in files:
        m = RUN_FILE.match(path.name)
        if not m:
            continue
        data, missing = load_input(path, "runs", SCHEMAS["run"])
        if missing:
            problems.append(missing)
            continue
        run = data.get("run", {})
        if run.get("arm") != m["arm"] or str(run.get("seed")) != m["seed"]:
            problems.append(absent(path, "runs", f"its 'run' record says arm {run.get('arm')!r} "
                                   f"seed {run.get('seed')!r}, the file name says otherwise"))
            continue
        runs.append({"label": f"{m['arm']}-s{m['seed']}", "arm": m["arm"], "seed": int(m["seed"]),
                     "path": str(path), "sha256": sha256(path), **data})
    runs.sort(key=lambda r: (r["arm"], r["seed"]))
    return runs, problems


def metric_value(run: Mapping, name: str) -> float | None:
    entry = run.get("metrics", {}).get(name)
    return None if entry is None else entry.get("value")


def best_and_last(curve: Sequence[Mapping], key: str = "r_at_1_test") -> dict | None:
    """Best epoch (first epoch reaching the maximum) and last epoch of a per-epoch curve."""
    pts = [(r["epoch"], r[key]) for r in curve if r.get(key) is not None]
    if not pts:
        return None
    best = max(pts, key=lambda p: p[1])
    last = pts[-1]
    return {"best_epoch": best[0], "best": best[1], "last_epoch": last[0], "last": last[1],
            "best_minus_last": best[1] - last[1]}


def registry_setups() -> dict[str, dict]:
    """Claim id -> {setup, metric, spread text} from the claims registry, for audit rows that
    do not carry them; an unreadable registry gives {} (section 2 then shows no paper values)."""
    from harness.claims import load_claims

    try:
        claims = load_claims()
    except ContractError:
        return {}
    return {cid: {"setup": dict(c.setup), "metric": c.metric, "spread": spread_text(c.spread)}
            for cid, c in claims.items()}


def spread_text(spread: Any) -> str | None:
    """A registry spread as printed, with its number of seeds when known."""
    if spread.kind == "none":
        return None
    text = spread.printed or (f"± {spread.half_range}" if spread.kind == "half_range"
                              else f"[{spread.lo}, {spread.hi}]")
    return f"{text} ({spread.n} seeds)" if spread.n else text


def paper_claims(audit: Mapping | None, registry: Mapping[str, Mapping]) -> dict:
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


def flatten(obj: Any, prefix: str = "") -> tuple[list[tuple[str, Any]], dict[str, list[dict]]]:
    """Scalars as (dotted key, value) rows; lists of records as named tables."""
    rows: list[tuple[str, Any]] = []
    tables: dict[str, list[dict]] = {}
    if isinstance(obj, Mapping):
        for k in obj:
            sub_rows, sub_tables = flatten(obj[k], f"{prefix}{k}.")
            rows += sub_rows
            tables.update(sub_tables)
    elif isinstance(obj, list) and obj and all(isinstance(x, Mapping) for x in obj):
        tables[prefix.rstrip(".")] = [dict(x) for x in obj]
    elif isinstance(obj, list) and len(obj) > LIST_SHOWN:
        rows.append((prefix.rstrip("."), f"{len(obj)} items (not listed)"))
    elif isinstance(obj, list):
        rows.append((prefix.rstrip("."), ", ".join(str(x) for x in obj)))
    else:
        rows.append((prefix.rstrip("."), obj))
    return rows, tables


def table_of(records: Sequence[Mapping]) -> dict[str, list]:
    """Records with possibly different keys as one table: the union of keys, in first-seen
    order; nested values shown as `key=value` text."""
    cols: list[str] = []
    for r in records:
        cols += [k for k in r if k not in cols]
    cols.sort(key=lambda c: FIRST_COLUMNS.index(c) if c in FIRST_COLUMNS else len(FIRST_COLUMNS))
    return {"columns": cols, "rows": [[brief(r.get(c)) for c in cols] for r in records]}


def brief(value: Any) -> Any:
    """Nested evidence as one line of text; floats to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}={brief(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(str(brief(v)) for v in value)
    return value


def section_paper_vs_rerun(results: Mapping, claims: Mapping) -> dict:
    rows = []
    for arm, block in results.get("arms", {}).items():
        for metric, m in block.get("metrics", {}).items():
            rows.append({"arm": arm, "metric": metric, "seeds": block.get("seeds", []),
                         "mean": m.get("mean"), "ci": m.get("ci"), "ci_method": m.get("ci_method"),
                         "n": m.get("n"), "claims": claims.get((arm, metric), [])})
    return {"rows": rows, "gaps": list(results.get("gaps", []))}


def section_seed_spread(results: Mapping) -> dict:
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
    for metric, entry in metrics.items():
        svg = plots.seed_dots(entry.pop("per_arm"), metric, entry.pop("means"),
                              entry.pop("outliers")) if entry.pop("plot") else None
        entry["svg"] = svg and Markup(svg)
    return {"metrics": metrics}


def section_runs(runs: Sequence[Mapping]) -> dict:
    """Controls, fit-pair vs test, best vs last epoch, and the curves of every run."""
    rows = []
    for r in runs:
        rows.append({"label": r["label"], **{k: metric_value(r, k) for k in RUN_METRICS},
                     "epochs": best_and_last(r.get("curve") or [])})
    curves = {r["label"]: r["curve"] for r in runs if r.get("curve")}
    fits = {r["label"]: r["fit_size_curve"] for r in runs if r.get("fit_size_curve")}
    best = {k: {"epoch": v["epochs"]["best_epoch"], "value": v["epochs"]["best"]}
            for k, v in ((row["label"], row) for row in rows) if v["epochs"]}
    curve_svg = plots.epoch_curves(curves, "r_at_1_test", best) if curves else None
    fit_svg = plots.fit_size_curves(fits) if fits else None
    return {"rows": rows, "curve_svg": curve_svg and Markup(curve_svg),
            "fit_svg": fit_svg and Markup(fit_svg)}


def hyperparameters(params: Any, provenance: Sequence[Mapping] | None) -> list[dict]:
    """The provenance list when there is one, else every params.yaml value with no source."""
    if provenance is not None:
        return [{"key": p.get("key"), "value": p.get("value"), "source": p.get("source"),
                 "citation": p.get("citation")} for p in provenance]
    rows, _ = flatten(params or {})
    return [{"key": k, "value": v, "source": None, "citation": None} for k, v in rows]


def load_provenance(paths: ReportPaths) -> tuple[list | None, dict | None]:
    """The hyperparameter provenance: a given list file, else `harness.params.provenance`."""
    if paths.provenance is not None:
        data, missing = load_input(paths.provenance, "provenance")
        if data is not None and not isinstance(data, list):
            return None, absent(paths.provenance, "provenance", "expected a list of records")
        return data, missing
    from harness.params import load_params, provenance

    if not paths.params.exists():
        return None, absent(paths.params, "params", "file not found")
    try:
        params = load_params(paths.params)
    except ContractError as e:
        return None, absent(paths.params, "params", f"not a valid params file: {e}")
    try:
        return provenance(params), None
    except (ContractError, ValueError, KeyError) as e:
        return None, absent(paths.params, "provenance",
                            f"the provenance table cannot be built ({e!r})")


def section_claims(audit: Mapping) -> dict:
    groups: dict[str, list[dict]] = {}
    for c in audit.get("claims", []):
        groups.setdefault(c.get("kind") or "unspecified", []).append(
            {**c, "evidence": brief(c.get("evidence") or {})})
    return {"groups": dict(sorted(groups.items())),
            "arithmetic": table_of(audit.get("arithmetic", [])),
            "summary": dict(sorted(audit.get("summary", {}).items()))}


def clean_scores(runs: Sequence[Mapping], contamination: Mapping) -> list[dict] | None:
    """Each run's mean per-query outcome on all test rows and on the clean rows (the ids
    contamination.json lists in `clean_ids.test`), GPT-3-style full-vs-clean rescoring
    (harness-anchors.md §2.6). None when there is no clean list to score against."""
    clean = (contamination.get("clean_ids") or {}).get("test")
    if clean is None:
        return None
    out = []
    for r in runs:
        npz = Path(r["path"]).with_name(str(r.get("per_query") or ""))
        if not r.get("per_query") or not npz.is_file():
            out.append({"label": r["label"], "missing": str(npz)})
            continue
        with np.load(npz, allow_pickle=False) as z:
            mask = np.isin(z["ids"].astype(str), np.asarray(clean, dtype=str))
            for key in CLEAN_OUTCOMES:
                if key in z.files and mask.any():
                    x = z[key].astype(np.float64)
                    out.append({"label": r["label"], "outcome": key, "n": int(x.size),
                                "n_clean": int(mask.sum()), "full": float(x.mean()),
                                "clean": float(x[mask].mean()),
                                "shift": float(x[mask].mean() - x.mean())})
    return out


def section_flat(data: Mapping) -> dict:
    rows, tables = flatten(data)
    return {"rows": rows, "tables": {k: table_of(v) for k, v in tables.items()}}


def section_provenance(results: Mapping | None, runs: Sequence[Mapping],
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
                      **r.get("run", {}), "has_env": "environment" in r} for r in runs],
            "aggregate": None if results is None else {
                k: results.get(k) for k in ("profile", "params_hash", "data_hash", "n_test")},
            "environments": [e["runs"] for e in envs], "env_rows": env_rows,
            "inputs": list(inputs)}


def hash_warnings(results: Mapping | None, runs: Sequence[Mapping], runs_dir: Path) -> list[str]:
    """Runs from another params or data hash than the aggregate, and listed runs not found."""
    if results is None:
        return []
    out = []
    for r in runs:
        for key in ("params_hash", "data_hash"):
            if r.get("run", {}).get(key) != results.get(key):
                out.append(f"{r['path']}: {key} {r.get('run', {}).get(key)!r} differs from "
                           f"results.json's {results.get(key)!r}; rerun `dvc repro` so that "
                           "every file comes from the same params and data")
    have = {Path(r["path"]).name for r in runs}
    for listed in results.get("runs", []):
        if Path(listed).name not in have:
            out.append(f"results.json lists {listed}, not found in {runs_dir}; rerun its "
                       f"stage, {STAGES['runs']}")
    return out


def build_context(paths: ReportPaths) -> dict:
    """Every number, table and figure of the report, from the pipeline's files only."""
    results, no_results = load_input(paths.results, "results", SCHEMAS["results"])
    audit, no_audit = load_input(paths.audit, "audit", SCHEMAS["audit"])
    theory, no_theory = load_input(paths.theory, "theory")
    contamination, no_contamination = load_input(paths.contamination, "contamination")
    params, no_params = load_input(paths.params, "params")
    provenance, no_provenance = load_provenance(paths)
    runs, run_problems = load_runs(paths.runs_dir)
    no_runs = None if runs else absent(paths.runs_dir / "ARM-sSEED.json", "runs",
                                       "no run files found")
    inputs = [{"name": name, "path": str(p), "sha256": sha256(p) if p.exists() else None}
              for name, p in (("results", paths.results), ("audit", paths.audit),
                              ("theory", paths.theory), ("contamination", paths.contamination),
                              ("params", paths.params))]
    claims = paper_claims(audit, registry_setups() if audit else {})
    sections = {
        "paper_vs_rerun": {"absent": no_results, "audit_absent": no_audit,
                           **(section_paper_vs_rerun(results, claims) if results else {})},
        "seed_spread": {"absent": no_results, **(section_seed_spread(results) if results else {})},
        "runs": {"absent": no_runs, "problems": run_problems,
                 **(section_runs(runs) if runs else {})},
        "sigreg": {"absent": no_runs, "weights": [
            {"label": r["label"], "value": r.get("effective_sigreg_weight")} for r in runs],
            "hyper": hyperparameters(params, provenance), "params_absent": no_params,
            "provenance_absent": no_provenance},
        "claims": {"absent": no_audit, "theory_absent": no_theory,
                   **(section_claims(audit) if audit else {}),
                   "theory": section_flat(theory) if theory is not None else None},
        "contamination": {"absent": no_contamination,
                          **(section_flat(contamination) if contamination is not None else {}),
                          "clean": clean_scores(runs, contamination or {})},
        "provenance": {"absent": no_results if not runs else None,
                       **section_provenance(results, runs, inputs)},
    }
    return {"title": "Proving and Improving the Platonic Representation Hypothesis with JEPAs: "
                     "rerun and audit",
            "profile": (results or {}).get("profile") or (params or {}).get("profile"),
            "created": source_date(),
            "summary": summary(results, audit, runs, sections),
            "warnings": hash_warnings(results, runs, paths.runs_dir),
            "sections": sections}


def summary(results: Mapping | None, audit: Mapping | None, runs: Sequence[Mapping],
            sections: Mapping) -> dict:
    claims = (audit or {}).get("claims", [])
    return {
        "arms": {arm: b.get("seeds", []) for arm, b in (results or {}).get("arms", {}).items()},
        "n_test": (results or {}).get("n_test"),
        "n_runs": len(runs),
        "verdicts": dict(sorted((audit or {}).get("summary", {}).items())),
        "matched": [c for c in claims if c.get("verdict") in MATCHED],
        "not_matched": [c for c in claims if c.get("verdict") in NOT_MATCHED],
        "absent": [{"section": name, **s["absent"]} for name, s in sections.items()
                   if s.get("absent")],
        "results_absent": results is None, "audit_absent": audit is None,
    }


def source_date() -> str | None:
    """The report date: SOURCE_DATE_EPOCH when set (reproducible builds), else none at all."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        return None
    return datetime.fromtimestamp(int(epoch), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_num(value: Any, digits: int = 3) -> str:
    """Formatting only: floats to `digits` decimals (4 significant when tiny), None to a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if value != 0 and abs(value) < 10 ** -digits:
        return f"{value:.{digits}g}" if abs(value) >= 1e-4 else f"{value:.2e}"
    return f"{value:.{digits}f}"


def fmt_ci(ci: Sequence[float] | None, digits: int = 3) -> str:
    return "—" if not ci else f"[{fmt_num(ci[0], digits)}, {fmt_num(ci[1], digits)}]"


def font_css(text: str, font_dir: Path = FONT_DIR) -> str:
    """`@font-face` rules embedding DejaVu, subset to the characters of `text`, so the HTML
    needs no installed font and WeasyPrint prints no empty glyphs (WeasyPrint #1810). Fonts
    that are not installed are skipped and the browser falls back to `sans-serif`."""
    chars = "".join(sorted(set(text) | set("0123456789.-+—−±[]()%, ")))
    return "\n".join(
        f'@font-face {{ font-family: "{family}"; font-weight: {weight}; '
        f'src: url(data:font/ttf;base64,{subset_font(font_dir / name, chars)}) '
        'format("truetype"); }'
        for family, weight, name in FONTS if (font_dir / name).exists())


@functools.lru_cache(maxsize=16)
def subset_font(path: Path, chars: str) -> str:
    """The font at `path` cut down to `chars`, base64; byte-stable (no new `head` date)."""
    from fontTools import subset  # installed with WeasyPrint

    opts = subset.Options(drop_tables=[*subset.Options().drop_tables, "FFTM"])
    font = subset.load_font(str(path), opts)
    font.recalcTimestamp = False
    sub = subset.Subsetter(opts)
    sub.populate(text=chars)
    sub.subset(font)
    buf = io.BytesIO()
    subset.save_font(font, buf, opts)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render(context: Mapping, templates: Path = TEMPLATES) -> str:
    """The report HTML: autoescaped (captions and statements are data), self-contained
    (inline SVG, embedded CSS and fonts, no script, no network)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["num"] = fmt_num
    env.filters["ci"] = fmt_ci
    template = env.get_template("report.html.j2")
    draft = template.render(**context, font_css="")
    return template.render(**context, font_css=Markup(font_css(draft)))


def write_pdf(html: str, path: str | os.PathLike[str]) -> None:
    """Print `html` with WeasyPrint, atomically. Same HTML -> same bytes: the date comes only
    from the HTML's `dcterms.created` (set from SOURCE_DATE_EPOCH) and the PDF identifier is a
    hash of the HTML (WeasyPrint issue #1553, harness-anchors.md §2.8)."""
    from weasyprint import HTML  # slow import; only the PDF needs it

    ident = hashlib.sha256(html.encode("utf-8")).hexdigest()[:32].encode()
    write_bytes(path, HTML(string=html, base_url=None).write_pdf(pdf_identifier=ident))


def cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harness report", description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=Path("runs/results.json"))
    ap.add_argument("--runs-dir", type=Path, default=Path("runs/align"))
    ap.add_argument("--theory", type=Path, default=Path("runs/theory.json"))
    ap.add_argument("--contamination", type=Path, default=Path("runs/contamination.json"))
    ap.add_argument("--audit", type=Path, default=Path("reports/audit.json"))
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--provenance", type=Path, default=None,
                    help="JSON/YAML list of {key, value, source, citation} (default: "
                         "harness.params.provenance)")
    ap.add_argument("--html", type=Path, default=Path("reports/audit.html"))
    ap.add_argument("--pdf", type=Path, default=None)
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a section is absent or a run file mismatches (for CI)")
    args = ap.parse_args(argv)
    ctx = build_context(ReportPaths(args.results, args.runs_dir, args.theory, args.contamination,
                                    args.audit, args.params, args.provenance))
    for w in ctx["warnings"]:
        print(f"harness report: warning: {w}", file=sys.stderr)
    for a in ctx["summary"]["absent"]:
        print(f"harness report: section {a['section']} absent: {a['path']} ({a['reason']}); "
              f"written by {a['stage']}", file=sys.stderr)
    html = render(ctx)
    write_text(args.html, html)
    if args.pdf is not None:
        write_pdf(html, args.pdf)
    return 1 if args.strict and (ctx["warnings"] or ctx["summary"]["absent"]) else 0
