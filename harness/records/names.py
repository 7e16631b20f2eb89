"""The metric table: every score and quantity a claim, a file or the report names, one row each,
with its label, the audit's default margin, its short name in DVC's flat views, its direction
and where its chance level lives. Every list of metrics downstream reads this table; prh keeps
the names it writes (prh.config.mknn_name, the `_hit` suffix).

An outcome is a per-test-pair vector in the per-query file (`r_at_1_hit`: 1 when the pair's
caption is retrieved first; `mknn10`: the pair's mutual k-NN overlap); its metric is the mean
(`r_at_1`, `mknn10`). The mutual k-NN name carries k (prh.config.mknn_name), so `eval.k: 5`
gives `mknn5` everywhere: a row's `{mknn}` is filled at the run's k. The paper and platonic-rep
use k = 10 (`PAPER_K`): the registry's claims are about `mknn10`, and a rerun at another k does
not measure them.

Add a metric: compute it in prh (prh.metrics, returned by prh.align's scores or per-pair
outcomes), add its row here, and a claim on it in harness/audit/claims.yaml; results.json,
the audit's vocabulary and margins, the flat views and the report's labels follow."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prh.config import metric_of, mknn_name
from prh.io import ContractError

PAPER_K = 10  # the paper's mutual k-NN (Huh et al. 2024's k = 10)


@dataclass(frozen=True)
class Metric:
    """One row. `name` as results.json, the run file and claims.yaml write it (`{mknn}`: the
    mutual k-NN's name at the run's k); `views`: where it is shown by name (`headline` leads
    every section, `arm` is in DVC's per-arm flat view, `run` in the per-run one and the
    report's run table); `group`: score (an align outcome), control, chance, fit, gallery,
    pair_free, evaluated (a public model scored by the reference stage) or quantity (a number
    a claim states that no stage scores)."""

    name: str
    label: str
    group: str
    means: str = ""  # what it scores, in a sentence (the report's caption table)
    margin: float | None = None  # the audit's default equivalence margin (see MARGINS below)
    short: str | None = None  # its name in DVC's flat views
    views: frozenset[str] = frozenset()
    higher_is_better: bool | None = True  # None: a control or a count, no direction
    chance: str | None = None  # the row holding its chance level
    chance_formula: str | None = None  # how prh computes a chance row (prh.align, prh.pairfree)
    controls: tuple[str, ...] = ()  # the rows a score must stand clear of
    layerwise: tuple[str, int | None] | None = None  # (prh.layers metric, k) of an evaluated row
    block: str | None = None  # the reference document's block an evaluated row is read from
    benchmark: str | None = None  # the WEB_TEXT_BENCHMARKS entry a recap run scores it on

    def at(self, k: int) -> str:
        """The name at the run's mutual k-NN k."""
        return _at_k(self.name, k)

    def chance_at(self, k: int) -> str | None:
        """The name of its chance row at k, None when it has none."""
        return _at_k(self.chance, k)

    def short_at(self, k: int) -> str | None:
        """Its name in DVC's flat views at k, None when it is not in them."""
        return _at_k(self.short, k)


def _at_k(template: str | None, k: int) -> str | None:
    """A name template of the table (`chance_{mknn}`) at the run's k; None stays None."""
    return template and template.format(mknn=mknn_name(k))


def _words_at_k(text: str, k: int) -> str:
    """The table's words at k: `mutual k-NN` -> `mutual 10-NN`."""
    return text.replace("k-NN", f"{k}-NN")


# MARGINS: the audit's equivalence margin per metric when params.yaml has no `audit.margin`
# for it: the largest miss of a printed number that leaves the paper's conclusions as they are
# (not a resolution or a chance level). R@1 .03: its conclusions rest on between-arm gaps of
# .113 (good - bad, .246 - .133) and .128 (good - next-token); two arms each off by .03 keep
# the smaller above .05, about half of it. No margin on single values protects the .015 bad -
# next-token gap (it would need .0075): that order goes through the `ordering` rule ("cannot
# be separated"). .03 is 4 to 12 sds of one seed's R@1 (.0024 from the paper's ± .002 over 3
# seeds, .0068 from the audit article's .0096 seed-to-seed difference). R@5 and fit-pair R@1:
# .03 as R@1 (no conclusion turns on them). Mutual 10-NN .01: a quarter of the smallest gap the
# paper draws a conclusion from on it (good views +.040 over next-token for every seed,
# WIT-1024; it prints no Flickr30k gap), 4 to 8 seed sds (bad views .132 ± .001: sd about
# .0012). Controls .005: 20 times below the lowest arm (.118), so a control within it still
# says the score comes from the pairing. At 3 seeds against the paper's 3 and 1,000 pairs,
# tests/test_verdict_simulation.py measures "reproduced" and "differs" each 5% of the time at a
# miss of exactly the margin, "differs" never at half of it, and power .84 to 1.00 to reproduce
# a true equality where the seed sd is at most a quarter of the margin; below 3 seeds no
# sampled verdict.
# Public models scored on the same items as the paper (the `evaluated` rule): no sampling
# separates the two numbers, only the protocol's free choices (precision, TF32, padding, the
# clipping mode; platonic-rep's README warns numbers "might vary with different precision").
# WIT mutual 10-NN .005: five rounding units of the printed .001, more than ten times the
# bf16-against-float32 effect measured on real MiniLM (.0004, one neighbour of 2,560 at 256
# items; bench/reference.py), and a tenth of the .05 spread of the Qwen2.5 series the paper
# reads ("grows little with size"). WIT CKA and STS-B Spearman .01: the same five rounding
# units relative to scores about three times larger (CKA .34 to .51; Spearman .35 to .83).
# tests/test_reference.py checks that a bf16 rerun of a float32 number stays inside.
# Pair-free R@1 of a public model against an "at or below" bound near chance (Table 4's
# setting: every encoder but the good-view JEPA at or below .3% of 1,000 test photos) .005,
# as the controls: a rerun up to .3% + .5% (8 photos of 1,000) is still 20 times below the
# good-view JEPA's 16.4%, the contrast the claim is about.
# COCO mutual 10-NN (Table 3's COCO column) .005 as WIT's: the same evaluation on other items.
_ALL = frozenset({"headline", "arm", "run"})
_RUN = frozenset({"run"})
_QUANTITIES = {  # numbers a claim states that no stage scores: name -> label
    "fraction_explained": "fraction explained", "top5_accuracy": "top-5 accuracy",
    "val_loss": "validation loss", "cosine": "cosine", "count": "count", "ratio": "ratio",
    "difference": "difference", "parameters": "parameters", "tokens": "tokens",
    "samples": "samples", "images": "images", "rmse": "RMSE", "abs_error": "absolute error",
    "bound_ratio": "bound ratio", "epoch": "epoch", "hyperparameter": "hyperparameter",
    "percent": "percent", "duration": "duration", "size_gb": "size (GB)"}
TABLE: tuple[Metric, ...] = (
    Metric("r_at_1", "test R@1", "score",
           "image → text R@1, one caption per photo (the paper's protocol)", margin=0.03,
           short="r_at_1", views=_ALL, chance="chance_r_at_1",
           controls=("control_random_map_r_at_1", "control_shuffled_r_at_1"),
           benchmark="flickr30k"),
    Metric("r_at_5", "R@5", "score", "image → text R@5, one caption per photo", margin=0.03,
           short="r_at_5", views=frozenset({"arm"})),
    Metric("{mknn}", "mutual k-NN", "score",
           "mutual k-NN, one caption per photo (the paper's protocol)", margin=0.01,
           short="{mknn}", views=frozenset({"headline", "arm"}), chance="chance_{mknn}",
           benchmark="wit1024"),
    Metric("r_at_1_fit", "fit-pair R@1", "fit", "R@1 of the map on the pairs it was fitted on",
           margin=0.03, short="r_at_1_fit", views=_RUN),
    Metric("control_random_map_r_at_1", "random map", "control",
           "R@1 of a random orthonormal map", margin=0.005, short="control_random",
           views=_RUN, higher_is_better=None),
    Metric("control_shuffled_r_at_1", "shuffled pairs", "control",
           "R@1 of a map fitted on shuffled pairs", margin=0.005, short="control_shuffled",
           views=_RUN, higher_is_better=None),
    Metric("chance_r_at_1", "chance R@1", "chance", "R@1 of a random ranking", short="chance",
           views=_RUN, higher_is_better=None, chance_formula="1 / n_test"),
    Metric("chance_{mknn}", "chance mutual k-NN", "chance",
           "mutual k-NN overlap of random neighbours", higher_is_better=None,
           chance_formula="k / (n_test - 1)"),
    Metric("r_at_1_i2t_all", "R@1 among all captions", "gallery",
           "image → text R@1 among all captions (a hit: one of the photo's captions ranks "
           "first)"),
    Metric("r_at_1_t2i_all", "text → image R@1", "gallery",
           "text → image R@1, every caption queries the photos (photo's mean)"),
    Metric("{mknn}_captions", "mutual k-NN, all captions", "gallery",
           "mutual k-NN over every (photo, caption) pair"),
    Metric("{mknn}_captions_other_photos", "mutual k-NN, other photos' captions", "gallery",
           "mutual k-NN over every pair, a photo's other captions left out"),
    Metric("foscttm", "FOSCTTM", "pair_free",
           "the fraction of candidates closer than the true match (0 perfect, .5 chance)",
           higher_is_better=False, chance="chance_foscttm"),
    Metric("chance_foscttm", "chance FOSCTTM", "chance", higher_is_better=None,
           chance_formula="0.5"),
    Metric("wit_mknn10", "WIT-1024 mutual 10-NN", "evaluated", margin=0.005,
           layerwise=("mutual_knn", PAPER_K), block="alignment", benchmark="wit1024"),
    Metric("wit_mknn10_clip", "WIT-1024 mutual 10-NN, clipped", "evaluated", margin=0.005,
           layerwise=("mutual_knn", PAPER_K), block="alignment"),
    Metric("wit_cka", "WIT-1024 CKA", "evaluated", margin=0.01, layerwise=("cka", None),
           block="alignment"),
    Metric("coco_mknn10", "COCO mutual 10-NN", "evaluated", margin=0.005,
           layerwise=("mutual_knn", PAPER_K), block="coco"),
    Metric("sts_spearman", "STS-B Spearman", "evaluated", margin=0.01, block="sts"),
    Metric("pairfree_r_at_1", "pair-free R@1", "evaluated", margin=0.005, block="pair_free",
           chance="chance_r_at_1"),
    *(Metric(name, label, "quantity", higher_is_better=None)
      for name, label in _QUANTITIES.items()),
)


# the benchmarks a web-text run is scored on: name -> its title and the metric scored on it at
# the run's k. `recap.score` names them (harness.config.recap); the audit's web-text rule and
# the web-text report read them. A claim's metric names its benchmark in the table's
# `benchmark` (the evaluated WIT mutual 10-NN too: a recap run is scored on the same items).
WEB_TEXT_BENCHMARKS = {"wit1024": ("WIT-1024", mknn_name),
                       "flickr30k": ("Flickr30k", lambda k: "r_at_1")}


def rows(k: int = PAPER_K) -> dict[str, Metric]:
    """The table by name at k."""
    return {m.at(k): m for m in TABLE}


def row(name: str, k: int = PAPER_K) -> Metric:
    """The row of `name` at k; ContractError for a name the table does not hold."""
    table = rows(k)
    if name not in table:
        raise ContractError(f"metric {name!r} is not in the metric table "
                            "(harness/records/names.py); add its row there")
    return table[name]


def label(name: str, k: int = PAPER_K) -> str:
    """The report's words for `name` at k (the mutual k-NN's k written out); the name itself
    when the table does not hold it."""
    m = rows(k).get(name)
    return name if m is None else _words_at_k(m.label, k)


def describe(name: str, k: int = PAPER_K) -> str:
    """What `name` at k scores, in a sentence (the mutual k-NN's k written out)."""
    return _words_at_k(row(name, k).means, k)


def in_view(view: str, k: int) -> tuple[str, ...]:
    """The names at k shown in `view` (headline, arm, run), in table order."""
    return tuple(m.at(k) for m in TABLE if view in m.views)


def in_group(*groups: str, k: int = PAPER_K) -> tuple[str, ...]:
    """The names at k of the rows in `groups`, in table order."""
    return tuple(m.at(k) for m in TABLE if m.group in groups)


def headline(k: int) -> tuple[str, ...]:
    """The two metrics every section leads with: R@1 and the mutual k-NN."""
    return in_view("headline", k)


def arm_metrics(k: int) -> tuple[str, ...]:
    """An arm's seed-mean metrics in DVC's flat views."""
    return in_view("arm", k)


def run_scalars(k: int) -> tuple[str, ...]:
    """A run file's numbers that are no per-pair outcome: the fit-pair R@1, the controls and
    the chance levels (results.json gives their seed spread)."""
    return in_group("fit", "control", "chance", k=k)


def flat_names(k: int) -> dict[str, str]:
    """A run file's metric -> its short name in DVC's flat view."""
    return {m.at(k): m.short_at(k) for m in TABLE
            if m.short and m.views & {"arm", "run"}}


def default_margins(k: int = PAPER_K) -> dict[str, float]:
    """Metric at k -> its default equivalence margin (MARGINS above)."""
    return {m.at(k): m.margin for m in TABLE if m.margin is not None}


def layerwise(*blocks: str) -> dict[str, tuple[str, int | None]]:
    """Evaluated metric -> (prh.layers metric, k), for the rows read from `blocks` of the
    reference document (`alignment`: WIT-1024, `coco`: Table 3's COCO column)."""
    return {m.name: m.layerwise for m in TABLE if m.layerwise and m.block in blocks}


DOC_MARKS = ("<!-- the metric table: harness.records.names.markdown() -->",
             "<!-- end of the metric table -->")  # where docs/contracts.md holds it


def markdown() -> str:
    """The table as docs/contracts.md prints it between DOC_MARKS, names at the paper's k
    (tests/test_metric_table.py keeps the two equal)."""
    def cell(v: Any) -> str:
        return "—" if v in (None, "", ()) else str(v)

    direction = {True: "higher", False: "lower", None: "—"}
    lines = ["| name | label | group | margin | flat name | views | better | chance | controls |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m in TABLE:
        chance = m.chance_at(PAPER_K) or (m.chance_formula and f"= {m.chance_formula}")
        lines.append(" | ".join((
            f"| `{m.at(PAPER_K)}`", label(m.at(PAPER_K)), m.group, cell(m.margin),
            cell(m.short_at(PAPER_K)),
            cell(", ".join(sorted(m.views))), direction[m.higher_is_better], cell(chance),
            cell(", ".join(m.controls)))) + " |")
    return "\n".join(lines) + "\n"


def mknn(k: int) -> str:
    """The mutual k-NN metric (and outcome) name at k: `mknn10`."""
    return mknn_name(k)


def chance(metric: str) -> str:
    """The control holding `metric`'s chance level: `chance_r_at_1`, `chance_mknn10`."""
    return f"chance_{metric}"


def outcome_of(metric: str, outcomes: Iterable[str]) -> str | None:
    """The outcome among `outcomes` whose mean is `metric`, None when there is none."""
    return next((o for o in outcomes if metric_of(o) == metric), None)


def results_k(doc: Mapping[str, Any]) -> int:
    """The k a results.json or a run file was scored at (`eval.k`), as it records it; a file
    written before k was recorded is refused with the fix."""
    if not isinstance(doc.get("k"), int):
        raise ContractError("a results.json or run file without its mutual k-NN's k (written "
                            "before `k` was recorded); rerun its align and aggregate stages "
                            "(`dvc repro`)")
    return int(doc["k"])
