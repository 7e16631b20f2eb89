"""The claims audit: one verdict per registry claim, and one status per relation across claims,
each with its evidence and what it is evidence for.

Claim verdicts (`VERDICTS`); the rules live in one table, `RULES`, and claims name theirs in
harness/audit/claims.yaml (`rule:`, defaulting by kind):

| rule       | claim kinds       | verdict                                                         |
|------------|-------------------|-----------------------------------------------------------------|
| measured   | flickr_measurable | equivalence within `audit.margin` (TOST: the 90% interval of    |
|            |                   | rerun - claim inside +-margin): reproduced; the minimal-effect  |
|            |                   | test beyond the margin, after Holm over the audit: differs;     |
|            |                   | under 3 seeds or t x se >= margin: inconclusive (underpowered)  |
| ordering   | ordering          | a printed gap by the `measured` rule; an order alone by the     |
|            |                   | one-sided 95% bounds of a - b over seeds and test pairs; "cannot|
|            |                   | be separated" by equivalence of a - b to 0 within the claim's   |
|            |                   | own gap margin, over seeds and test pairs. On a profile whose   |
|            |                   | data is not the claim's: pattern seen / not seen on another     |
|            |                   | profile                                                         |
| arithmetic | derived_arithmetic| rounding-aware recomputation (statcheck): holds / holds within  |
|            |                   | input rounding / fails                                          |
| theory     | theory            | an identity of the theory (Theorem 1, error = 2r, the tie case, |
|            |                   | the threshold rule) on runs/theory.json: reproduced means it    |
|            |                   | holds on the finite worlds this run draws, differs that it fails|
| theory_count | theory          | a count or ratio that depends on which worlds are drawn (545 /  |
|            |                   | 255 points, the 18% ratio): informational, the rerun's own      |
|            |                   | number beside the article's                                     |
| not_rerun  | web_scale         | not rerun, with the reason (data, scale, compute)               |
| evaluated  | web_scale (public | a public model's number against the reference stage's score of  |
|            | models)           | it on the same items: within the metric's margin: reproduced;   |
|            |                   | beyond: differs; inside its permutation null: inconclusive;     |
|            |                   | not scored: not rerun, with the command                         |
| sts_arm    | web_scale (STS-B  | a trained arm's STS-B Spearman over its seeds (t interval from  |
|            | of trained arms)  | 3 seeds) by the `measured` equivalence rule; other profile: not |
|            |                   | comparable                                                      |
| ranking    | web_scale         | the text encoders' order under every vision reference scored:   |
|            |                   | pattern seen / not seen (a swap with item intervals clear of 0) |
| pairfree_  | web_scale (public | a public model's pair-free R@1 on Table 4's Flickr30k pools     |
| bound      | models)           | against "at or below": the upper end of its interval within the |
|            |                   | bound + margin: reproduced; the lower end above it: differs     |
| web_text   | web_scale (33M on | the recap profile's runs trained as the claim says (arm, texts, |
|            | Recap texts)      | images, samples), else not comparable: the `measured` and       |
|            |                   | `ordering` statistics over their seeds and WIT items            |
|            |                   | (harness/audit/web_text.py)                                     |
| metadata   | metadata          | not rerun: a description of the setup, nothing to measure       |

The statistics (harness.audit.decide, harness.stats.equivalence): the rerun's seeds x test pairs
estimate from results.json (harness.stats.estimators.two_level_mean / two_level_gap). A printed
number is compared on the test pairs it was measured on (the rerun's per-seed variance there
plus the claim's own seed noise); a claim about arms (an order, "cannot be separated") over
seeds and test pairs. No sampled verdict from fewer than 3 seeds per arm. Every "differs" is
adjusted by Holm across the audit's sampled claims (harness.audit.judge). tests/
test_verdict_simulation.py holds the operating characteristics. An arm whose interval (seeds
and test pairs) reaches the chance level is flagged as at chance wherever its numbers appear;
an ordering involving it is not evidence that the views matter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from harness.audit import setting
from harness.audit.claims import RULE_NAMES, Claim, printed_interval
from harness.audit.decide import (
    at_chance,
    decide,
    decide_inseparable,
    estimate_of,
    pct,
    seeds_estimate,
    too_few,
)
from harness.audit.printed import EPS, OPS, SYMBOLS, check_derived
from harness.audit.verdict import (
    Context,
    Verdict,
    claim_sd,
    claim_seeds,
    judge_order,
    with_chance,
)
from harness.audit.web_text import rule_web_text
from harness.records import names, reference
from harness.records.schemas import Results
from harness.records.verdicts import WHY_NOT_RERUN, not_rerun
from harness.stats.equivalence import ALPHA, margin_test, order_test
from harness.stats.estimators import TwoLevel

RUNNABLE_SCALE = "flickr"  # the only claim scale a profile of this pipeline can rerun


def _margin(claim: Claim, metric: str, ctx: Context) -> float | None:
    """The plan's margin for the claim under a sequential look, else the claim's own, else
    params.yaml's for the metric."""
    return ctx.level(claim).margin or claim.margin or ctx.margins.get(metric)


def _setup_mismatch(claim: Claim, ctx: Context) -> str:
    """'' when the run's setup matches the claim's; else which field differs."""
    assert ctx.results is not None
    dataset = claim.setup.get("dataset")
    if dataset and dataset != ctx.profile:
        return (f"setup.dataset: claim {dataset}, run profile {ctx.profile}: the number is about "
                f"{dataset}, the run is not")
    n = claim.setup.get("n_test")
    if n and int(n) != int(ctx.results.get("n_test", -1)):
        return f"setup.n_test: claim {n}, run {ctx.results.get('n_test')}"
    return ""


def _other_k(metric: str, results: Results) -> str:
    """'' unless `metric` is the paper's mutual k-NN and the rerun scored another k (the one
    results.json records); then what it is."""
    run_k = names.results_k(results)
    if metric != names.mknn(names.PAPER_K) or run_k == names.PAPER_K:
        return ""
    return (f" (the rerun scores {names.mknn(run_k)}: eval.k is {run_k}, the claim's k is "
            f"{names.PAPER_K})")


def _missing(what: str, fix: str) -> Verdict:
    return Verdict("not rerun", not_rerun("compute", f"{what} absent; {fix}"), {})


def _chance_flag(arms: Iterable[str], metric: str, ctx: Context) -> dict[str, Any]:
    flagged = at_chance(ctx.results)
    return {a: flagged[a][metric] for a in arms if metric in flagged.get(a, {})}


def _at_chance_verdict(what: str, flags: Mapping[str, Any], evidence: Mapping[str, Any]
                       ) -> Verdict:
    """An arm at chance is evidence of nothing: no verdict rests on it (DESIGN: audit/)."""
    return Verdict("inconclusive", with_chance(f"{what}: no verdict from an arm at chance",
                                                flags), {**evidence, "at_chance": flags})



def rule_measured(claim: Claim, ctx: Context) -> Verdict:
    """A claimed value against the rerun's arm metric (equivalence within the margin), or,
    with `setup.measure`, against the results.json entry it names under the arm (a dotted
    path: `curve.epoch1.r_at_1`, `metrics.r_at_1_trainval`); an entry kept once per seed
    (a curve point) is judged on `seeds_estimate`. A variant of the recipe with no `measure`
    is not rerun."""
    measure = claim.setup.get("measure")
    if claim.setup.get("variant") and not measure:
        return Verdict("not rerun", not_rerun("compute", f"a variant of the recipe "
                       f"({claim.setup['variant']}); the pipeline runs the default recipe"), {})
    if ctx.results is None:
        return _missing("runs/results.json", "run `dvc repro aggregate`")
    arm = claim.setup.get("arm", "")
    flags = _chance_flag([arm], claim.metric, ctx)
    mismatch = _setup_mismatch(claim, ctx)
    if mismatch:
        return Verdict("not comparable", with_chance(mismatch, flags),
                       {"profile": ctx.profile, "at_chance": flags})
    where = measure or f"metrics.{claim.metric}"
    m = lookup(ctx.results.get("arms", {}).get(arm, {}), where)
    margin = _margin(claim, claim.metric, ctx)
    per_seed = bool(measure) and isinstance(m, Mapping) and "ci" not in m and "values" in m
    if not isinstance(m, Mapping) or ("ci" not in m and not per_seed):
        return Verdict("not rerun", not_rerun("data", f"results.json has no {where} with an "
                       f"interval {'or seed values ' if measure else ''}for arm {arm!r}"
                       + _other_k(claim.metric, ctx.results)), {})
    est = (seeds_estimate(m, int(ctx.results.get("n_test", 0)), claim.metric.startswith("r_at_"))
           if per_seed else estimate_of(m))
    shown = {"measure": where, "values": m.get("values"), "run": m.get("mean")}
    if est is None:
        return Verdict("inconclusive (underpowered)", f"{where}: {len(m['values'])} seed(s) "
                       f"{m['values']} and no per-pair values: no interval", shown)
    if flags:
        return _at_chance_verdict(f"{arm} on {claim.metric}", flags, {"claim": claim.scalar()})
    if margin is None:  # an epoch or a per-token loss: no difference is argued to matter
        return Verdict("informational", f"no audit.margin for metric {claim.metric}: {where} = "
                       f"{est.estimate:.4g} on the rerun beside the claim's {claim.printed}, "
                       "not judged", shown if measure else {})
    level = ctx.level(claim)
    verdict, reason, evidence = decide(est, claim.scalar(), margin, claim_seeds(claim),
                                       level.alpha, claim_sd(claim), level.alpha_differs)
    return Verdict(verdict, reason, {**evidence, "at_chance": {},
                                     **({"measure": where} if measure else {})})


def _find_gap(results: Results, a: str, b: str, metric: str) -> dict[str, Any] | None:
    """The results.json gap a - b on `metric` (a stored b - a is negated)."""
    for g in results.get("gaps", []):
        if g.get("metric") != metric:
            continue
        if (g.get("a"), g.get("b")) == (a, b):
            return dict(g)
        if (g.get("a"), g.get("b")) == (b, a):
            lo, hi = g["ci"]
            out = {**g, "a": a, "b": b, "diff": -g["diff"], "ci": [-hi, -lo]}
            if g.get("two_level"):
                tl = g["two_level"]
                out["two_level"] = {**tl, "estimate": -tl["estimate"],
                                    "ci": [-tl["ci"][1], -tl["ci"][0]]}
            return out
    return None


def _scope(claim: Claim, est: TwoLevel, margin: float, ctx: Context) -> Verdict:
    """An ordering on a profile whose data is not the claim's: whether the pattern shows,
    never a reproduction. On the population interval (a pattern is about the arms, not these
    pairs), by the claim's own test: the order's one-sided 95% lower bound above its smallest
    material gap, or, for "cannot be separated", the 90% interval inside the gap margin; from
    3 seeds per arm, as every sampled verdict (below, with no training variance, a true gap of
    0 reads "seen" about a quarter of the time: "inconclusive (underpowered)")."""
    assert claim.check is not None
    what = (f"{claim.check.a} - {claim.check.b} on {claim.check.key} = {est.estimate:+.4f}")
    evidence = {"run": est.estimate, "method": est.method_population, "profile": ctx.profile,
                "claim_dataset": claim.setup.get("dataset"), "margin": margin,
                "at_chance": {}, "note": est.note()}
    if not est.training_variance:
        return Verdict("inconclusive (underpowered)", f"{what} on the {ctx.profile} profile: "
                       f"{too_few(est)}", evidence)
    alpha = ctx.level(claim).alpha
    if claim.check.type == "inseparable":
        test = margin_test(est.estimate, est.se_population, est.df_population, margin, alpha)
        seen, lo, hi, level = test.equivalent, test.lo, test.hi, test.level
        shown = f"{pct(level)} [{lo:+.4f}, {hi:+.4f}] against the gap margin +-{margin:g}"
    else:
        order = order_test(est.estimate, est.se_population, est.df_population,
                           claim.check.min_gap, alpha)
        seen, lo, hi = order.lower > claim.check.min_gap, order.lower, order.upper
        level = 1 - 2 * order.alpha
        evidence["min_gap"] = claim.check.min_gap
        shown = f"one-sided {pct(1 - alpha)} bounds {lo:+.4f} and {hi:+.4f}"
    what = (f"{what}, {shown} on the {ctx.profile} profile; the claim is about "
            f"{claim.setup.get('dataset')}: this shows whether the pipeline sees the pattern, "
            "not whether the claim's number holds")
    verdict = "pattern seen on another profile" if seen else "pattern not seen on another profile"
    return Verdict(verdict, what, {**evidence, "ci": [lo, hi], "ci_level": level})


def rule_ordering(claim: Claim, ctx: Context) -> Verdict:
    """Arm a against arm b: the sign of the paired gap, the printed gap by equivalence, or
    "cannot be separated"; on another profile's data, whether the pattern shows."""
    assert claim.check is not None, f"{claim.id}: ordering claims need check: {{a, b, key}}"
    if claim.setup.get("scale") != RUNNABLE_SCALE:
        return rule_not_rerun(claim, ctx)
    if ctx.results is None:
        return _missing("runs/results.json", "run `dvc repro aggregate`")
    a, b, metric = claim.check.a, claim.check.b, claim.check.key
    gap = _find_gap(ctx.results, a, b, metric)
    if gap is None:
        return Verdict("not rerun", not_rerun(
            "data", f"results.json has no paired gap {a} - {b} on {metric}"
            + _other_k(metric, ctx.results)), {})
    inseparable = claim.check.type == "inseparable"
    margin = (ctx.level(claim).margin or claim.margin) if inseparable \
        else _margin(claim, metric, ctx)
    if margin is None:
        return Verdict("inconclusive", f"no audit.margin for metric {metric}", {})
    est, flags = estimate_of(gap), _chance_flag([a, b], metric, ctx)
    if flags:
        return _at_chance_verdict(f"{a} - {b} on {metric} = {est.estimate:+.4f}", flags,
                                  {"run": est.estimate, "profile": ctx.profile})
    if claim.setup.get("dataset") != ctx.profile:
        return _scope(claim, est, margin, ctx)
    level = ctx.level(claim)
    if inseparable:  # the order of two arms is about the arms: seeds and test pairs
        verdict, reason, evidence = decide_inseparable(est, f"{a} - {b} on {metric}", margin,
                                                       level.alpha, level.alpha_differs)
    else:
        verdict, reason, evidence = judge_order(claim, est, margin, ctx.claims, level.alpha,
                                                level.alpha_differs)
    return Verdict(verdict, reason, {**evidence, "at_chance": flags})


def rule_arithmetic(claim: Claim, ctx: Context) -> Verdict:
    """Rounding-aware recomputation from the registry's own numbers."""
    rel = check_derived(claim, ctx.claims)
    reason = (f"{claim.formula} = {rel['recomputed']:.6g} (range {rel['recomputed_range'][0]:.6g}"
              f" to {rel['recomputed_range'][1]:.6g}); printed {claim.printed}: {rel['status']}")
    return Verdict(f"arithmetic {rel['status']}", reason, rel)


def lookup(doc: Mapping[str, Any], key: str) -> Any:
    """A dotted key into nested JSON; through a list, the values of every element."""
    cur: Any = doc
    for part in key.split("."):
        if isinstance(cur, list):
            cur = [x.get(part) if isinstance(x, Mapping) else None for x in cur]
        elif isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


def rule_theory(claim: Claim, ctx: Context) -> Verdict:
    """A runs/theory.json value (times `factor`) against the claim (any profile: no data
    involved). With no explicit bound, `eq` means "rounds to the printed value"."""
    check = claim.check
    assert check is not None, f"{claim.id}: theory claims need check: {{key, op}}"
    if ctx.theory is None:
        return _missing("runs/theory.json", "run `harness theory`")
    for key, want in check.requires.items():
        got = lookup(ctx.theory, key)
        if got != want:
            return Verdict("not comparable", f"{key}: claim {want:g}, run {got}", {})
    got = lookup(ctx.theory, check.key)
    if got is None or got == []:
        return Verdict("not rerun", not_rerun("data", f"runs/theory.json has no {check.key}"), {})
    values = [float(v) * check.factor for v in (got if isinstance(got, list) else [got])]
    if check.bound is None and check.op == "eq":
        lo, hi = printed_interval(str(claim.printed))
        ok = all(lo - EPS <= v < hi + EPS for v in values)
        wanted = f"rounds to {claim.printed}"
    else:
        bound = claim.scalar() if check.bound is None else check.bound
        ok = all(OPS[check.op](v, bound) for v in values)
        wanted = f"{SYMBOLS[check.op]} {bound:g}"
    shown = got if isinstance(got, bool) else values if len(values) > 1 else values[0]
    evidence = {"key": check.key, "run": shown, "factor": check.factor, "wanted": wanted,
                "claim": claim.scalar()}  # a yes/no stays one, for the report to say so
    words = ("yes (1)" if got else "no (0)") if isinstance(got, bool) else \
        ", ".join(f"{v:.4g}" for v in values)
    return Verdict("reproduced" if ok else "differs",
                   f"{check.key} x {check.factor:g} = {words} ({wanted} required)", evidence)


def rule_theory_count(claim: Claim, ctx: Context) -> Verdict:
    """A runs/theory.json number that depends on the worlds drawn: shown beside the article's,
    never judged (another draw of worlds gives another count; only the identities are
    theorems)."""
    assert claim.check is not None, f"{claim.id}: theory_count claims need check: {{key}}"
    if ctx.theory is None:
        return _missing("runs/theory.json", "run `harness theory`")
    got = lookup(ctx.theory, claim.check.key)
    if got is None or isinstance(got, list):
        return Verdict("not rerun", not_rerun("data", f"runs/theory.json has no "
                                              f"{claim.check.key}"), {})
    run = float(got) * claim.check.factor
    setting = {k: lookup(ctx.theory, k) for k in claim.check.requires}
    same = all(setting[k] == v for k, v in claim.check.requires.items())
    drawn = ", ".join(f"{k} = {v}" for k, v in setting.items())
    return Verdict("informational", f"{claim.check.key} x {claim.check.factor:g} = {run:.6g} on "
                   f"the worlds this run draws ({drawn}); the article's {claim.printed} comes "
                   f"from its own draw{'' if same else ' of another setting'}: a count that "
                   "depends on the draw, not a property of the theorem",
                   {"key": claim.check.key, "run": run, "claim": claim.scalar(),
                    "factor": claim.check.factor, "setting": setting, "same_setting": same})


def rule_not_rerun(claim: Claim, ctx: Context) -> Verdict:
    why = claim.why_not_rerun or "scale"
    setup = ", ".join(f"{k}={v}" for k, v in claim.setup.items())
    return Verdict("not rerun", not_rerun(why, WHY_NOT_RERUN[why])
                   + (f" ({setup})" if setup else ""), {})


def rule_evaluated(claim: Claim, ctx: Context) -> Verdict:
    """A public model's number against the reference stage's score of it
    (runs/reference/wit1024.json). First the setting (harness.audit.setting): a run whose
    benchmark, model, vision reference or protocol is not the claim's, or whose features
    collapse, is not comparable, each difference named (a mutual k-NN scored at another k
    than the claim's among them). Then a deterministic evaluation: the
    paper's number and the rerun's differ only by the protocol's free choices (precision,
    TF32, batch composition), not by sampling. reproduced: |rerun - claim| <= the metric's
    margin (the metric table, harness.records.names); differs: beyond it. A best-layer score
    inside its permutation null (p > alpha), or a Flickr30k R@1 whose interval reaches 1/n, is
    at chance: no verdict. The interval over the WIT items is shown, not used. Not scored: not
    rerun, with the command."""
    model, ref = claim.setup.get("model"), claim.setup.get("reference")
    entry = (reference.lookup(ctx.reference, model, ref, claim.metric)
             or reference.lookup_run_k(ctx.reference, model, ref, claim.metric))
    layerwise = claim.metric in reference.WIT_METRICS or claim.metric in reference.COCO_METRICS
    if entry is None:
        what = f"{model} against {ref}" if ref and layerwise else str(model)
        coco = " with wit1024.coco set" if claim.metric in reference.COCO_METRICS else ""
        return Verdict("not rerun", not_rerun(claim.why_not_rerun or "compute", (
            f"{what} not scored; list it in params.yaml's wit1024 section{coco} and run `dvc "
            "repro pipelines/wit1024/dvc.yaml` (README, \"Public encoders on WIT-1024\")")), {})
    assumed = setting.assumed(claim.setup)
    assumed = f" (assumed: {assumed})" if assumed else ""
    differs_from_claim = setting.differences(claim.setup, claim.metric, ctx.reference or {},
                                             entry)
    if differs_from_claim:
        return Verdict("not comparable", "not the claim's setting: "
                       + "; ".join(differs_from_claim) + assumed,
                       {"run": reference.value(entry), "differences": differs_from_claim})
    wit = layerwise
    run = reference.value(entry)
    margin = _margin(claim, claim.metric, ctx)
    evidence: dict[str, Any] = {"claim": claim.scalar(), "run": run, "margin": margin,
                                "model": model, "reference": ref if wit else None}
    if wit:
        cal = entry.get("calibrated") or {}
        evidence.update({"layer_pair": entry["pair"], "calibrated": cal,
                         "item_interval": {k: entry[k] for k in reference.INTERVAL_FIELDS
                                           if k in entry} or None})
        if cal and cal["p_value"] > cal["alpha"]:
            return Verdict("inconclusive", f"at chance: {model}'s best-layer score {run:.4f} is "
                           f"inside its permutation null (p = {cal['p_value']:.3f} > "
                           f"{cal['alpha']}), evidence of nothing", evidence)
    if "chance" in entry:  # Flickr30k R@1: its interval over the test pairs against 1/n
        evidence.update({"ci": entry["ci"], "n_pairs": entry["n_pairs"],
                         "chance": entry["chance"]})
        if entry["ci"][0] <= entry["chance"]:
            return Verdict("inconclusive", f"at chance: {model}'s R@1 {run:.4f} has an interval "
                           f"reaching 1/n = {entry['chance']:.4f}, evidence of nothing",
                           evidence)
    if margin is None:
        return Verdict("informational", f"no audit.margin for {claim.metric}: rerun {run:.4f} "
                       f"beside the claim's {claim.printed}", evidence)
    gap = run - claim.scalar()
    alt = entry.get("other_protocol")
    shown = (f"rerun {run:.4f}, claim {claim.scalar():.4f}, difference {gap:+.4f}, margin "
             f"{margin:g}" + (f", layers {entry['pair']}" if wit else "") + "; a point "
             "difference, not a test: a public model's score on fixed items has no sampling "
             "variance, and moves only with what the protocol leaves free (precision, TF32, "
             "batch composition)" + (
                 f"; the {alt['name']} protocol gives {alt['best']:.4f} on this run "
                 f"({alt['best'] - run:+.4f})" if alt else "") + assumed)
    if abs(gap) <= margin:
        return Verdict("reproduced", f"within the margin ({shown})", evidence)
    return Verdict("differs", f"beyond the margin ({shown})", evidence)


STS_ARM_PROFILE = {"flickr": "flickr30k"}  # a claim's scale -> the profile that trains it


def rule_sts_arm(claim: Claim, ctx: Context) -> Verdict:
    """STS-B of a trained arm (runs/reference/wit1024.json `sts_arms`, one Spearman per seed)
    against the claim: the mean over seeds with its t interval (harness.audit.decide.
    seeds_estimate: training variance from 3 seeds; Spearman has no per-pair outcomes, so
    below 3 seeds no interval), by `decide` within the metric's margin. Arms trained on another
    profile's captions than the claim's are not comparable."""
    arm = claim.setup.get("arm", "")
    block = ((ctx.reference or {}).get("sts_arms") or {}).get(arm)
    want = STS_ARM_PROFILE.get(str(claim.setup.get("scale")))
    if block is None:
        return Verdict("not rerun", not_rerun("data", (
            f"no STS-B score of a trained {arm} arm; set params.yaml's wit1024.arms to runs/text "
            f"and wit1024.stsb after the {want or 'matching'} profile's run, then `dvc repro "
            "pipelines/wit1024/dvc.yaml`")), {})
    shown = {"values": block["values"], "profile": block["profile"], "n": block["n"]}
    if block["profile"] != want:
        return Verdict("not comparable", (
            f"the {arm} runs were trained on the {block['profile']} profile's captions; the "
            f"claim is about encoders trained at scale {claim.setup.get('scale')} "
            f"({want or 'no profile of this tool'})"), shown)
    est = seeds_estimate(block, int(block["n"]), proportion=False)
    if est is None:
        return Verdict("inconclusive (underpowered)", (
            f"{len(block['values'])} seed(s) {block['values']} and no per-pair values: no "
            "interval"), shown)
    margin = _margin(claim, claim.metric, ctx)
    level = ctx.level(claim)
    verdict, reason, evidence = decide(est, claim.scalar(), margin, claim_seeds(claim),
                                       level.alpha, claim_sd(claim), level.alpha_differs)
    return Verdict(verdict, reason, {**evidence, **shown})


RANKING_RESAMPLES = 2000  # paired item bootstraps per pair of text encoders and reference


def rule_ranking(claim: Claim, ctx: Context) -> Verdict:
    """"The text-side ranking holds whichever vision encoder is the reference", judged on the
    encoders the reference stage scored (never the paper's own models: a pattern seen or not
    seen). Per reference and pair of text encoders, the paired gap of their best-layer scores
    with a 95% bootstrap interval over the WIT items (each at its own best pair). not seen:
    some pair separated in opposite directions under two references; seen: no reversal and
    every pair separated under some reference; else inconclusive. An encoder whose features
    collapse (an entry's `degenerate`) is left out: its neighbours are rounding noise."""
    from harness.stats.estimators import paired_bootstrap_diff

    refs = reference.by_reference(ctx.reference, claim.metric)
    collapsed = sorted({m for by in refs.values() for e in by.values()
                        for m in (e.get("degenerate") or {})})
    refs = {v: {t: e for t, e in by.items() if t not in collapsed}
            for v, by in refs.items() if v not in collapsed}
    texts = sorted(set.intersection(*(set(t) for t in refs.values()))) if refs else []
    if len(refs) < 2 or len(texts) < 2:
        return Verdict("not rerun", not_rerun("compute", (
            f"needs at least 2 text and 2 vision encoders scored on {claim.metric}; the scores "
            f"hold {len(texts)} text and {len(refs)} vision" + (
                f" whose features do not collapse (collapsed: {', '.join(collapsed)})"
                if collapsed else "") + " (list more in params.yaml's wit1024 section and run "
            "`dvc repro pipelines/wit1024/dvc.yaml`)")), {})
    signs: dict[tuple[str, str], dict[str, int]] = {}
    gaps = []
    for vision, by_text in sorted(refs.items()):
        for i, a in enumerate(texts):
            for b in texts[i + 1:]:
                gap, ci = paired_bootstrap_diff(by_text[a]["per_item"], by_text[b]["per_item"],
                                                n_resamples=RANKING_RESAMPLES, seed=0)
                sign = 1 if ci.lo > 0 else -1 if ci.hi < 0 else 0
                signs.setdefault((a, b), {})[vision] = sign
                gaps.append({"vision": vision, "a": a, "b": b, "gap": gap,
                             "ci": [ci.lo, ci.hi], "method": ci.method})
    orders = {v: sorted(texts, key=lambda t: -by_text[t]["best"]) for v, by_text in refs.items()}
    evidence = {"orders": orders, "gaps": gaps, "references": sorted(refs), "texts": texts,
                "paper_references": claim.scalar()}
    names = f"{len(texts)} text encoders ({', '.join(texts)}) under {len(refs)} references " \
            f"({', '.join(sorted(refs))})" + (f", leaving out {', '.join(collapsed)} (features "
                                              "collapse)" if collapsed else "")
    flipped = [pair for pair, by in signs.items() if {1, -1} <= set(by.values())]
    if flipped:
        a, b = flipped[0]
        return Verdict("pattern not seen on another profile", (
            f"{a} and {b} swap places between references (95% item intervals of the gap on "
            f"opposite sides of 0); {names}; not the paper's models"), evidence)
    open_pairs = [pair for pair, by in signs.items() if not any(by.values())]
    if open_pairs:
        a, b = open_pairs[0]
        return Verdict("inconclusive", (
            f"{a} and {b} cannot be separated under any reference (every 95% item interval of "
            f"the gap contains 0); {names}"), evidence)
    return Verdict("pattern seen on another profile", (
        f"no pair of text encoders swaps places between references; {names}; not the paper's "
        "models"), evidence)


def clopper_pearson(hits: int, n: int, level: float) -> tuple[float, float]:
    """Two-sided exact binomial interval for hits / n at `level` (Clopper & Pearson 1934)."""
    from scipy.stats import beta

    a = (1 - level) / 2
    lo = 0.0 if hits == 0 else float(beta.ppf(a, hits, n - hits + 1))
    hi = 1.0 if hits == n else float(beta.ppf(1 - a, hits + 1, n - hits))
    return lo, hi


def rule_pairfree_bound(claim: Claim, ctx: Context) -> Verdict:
    """A public text encoder's pair-free R@1 on Table 4's Flickr30k pools (runs/reference/
    wit1024.json `pair_free`, one map per aligner seed) against the claim that it stays at or
    below the printed bound. The estimate is the mean over seeds; its interval is Clopper-
    Pearson's on that mean's hits over the n test photos at 90% (5% a side): it resamples the
    test photos, not the aligner's seeds, whose spread is shown beside it. The bound is the top
    of the printed number's rounding interval (0.3% -> .0035). reproduced: the interval's upper
    end at most bound + margin (one-sided at 5%); differs: its lower end above bound + margin,
    so the margin separates the two the same way; inconclusive otherwise, and whenever a seed's
    pool was collapsed (an R@1 of 0 from an encoder that gave one point is no evidence of
    where a working one lands). Not scored: not rerun, with the command. A run outside Table
    4's setting (`setting.pairfree_differences`: pools, aligner, rows, image encoder, model) is
    not comparable, each difference named."""
    model = claim.setup.get("model")
    entry = reference.lookup(ctx.reference, model, None, claim.metric)
    if entry is None:
        return Verdict("not rerun", not_rerun(claim.why_not_rerun or "compute", (
            f"{model} not scored on the pair-free pools; list it in params.yaml's wit1024 "
            "section, set wit1024.flickr with pairfree_seeds and run `dvc repro "
            "pipelines/wit1024/dvc.yaml`")), {})
    differs_from_claim = setting.pairfree_differences(claim.setup, ctx.reference or {}, entry)
    if differs_from_claim:
        return Verdict("not comparable", "not the claim's setting: "
                       + "; ".join(differs_from_claim)
                       + f" (assumed: {setting.pairfree_assumed()})",
                       {"differences": differs_from_claim, "model": model})
    collapsed = {s: r.get("collapsed", "") for s, r in entry["seeds"].items()
                 if r["status"] != "ok"}
    if collapsed:
        return Verdict("inconclusive", f"{model}: pool collapsed on aligner seed(s) "
                       + ", ".join(f"{s} ({why})" for s, why in collapsed.items())
                       + "; no map was fitted", {"collapsed": collapsed, "model": model})
    seeds = {s: float(r["r_at_1"]) for s, r in entry["seeds"].items()}
    n = int(entry["n_test"])
    mean = sum(seeds.values()) / len(seeds)
    lo, hi = clopper_pearson(round(mean * n), n, 1 - 2 * ALPHA)
    bound = printed_interval(claim.printed)[1] * claim.scale
    margin = _margin(claim, claim.metric, ctx)
    assert margin is not None, f"no margin for {claim.metric}"
    evidence = {"claim": claim.scalar() * claim.scale, "bound": bound, "run": mean, "ci": [lo, hi],
                "ci_level": 1 - 2 * ALPHA, "margin": margin, "seeds": seeds, "n_test": n,
                "n_pool": entry["n_pool"], "model": model,
                "resamples": "the test photos (the aligner seeds' spread shown, not used)"}
    shown = (f"mean R@1 {mean:.4f} over {len(seeds)} aligner seed(s), 90% interval "
             f"[{lo:.4f}, {hi:.4f}] over {n} test photos, bound {bound:.4f}, margin {margin:g}")
    if hi <= bound + margin:
        return Verdict("reproduced", f"at or below the bound within the margin ({shown})",
                       evidence)
    if lo > bound + margin:
        return Verdict("differs", f"above the bound beyond the margin ({shown})", evidence)
    return Verdict("inconclusive", f"neither clearly within nor above ({shown})", evidence)


def rule_metadata(claim: Claim, ctx: Context) -> Verdict:
    return Verdict("not rerun", not_rerun("metadata", "describes a setup or a count; nothing to "
                                          "measure"), {})


RULES: dict[str, Callable[[Claim, Context], Verdict]] = {
    "measured": rule_measured, "ordering": rule_ordering, "arithmetic": rule_arithmetic,
    "theory": rule_theory, "theory_count": rule_theory_count, "not_rerun": rule_not_rerun,
    "metadata": rule_metadata, "evaluated": rule_evaluated, "ranking": rule_ranking,
    "sts_arm": rule_sts_arm, "pairfree_bound": rule_pairfree_bound, "web_text": rule_web_text,
}
assert set(RULES) == set(RULE_NAMES), "claims.RULE_NAMES and rules.RULES disagree"
