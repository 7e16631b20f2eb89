"""The report's measurement sections, beside those of harness.report: alignment calibrated
against a permutation null, five captions per photo and the size of the candidate pool,
alignment without pairs, determinism and what shakes each headline number, who wrote the
training texts (Table 7's design), and the generated world's settings. Each builder takes
finished inputs (results.json, the run files, the probe stage's JSON, params.yaml, the claims
registry as `harness.report.context.registry_setups` gives it) and returns numbers and
figures; the templates only lay them out.

A number measured here is about this run's data: the paper's values appear only as labelled
context with the data set they were measured on, never as a target a world-profile number
reproduces, and every interval or spread names what it resamples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from markupsafe import Markup

from harness.data.contamination import clean_mask, rescore
from harness.records import names
from harness.records.perquery import read_per_query
from harness.records.schemas import Results
from harness.report import plots
from prh.io import ContractError

CALIBRATED_FIELDS = ("raw", "null_q50", "null_q95", "null_q99", "threshold", "p_value",
                     "calibrated")


def caption_metrics(k: int) -> dict[str, str]:
    """Metric -> what it scores, at k: the headline pair and prh.gallery's (docs/contracts.md,
    "prh.gallery"), in the metric table's words."""
    return {m: names.describe(m, k) for m in (*names.headline(k), *names.in_group("gallery", k=k))}


PAIR_FREE_SCORES = ("r_at_1", "foscttm")  # prh.pairfree's scores, each beside its chance level
# registry ids of the paper's pair-free experiment, shown as context (the audit article,
# "Three Places Where It Loses")
PAIR_FREE_CONTEXT = ("pairfree_jepa_r1", "pairfree_chance", "pairfree_pool", "t4_jepa_foscttm",
                     "pairfree_others_max")
DATASETS = {"flickr30k": "Flickr30k", "coco": "COCO", "wit_1024": "WIT"}


def clean_scores(runs: Sequence[Mapping], contamination: Mapping) -> list[dict] | None:
    """Each run's mean per-query outcome on all test rows and on the clean rows (the ids
    contamination.json lists in `clean_ids.test`): full-against-clean rescoring, as GPT-3's
    contamination study does. None when there is no clean list to score against."""
    clean = (contamination.get("clean_ids") or {}).get("test")
    if clean is None:
        return None
    out = []
    for r in runs:
        npz = Path(r["path"]).with_name(str(r.get("per_query") or ""))
        if not r.get("per_query") or not npz.is_file():
            out.append({"label": r["label"], "missing": str(npz)})
            continue
        ids, outcomes = read_per_query(npz)
        ids = ids.astype(str)
        mask = clean_mask(ids, set(ids) - set(map(str, clean)))
        for metric in names.headline(names.results_k(r)):
            key = names.outcome_of(metric, outcomes)
            if key is not None and mask.any():
                out.append({"label": r["label"], "outcome": key, "missing": None,
                            **rescore(outcomes[key], mask)})
    return out


def section_calibrated(results: Results) -> dict:
    """Per metric, one row per arm: n_permutations, alpha, the smallest attainable p-value 1/(K+1),
    and the seed spread of every calibrated field (harness.records.results.aggregate_calibrated)."""
    metrics: dict[str, list[dict]] = {}
    for arm, block in results.get("arms", {}).items():
        for metric, c in (block.get("calibrated") or {}).items():
            k = c.get("n_permutations")
            metrics.setdefault(metric, []).append({
                "arm": arm, "n_permutations": k, "alpha": c.get("alpha"),
                "min_p": 1.0 / (k + 1) if k else None,
                **{f: c.get(f) or {} for f in CALIBRATED_FIELDS}})
    return {"metrics": metrics, "k": names.results_k(results)}


def full_pool(curve: Sequence[Mapping]) -> Mapping:
    """The gallery curve's row of the whole test split (its largest pool), {} without one."""
    return max(curve, key=lambda r: r["n_photos"]) if curve else {}


def section_captions(results: Results) -> dict:
    """One-caption against all-caption scores per arm (seed mean, interval over test photos,
    chance on the whole split) and the scores against the pool size, one plot per metric."""
    rows, panels, k = [], {}, names.results_k(results)
    for arm, block in results.get("arms", {}).items():
        curve = block.get("gallery_curve") or []
        chance = full_pool(curve).get("chance", {})
        controls = block.get("controls", {})
        for metric, what in caption_metrics(k).items():
            m = block.get("metrics", {}).get(metric)
            if m is not None:
                fallback = controls.get(names.chance(metric), {}).get("mean")
                rows.append({"arm": arm, "metric": metric, "what": what, "mean": m.get("mean"),
                             "std": m.get("std"), "ci": m.get("ci"),
                             "chance": chance.get(metric, fallback)})
        for metric in caption_metrics(k):
            pts = [r for r in curve if metric in r["metrics"]]
            if not pts:
                continue
            panel = panels.setdefault(metric, {
                "label": names.label(metric, k), "arms": {},
                "chance": {"n": [r["n_photos"] for r in pts],
                           "value": [r["chance"][metric] for r in pts]}})
            panel["arms"][arm] = {"n": [r["n_photos"] for r in pts],
                                  "mean": [r["metrics"][metric]["mean"] for r in pts],
                                  "std": [r["metrics"][metric]["std"] for r in pts]}
    curves = [b.get("gallery_curve") for b in results.get("arms", {}).values()]
    first = next((c for c in curves if c), [])
    methods = {r["ci_method"] for b in results.get("arms", {}).values()
               for r in b.get("metrics", {}).values() if r.get("ci_method")}
    svg = plots.pool_size_curves(panels) if panels else None
    return {"rows": rows,
            "all_captions": any(r["metric"] not in names.headline(k) for r in rows),
            "svg": svg and Markup(svg), "sizes": [r["n_photos"] for r in first],
            "draws": max((r["draws"] for r in first), default=None),
            "ci_method": methods.pop() if len(methods) == 1 else None}


def section_pair_free(results: Results, runs: Sequence[Mapping],
                      registry: Mapping[str, Mapping]) -> dict:
    """Per arm: the seed spread of the pair-free scores (results.json arms.ARM.pair_free), each
    seed's status from its run file, and the paired Procrustes R@1 of the same arm; how the
    runs prepared the rows (their `inputs`); the paper's pair-free numbers from the registry,
    as context about other data."""
    fields = [f for m in PAIR_FREE_SCORES for f in (m, names.row(m).chance_at(names.PAPER_K))]
    labels = {**{f: names.label(f) for f in fields}, "r_at_1": names.label("pairfree_r_at_1"),
              "paired": names.label("r_at_1")}
    rows = []
    for arm, block in results.get("arms", {}).items():
        paired = block.get("metrics", {}).get("r_at_1", {})
        pf = block.get("pair_free")
        arm_runs = [r for r in runs if r["arm"] == arm and r.get("pair_free")]
        statuses = {str(r["seed"]): r["pair_free"].get("status") for r in arm_runs}
        pool = arm_runs[0]["pair_free"] if arm_runs else {}
        rows.append({"arm": arm, "run": bool(pf), "paired": paired.get("mean"),
                     "paired_ci": paired.get("ci"), "statuses": statuses,
                     "collapsed": sorted(s for s, v in statuses.items() if v != "ok"),
                     **{f: (pf or {}).get(f) or {} for f in fields},
                     **{k: pool.get(k) for k in ("n_pool_images", "n_pool_texts")}})
    context = [{"id": cid, **registry[cid]} for cid in PAIR_FREE_CONTEXT if cid in registry]
    inputs = sorted({r["pair_free"].get("inputs") or "not recorded" for r in runs
                     if r.get("pair_free")})
    return {"rows": rows, "fields": fields, "labels": labels, "run": any(r["run"] for r in rows),
            "context": context, "inputs": " and ".join(inputs)}


def paper_values(registry: Mapping[str, Mapping]) -> dict[tuple[str, str], dict]:
    """(arm, metric) -> the paper's own number under the rerun's protocol: the registry's
    claims by the paper, measurable on Flickr30k, about one arm, not a variant of the recipe."""
    out = {}
    for cid, c in registry.items():
        setup = c.get("setup", {})
        if c.get("source") == "paper" and c.get("kind") == "flickr_measurable" \
                and setup.get("arm") and not setup.get("variant"):
            data = DATASETS.get(setup.get("dataset"), setup.get("dataset") or "other data")
            out[setup["arm"], c["metric"]] = {"id": cid, "value": c["value"],
                                              "printed": c["printed"], "label": f"paper ({data})"}
    return out


def section_determinism(probe: Mapping | None) -> dict:
    """The same seed trained twice (harness.stages.probe): every largest absolute difference and
    the verdict, bit-identical only when every difference is exactly 0."""
    if probe is None or "skipped" in probe or "determinism" not in probe:
        return {"not_run": (probe or {}).get("skipped", "no probe file given (--probe)")}
    det = probe["determinism"]
    diffs = dict(sorted(det.get("max_abs_diff", {}).items()))
    worst = max(diffs.items(), key=lambda kv: kv[1], default=(None, None))
    return {"not_run": None, "rows": list(diffs.items()), "identical": worst[1] == 0.0,
            "worst": worst, **{k: det.get(k) for k in ("arm", "seed", "lamb", "epochs",
                                                        "device", "torch")}}


def seeds_plot(m: Mapping) -> dict:
    """Subplot (a): each seed's value of one results.json metric and the seed mean."""
    values = m.get("values", {})
    return {"title": "(a) seed", "xticks": [f"s{s}" for s in values],
            "series": [{"x": list(range(len(values))), "y": list(values.values()),
                        "dots": [f"s{s}" for s in values]}], "mean": m.get("mean")}


def lambda_plot(arm: str, metric: str, probe: Mapping | None) -> dict:
    """Subplot (b): the probe's short trainings at each SIGReg weight, or why there are none."""
    if probe is None or "lambda_sweep" not in probe:
        return {"title": "(b) SIGReg weight λ", "note": "probe not run"}
    title = f"(b) SIGReg λ, {probe['probe']['epochs']} of {probe['main_epochs']} epochs"
    if arm == "ntp":
        return {"title": title, "note": "next-token prediction has no SIGReg term"}
    rows = [r for r in probe["lambda_sweep"] if r["arm"] == arm and r.get(metric) is not None]
    if not rows:
        return {"title": title, "note": f"{arm} not in probe.arms"}
    return {"title": title, "xticks": [f"{r['lamb']:g}" for r in rows],
            "series": [{"x": list(range(len(rows))), "y": [r[metric] for r in rows]}]}


def fit_plot(metric: str, arm_runs: Sequence[Mapping]) -> dict:
    """Subplot (c): test R@1 against the pairs the map is fitted on, one line per seed."""
    title = "(c) fit pairs"
    if metric != "r_at_1":
        return {"title": title, "note": f"{metric} compares raw embeddings, with no map: "
                                        "the fit pairs cannot move it"}
    series = [{"x": [p["n_fit"] for p in r["fit_size_curve"]],
               "y": [p["r_at_1"] for p in r["fit_size_curve"]], "label": f"s{r['seed']}"}
              for r in arm_runs if r.get("fit_size_curve")]
    return {"title": title, "log_x": True, "series": series} if series else \
        {"title": title, "note": "no fit-size curve in the run files"}


def clean_plot(metric: str, arm_runs: Sequence[Mapping], clean: Sequence[Mapping] | None) -> dict:
    """Subplot (d): all test pairs against the contamination-clean ones, one line per seed."""
    title = "(d) contamination-clean"
    labels = {r["label"]: r["seed"] for r in arm_runs}
    rows = [c for c in clean or [] if c.get("label") in labels
            and names.metric_of(str(c.get("outcome"))) == metric]
    if not rows:
        return {"title": title, "note": "no clean test subset scored"}
    return {"title": title, "xticks": ["all", f"clean ({rows[0]['n_clean']})"],
            "series": [{"x": [0, 1], "y": [c["full"], c["clean"]],
                        "label": f"s{labels[c['label']]}"} for c in rows]}


def pool_plot(metric: str, curve: Sequence[Mapping]) -> dict:
    """Subplot (e): the score against the photos in the pool, one line per seed, with chance."""
    title = "(e) pool size (photos)"
    pts = [r for r in curve if metric in r["metrics"]]
    if not pts:
        return {"title": title, "note": f"results.json's gallery curve has no {metric}"}
    seeds = list(pts[0]["metrics"][metric]["values"])
    return {"title": title, "log_x": True,
            "series": [{"x": [r["n_photos"] for r in pts],
                        "y": [r["metrics"][metric]["values"][s] for r in pts], "label": f"s{s}"}
                       for s in seeds],
            "chance": {"x": [r["n_photos"] for r in pts], "y": [r["chance"][metric] for r in pts]}}


def section_shakes(results: Results, runs: Sequence[Mapping], probe: Mapping | None,
                   clean: Sequence[Mapping] | None, registry: Mapping[str, Mapping]) -> dict:
    """One panel per headline number (R@1 and mutual k-NN of each arm): the number against
    (a) the seed, (b) the SIGReg weight (probe), (c) the fit pairs, (d) the contamination-clean
    subset, (e) the pool size, with the paper's value and chance as horizontal lines."""
    paper = paper_values(registry)
    panels = []
    k = names.results_k(results)
    for arm, block in results.get("arms", {}).items():
        arm_runs = [r for r in runs if r["arm"] == arm]
        for metric in names.headline(k):
            m = block.get("metrics", {}).get(metric)
            if m is None:
                continue
            chance = block.get("controls", {}).get(names.chance(metric), {}).get("mean")
            subplots = [seeds_plot(m), lambda_plot(arm, metric, probe),
                        fit_plot(metric, arm_runs), clean_plot(metric, arm_runs, clean),
                        pool_plot(metric, block.get("gallery_curve") or [])]
            ref = paper.get((arm, metric))
            svg = plots.shake_row(subplots, f"{arm}-{metric}", arm, names.label(metric, k), ref,
                                  chance)
            panels.append({"arm": arm, "metric": metric, "mean": m.get("mean"), "paper": ref,
                           "chance": chance, "svg": Markup(svg)})
    epochs = None if probe is None or "probe" not in probe else \
        (probe["probe"]["epochs"], probe["main_epochs"])
    return {"panels": panels, "probe_epochs": epochs}


def section_world(params: Any, profile: str | None) -> dict:
    """The generated world's settings as the pipeline resolves them (prh.world.WorldConfig from
    params.yaml's data.world, defaults filled in) and the image views' flip and colour jitter
    (prh.image.ImageConfig); `shown` only on the world profile, no rows without params."""
    if profile != "world" or params is None:
        return {"shown": profile == "world"}
    from prh.image import ImageConfig
    from prh.world import WorldConfig

    try:
        world = params.config(WorldConfig, "data", "world")
        image = params.config(ImageConfig, "image")
    except ContractError as e:
        return {"shown": True, "error": str(e)}
    given = params.sections["data"].get("world", {})
    rows = [{"key": f"data.world.{k}", "value": v, "set": k in given}
            for k, v in asdict(world).items()]
    rows += [{"key": f"image.{k}", "value": getattr(image, k),
              "set": k in params.sections["image"]} for k in ("flip", "jitter")]
    return {"shown": True, "rows": rows, "world": asdict(world),
            "image": {"flip": image.flip, "jitter": image.jitter}}


# Table 7's matched pairs (good against bad views on identical texts): the paper's WIT
# mutual 10-NN on Recap-DataComp, context only (the registry's values and printed forms)
TABLE7_PAIRS = (("alt-text and two recaptions (people and a captioner)", "t7_all_good",
                 "t7_all_bad", "t7_all_ratio"),
                ("two recaptions only (one captioner, one prompt)", "t7_recap_good",
                 "t7_recap_bad", "t7_recap_ratio"))


def above_chance(r_at_1: float, chance: float, level: float = 0.05) -> bool:
    """Whether R@1 over n = 1 / chance test pairs is above chance by an exact one-sided
    binomial test at `level` (an arm at chance is evidence of nothing)."""
    from scipy.stats import binom

    n = round(1 / chance)
    hits = round(r_at_1 * n)
    return bool(binom.sf(hits - 1, n, chance) < level)


def interval_reading(gap: Mapping) -> str:
    """Where a gap's interval lies against 0."""
    lo, hi = gap["ci"]
    return "above 0" if lo > 0 else "below 0" if hi < 0 else "holds 0"


def section_text_sources(probe: Mapping | None, params: Any, profile: str | None,
                         registry: Mapping[str, Mapping]) -> dict:
    """Table 7's design (harness.stages.probe, `probe.text_sources`): good and bad views on each
    source's texts, each source's good-view gap and the gaps' difference with their intervals
    over the test pairs. On the world, Prop. 3's prediction beside them: how often two views of a
    sample share the caption's voice (prh.world.voice_sharing), the nuisance a bad view spends
    directions on; the gap is predicted where good views share it less than bad views do."""
    ts = (probe or {}).get("text_sources")
    if not ts:
        why = ("no probe file given (--probe)" if probe is None else probe.get("skipped")
               or ("probe.text_sources is [] in params.yaml" if "text_sources" in probe
                   else "the probe file predates the text-source probe: `dvc repro probe`"))
        return {"not_run": why}
    world = None
    if profile == "world" and params is not None:
        from prh.world import WorldConfig

        try:
            world = params.config(WorldConfig, "data", "world")
        except ContractError:
            world = None
    from prh.world import TEXT_SOURCES, voice_sharing

    rows = {(r["source"], r["arm"]): r for r in ts["rows"]}
    gaps = {(g["metric"], g["source"]): g for g in ts["gaps"]}
    if not isinstance(ts.get("k"), int):
        return {"not_run": "the probe file's text_sources does not record its mutual k-NN's k "
                           "(written before it did): `dvc repro probe`"}
    k = ts["k"]
    mknn = names.mknn(k)
    out_rows = []
    for source in ts["sources"]:
        good, bad = rows[source, "good"], rows[source, "bad"]
        live = [arm for arm in ("good", "bad")
                if above_chance(rows[source, arm]["r_at_1"], rows[source, arm]["chance_r_at_1"])]
        share = (voice_sharing(source, True, world), voice_sharing(source, False, world)) \
            if world is not None and source in TEXT_SOURCES else (None, None)
        share = None if None in share else share  # no voice words: no prediction
        out_rows.append({
            "source": source, "good": good, "bad": bad, "gap_r1": gaps["r_at_1", source],
            "gap_mknn": gaps[mknn, source], "reading": interval_reading(gaps["r_at_1", source]),
            "reading_mknn": interval_reading(gaps[mknn, source]),
            "live": live, "sharing": share,
            "predicted": None if share is None else
            ("above 0" if share[0] < share[1] else "0 (views share the wording as bad views do)")})
    live = {r["source"]: bool(r["live"]) for r in out_rows}
    differences = []
    for g in ts["gaps"]:
        if " - " not in g["source"] or g["metric"] != "r_at_1":
            continue
        a, b = g["source"].split(" - ")
        sa, sb = (next(r["sharing"] for r in out_rows if r["source"] == s) for s in (a, b))
        predicted = None if sa is None or sb is None else (
            "above 0" if sa[0] < sb[0] else "below 0" if sa[0] > sb[0] else "0")
        differences.append({"a": a, "b": b, "r1": g, "mknn": gaps[mknn, g["source"]],
                            "reading": interval_reading(g) if live[a] and live[b] else None,
                            "reading_mknn": interval_reading(gaps[mknn, g["source"]]),
                            "predicted": predicted})
    paper = [{"label": label, **{k: registry[cid]["printed"] for k, cid in
                                 (("good", good), ("bad", bad), ("ratio", ratio))}}
             for label, good, bad, ratio in TABLE7_PAIRS
             if all(c in registry for c in (good, bad, ratio))]
    return {"not_run": None, "rows": out_rows, "differences": differences,
            "r1": names.label("r_at_1", k), "mknn_label": names.label(mknn, k),
            "seed": ts["seed"], "epochs": ts["epochs"], "lamb": ts["lamb"],
            "main_epochs": probe.get("main_epochs"), "world": world is not None, "paper": paper,
            "leak": world.captioner_leak if world is not None else 0.0}


def sections(results: Results | None, runs: Sequence[Mapping], probe: Mapping | None,
             params: Any, *, profile: str | None, registry: Mapping[str, Mapping],
             clean: Sequence[Mapping] | None, missing: Mapping[str, Mapping | None]) -> dict:
    """Every section of this module, each with the absence (harness.report.context.absent) of the
    input it cannot do without: `missing["results"]`, `["probe"]`, `["params"]`."""
    out = {}
    for name, build in (("calibrated", section_calibrated), ("captions", section_captions),
                        ("pair_free", lambda r: section_pair_free(r, runs, registry)),
                        ("shakes", lambda r: section_shakes(r, runs, probe, clean, registry))):
        out[name] = {"absent": missing["results"], **(build(results) if results else {})}
    out["determinism"] = {"absent": missing["probe"], **section_determinism(probe)}
    out["text_sources"] = {"absent": missing["probe"],
                           **section_text_sources(probe, params, profile, registry)}
    world = section_world(params, profile)
    out["world"] = {"absent": missing["params"] if world["shown"] else None, **world}
    return out
