"""The claims registry: every number the two articles report about the paper or its rerun.

`harness/audit/claims.yaml` is data (the lm-eval-harness "registry as data" pattern): one record per
claim, validated here into frozen dataclasses, and a list of relations across claims (statcheck
for ML papers: a printed difference against the printed means, a bound stated for every seed,
"the same order as", a bound stated for one quantity read against another). Verdict rules are
referenced by name (`rule:`), never by code in the YAML; `harness.audit.rules.RULES` holds them.
Templates (`include:`) are deep-merged for `setup`, so a claim states only what differs; a
`null` in the claim's setup removes a template key.

Bad input raises `ClaimsError` naming the file, the registry line, the entry id and the field,
with the fix: an unknown id in a formula or relation, a cycle of formulas, a relation between
claims of different metrics, a spread that does not contain its value, a margin of 0 or below.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.records import names, verdicts
from prh.config import ARMS, did_you_mean
from prh.io import ContractError, read_yaml, safe_loader

REGISTRY = Path(__file__).with_name("claims.yaml")
# the two articles a claim can be reported by, with a phrase that identifies each one's text
ARTICLES = {"rerun_article": "Rerunning Yann LeCun’s JEPA Paper",
            "audit_article": "Why Pebblous Is Watching"}
KINDS = ("flickr_measurable", "web_scale", "theory", "derived_arithmetic", "metadata", "ordering")
# who the number belongs to: the paper, the authors' code/docs, the rerun article's rerun, the
# article's own arithmetic on the paper's numbers, or a third party the article quotes
SOURCES = ("paper", "code", "rerun", "article", "press")
SPREAD_KINDS = ("seeds", "half_range", "ci", "none")
CHECKS = ("eq", "ge", "le", "gt", "lt")
RELATION_TYPES = ("difference", "compare", "per_seed_bound", "bound", "same_order",
                  "interval_vs_seeds", "binomial_min", "grimmer", "chance_pool", "printed_as")
RULE_NAMES = ("measured", "ordering", "arithmetic", "theory", "theory_count", "not_rerun",
              "metadata", "evaluated", "ranking", "sts_arm", "pairfree_bound", "web_text")
DEFAULT_RULE = {"flickr_measurable": "measured", "web_scale": "not_rerun", "theory": "theory",
                "derived_arithmetic": "arithmetic", "metadata": "metadata", "ordering": "ordering"}
WHY_NOT_RERUN = tuple(verdicts.WHY_NOT_RERUN)
SETUP_KEYS = ("dataset", "encoder", "arm", "scale", "reference", "n_test", "fit", "images",
              "samples", "seeds", "epochs", "variant", "measure", "model", "sources", "assumed")
WEB_TEXT_SETUP = ("images", "sources")  # what a web_text claim names for a run to match it
FUNCTIONS = ("mean", "min", "max", "abs")
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
         "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_UNIT = re.compile(r"(?<=\d)[%x×]$")  # '43.9%', '42x', '41.7×' (not the x of 'six')
_NUMBER = re.compile(r"^[+\-−]?(\d[\d,]*)?(\.\d+)?(e[+\-−]?\d+)?$", re.IGNORECASE)


class ClaimsError(ContractError):
    """A registry entry breaks the schema; the message names the file, the entry and the field."""


class AuditError(ContractError):
    """An input of the audit is inconsistent (e.g. a params hash that is not the expected one)."""


@dataclass(frozen=True)
class Spread:
    """The uncertainty the claim states: over seeds, a half-range, an interval, or none."""

    kind: str
    half_range: float | None = None
    lo: float | None = None
    hi: float | None = None
    n: int | None = None
    level: float | None = None
    printed: str = ""


@dataclass(frozen=True)
class Check:
    """What a theory/ordering claim is checked against.

    Theory: `key` in runs/theory.json times `factor` compared by `op` with `bound` (default: the
    claim's own value). Ordering: arm `a` against arm `b` on metric `key`; `type` "order" (a
    beats b, by the printed gap when there is one) or "inseparable" (the two cannot be
    separated); `of` names the two claims whose difference is the claimed gap when the article
    prints no gap; `min_gap` the smallest gap an order-only claim's conclusion needs (0: any
    gap; above 0 the claim's `margin_why` argues it).
    """

    key: str = ""
    op: str = "eq"
    bound: float | None = None
    factor: float = 1.0
    requires: Mapping[str, float] = field(default_factory=dict)
    a: str = ""
    b: str = ""
    type: str = "order"
    of: tuple[str, ...] = ()
    min_gap: float = 0.0


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    value: float | Mapping[str, float]
    printed: str | Mapping[str, str]
    spread: Spread
    metric: str
    setup: Mapping[str, Any]
    where: str
    reported_by: str
    section: str
    source: str
    kind: str
    rule: str
    formula: str = ""
    why_not_rerun: str = ""
    check: Check | None = None
    quote: str = ""
    scale: float = 1.0
    margin: float | None = None
    margin_why: str = ""  # the argument for `margin` (or `check.min_gap`): required with either
    rounding: str = "nearest"  # how `printed` was rounded from the value (ROUNDINGS)
    line: int = 0

    def scalar(self) -> float:
        """The claim's number; a per-seed claim's number is the mean of its seeds."""
        if isinstance(self.value, Mapping):
            return sum(self.value.values()) / len(self.value)
        return self.value


def parse_number(text: Any, where: str) -> float:
    """A number as printed: '.184', '0.184', '+.103', '−.009', '220,992', '5.3e-15', 42."""
    if isinstance(text, bool):
        raise ClaimsError(f"{where}: malformed number {text!r}; write a number such as 0.184")
    if isinstance(text, int | float):
        if not math.isfinite(text):
            raise ClaimsError(f"{where}: non-finite number {text!r}")
        return float(text)
    s = _UNIT.sub("", str(text).strip())
    if s.lower() in WORDS:
        return float(WORDS[s.lower()])
    if not s or not _NUMBER.match(s) or not re.search(r"\d", s):
        raise ClaimsError(f"{where}: malformed number {text!r}; write a number such as 0.184")
    return float(s.replace(",", "").replace("−", "-"))


def decimals(printed: str) -> int:
    """Decimal places of a printed number ('.184' -> 3, '42' -> 0, '5.3e-15' -> 16)."""
    s = _UNIT.sub("", printed.strip()).replace(",", "")
    if s.lower() in WORDS:
        return 0
    mant, _, exp = s.lower().partition("e")
    places = len(mant.split(".")[1]) if "." in mant else 0
    return places - int(exp.replace("−", "-")) if exp else places


ROUNDINGS = ("nearest", "down", "exact")


def printed_interval(printed: str, rounding: str = "nearest") -> tuple[float, float]:
    """The values a printed number stands for (statcheck style): '.184' -> [.1835, .1845);
    with rounding 'down' (a number the text truncates, e.g. "660 times" read as 660.55 without
    its decimals, one reading of relation param_ratio_660_rounding) '660' -> [660, 661); 'exact'
    (a count of named things) -> the number itself."""
    value = parse_number(printed, "printed")
    step = 10.0 ** -decimals(printed)
    if rounding == "exact":
        return value, value
    if rounding == "down":
        return (value, value + step) if value >= 0 else (value - step, value)
    return value - step / 2, value + step / 2


def formula_ids(formula: str, where: str) -> set[str]:
    """Claim ids a formula names; only numbers, ids, + - * / and mean/min/max/abs are allowed."""
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError as e:
        raise ClaimsError(f"{where}: formula {formula!r} does not parse ({e.msg})") from e
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
                raise ClaimsError(f"{where}: formula calls {ast.unparse(node.func)!r}; "
                                  f"only {list(FUNCTIONS)} are allowed")
        elif isinstance(node, ast.Name) and node.id not in FUNCTIONS:
            names.add(node.id)
        elif not isinstance(node, ast.Expression | ast.BinOp | ast.UnaryOp | ast.Constant
                            | ast.Name | ast.Load | ast.operator | ast.unaryop):
            raise ClaimsError(f"{where}: formula {formula!r} uses {type(node).__name__}; "
                              "only arithmetic on claim ids is allowed")
    return names


def _require(rec: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in rec or rec[key] in (None, ""):
        raise ClaimsError(f"{where}: missing field {key!r}")
    return rec[key]


def _choice(value: Any, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise ClaimsError(f"{where}: unknown value {value!r}{did_you_mean(value, allowed)}; "
                          f"allowed: {list(allowed)}")
    return str(value)


def _spread(raw: Any, where: str) -> Spread:
    if raw is None:
        return Spread("none")
    if not isinstance(raw, Mapping):
        raise ClaimsError(f"{where}: expected a mapping like {{kind: none}}, got {raw!r}")
    kind = _choice(raw.get("kind"), SPREAD_KINDS, f"{where}.kind")
    num = {k: parse_number(raw[k], f"{where}.{k}") for k in ("half_range", "lo", "hi", "level")
           if k in raw}
    if kind == "half_range" and "half_range" not in num:
        raise ClaimsError(f"{where}: kind half_range needs field 'half_range'")
    if kind == "ci" and not {"lo", "hi"} <= num.keys():
        raise ClaimsError(f"{where}: kind ci needs fields 'lo' and 'hi'")
    n = int(parse_number(raw["n"], f"{where}.n")) if "n" in raw else None
    return Spread(kind, num.get("half_range"), num.get("lo"), num.get("hi"), n, num.get("level"),
                  str(raw.get("printed", "")))


def _spread_holds_value(spread: Spread, value: float, where: str) -> None:
    """A spread must contain its value: lo <= value <= hi, half_range >= 0."""
    if spread.kind == "ci" and not spread.lo - 1e-12 <= value <= spread.hi + 1e-12:
        raise ClaimsError(f"{where}: interval [{spread.lo:g}, {spread.hi:g}] does not contain "
                          f"the value {value:g}; fix the value or the interval")
    if spread.kind == "half_range" and spread.half_range < 0:
        raise ClaimsError(f"{where}: half_range {spread.half_range:g} is negative")


def _agree(value: float, printed: str, where: str) -> None:
    """The value must lie within the rounding of its printed form ('.184' holds .1837)."""
    lo, hi = printed_interval(printed)
    if not lo - 1e-12 <= value <= hi + 1e-12:
        raise ClaimsError(f"{where}: value {value} does not round to printed {printed!r} "
                          f"(which stands for [{lo:g}, {hi:g})); fix one of them")


def _value(raw: Any, printed: Any, where: str) -> tuple[float | dict[str, float], Any]:
    if isinstance(raw, Mapping):
        if not isinstance(printed, Mapping) or set(map(str, printed)) != set(map(str, raw)):
            raise ClaimsError(f"{where} printed: a per-item value needs a printed mapping with "
                              f"the same keys {sorted(map(str, raw))}")
        value = {str(k): parse_number(v, f"{where} value.{k}") for k, v in raw.items()}
        shown = {str(k): str(v) for k, v in printed.items()}
        for k, text in shown.items():
            parse_number(text, f"{where} printed.{k}")
            _agree(value[k], text, f"{where} value.{k}")
        return value, shown
    value = parse_number(raw, f"{where} value")
    parse_number(printed, f"{where} printed")
    _agree(value, str(printed), f"{where} value")
    return value, str(printed)


def _check(raw: Any, where: str) -> Check | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ClaimsError(f"{where}: expected a mapping (key/op/bound or a/b), got {raw!r}")
    unknown = set(raw) - set(Check.__dataclass_fields__)
    if unknown:
        raise ClaimsError(f"{where}: unknown field(s) {sorted(unknown)}")
    op = _choice(raw.get("op", "eq"), CHECKS, f"{where}.op")
    bound = parse_number(raw["bound"], f"{where}.bound") if "bound" in raw else None
    factor = parse_number(raw.get("factor", 1), f"{where}.factor")
    requires = {str(k): parse_number(v, f"{where}.requires.{k}")
                for k, v in (raw.get("requires") or {}).items()}
    a, b = str(raw.get("a", "")), str(raw.get("b", ""))
    for name, arm in (("a", a), ("b", b)):
        if arm:
            _choice(arm, ARMS, f"{where}.{name}")
    kind = _choice(raw.get("type", "order"), ("order", "inseparable"), f"{where}.type")
    of = tuple(str(x) for x in raw.get("of") or ())
    if of and len(of) != 2:
        raise ClaimsError(f"{where}.of: name exactly two claim ids (a's value, b's value)")
    min_gap = parse_number(raw.get("min_gap", 0), f"{where}.min_gap")
    if min_gap and kind != "order":
        raise ClaimsError(f"{where}.min_gap: only an order (type: order) has a smallest "
                          "material gap; an inseparable claim's gap margin is its `margin:`")
    return Check(str(raw.get("key", "")), op, bound, factor, requires, a, b, kind, of, min_gap)


def _margin(raw: Any, where: str) -> float | None:
    if raw is None:
        return None
    margin = parse_number(raw, where)
    if margin <= 0:
        raise ClaimsError(f"{where}: margin {margin:g} must be above 0 (an equivalence margin "
                          "of 0 can never be met)")
    return margin


def parse_claim(rec: Mapping[str, Any], where: str, line: int = 0) -> Claim:
    """One registry record -> Claim; every field checked, errors name the entry and field."""
    cid = str(_require(rec, "id", where))
    if not re.fullmatch(r"[a-z][a-z0-9_]*", cid):
        raise ClaimsError(f"{where}: id {cid!r} must be snake_case")
    at = f"{where} (id {cid})"
    unknown = set(rec) - (set(Claim.__dataclass_fields__) - {"line"}) - {"reported_by"}
    if unknown:
        raise ClaimsError(f"{at}: unknown field(s) {sorted(unknown)}")
    kind = _choice(_require(rec, "kind", f"{at} field kind"), KINDS, f"{at} field kind")
    source = _choice(_require(rec, "source", f"{at} field source"), SOURCES, f"{at} field source")
    check = _check(rec.get("check"), f"{at} field check")
    if check is not None and (check.of or kind == "ordering") and "value" not in rec:
        # the difference of the two named claims (set by the registry), or an order only
        value, printed = 0.0, ""
    else:
        value, printed = _value(_require(rec, "value", f"{at} field value"),
                                _require(rec, "printed", f"{at} field printed"), f"{at} field")
    rep = _require(rec, "reported_by", f"{at} field reported_by")
    if not isinstance(rep, Mapping):
        raise ClaimsError(f"{at} field reported_by: expected {{article: ..., section: ...}}")
    article = _choice(rep.get("article"), tuple(ARTICLES), f"{at} field reported_by.article")
    section = str(_require(rep, "section", f"{at} field reported_by"))
    setup = {k: v for k, v in (rec.get("setup") or {}).items() if v is not None}
    bad_keys = set(setup) - set(SETUP_KEYS)
    if bad_keys:
        raise ClaimsError(f"{at} field setup: unknown key(s) {sorted(bad_keys)}; "
                          f"allowed: {list(SETUP_KEYS)}")
    if "arm" in setup:
        _choice(setup["arm"], ARMS, f"{at} field setup.arm")
    for key in ("n_test", "seeds"):
        if key in setup:
            parse_number(setup[key], f"{at} field setup.{key}")
    if kind == "ordering" and not printed and not (check and check.of) \
            and rec.get("metric") == "difference":
        raise ClaimsError(f"{at}: an ordering with no printed gap is an order only: give "
                          "`metric:` the compared metric (e.g. mknn10), not difference")
    formula = str(rec.get("formula") or "")
    if kind == "derived_arithmetic" and not formula:
        raise ClaimsError(f"{at}: missing field 'formula' (derived_arithmetic claims need one)")
    if formula:
        formula_ids(formula, f"{at} field formula")
    quote = str(rec.get("quote") or "")
    if quote and isinstance(printed, str) and printed not in quote:
        raise ClaimsError(f"{at} field quote: {quote!r} does not contain printed {printed!r}")
    why = str(rec.get("why_not_rerun") or "")
    if why:
        _choice(why, WHY_NOT_RERUN, f"{at} field why_not_rerun")
    spread = _spread(rec.get("spread"), f"{at} field spread")
    if isinstance(value, float) and printed:
        _spread_holds_value(spread, value, f"{at} field spread")
    rule = _choice(rec.get("rule") or DEFAULT_RULE[kind], RULE_NAMES, f"{at} field rule")
    if rule == "web_text":
        lacking = [k for k in WEB_TEXT_SETUP if k not in setup]
        if lacking or not isinstance(setup.get("sources", []), list) \
                or not (check and check.a) and "arm" not in setup:
            raise ClaimsError(f"{at}: rule web_text matches runs by setup.images (millions), "
                              "setup.sources (a list of source names) and the arm(s) "
                              f"(setup.arm or check: {{a, b}}); missing or malformed: "
                              f"{lacking or ['sources' if 'sources' in setup else 'arm']}")
    margin, margin_why = _margin(rec.get("margin"), f"{at} field margin"), \
        str(rec.get("margin_why") or "")
    if check is not None and check.type == "inseparable" and "margin" not in rec:
        raise ClaimsError(f"{at}: \"cannot be separated\" is equivalence of the gap to 0 within "
                          "a gap margin of its own: give `margin:` and `margin_why:` (the "
                          "argument for it)")
    if ("margin" in rec or (check is not None and check.min_gap)) and not margin_why:
        raise ClaimsError(f"{at}: a claim's own margin (or check.min_gap) needs its argument "
                          "in `margin_why:`")
    scale = parse_number(rec.get("scale", 1), f"{at} field scale")
    if scale <= 0:
        raise ClaimsError(f"{at} field scale: {scale:g} must be above 0")
    return Claim(
        id=cid, statement=str(_require(rec, "statement", f"{at} field statement")),
        value=value, printed=printed, spread=spread,
        metric=_choice(_require(rec, "metric", f"{at} field metric"), tuple(names.rows()),
                       f"{at} field metric"),
        setup=setup, where=str(_require(rec, "where", f"{at} field where")),
        reported_by=article, section=section, source=source, kind=kind,
        rule=rule, formula=formula, why_not_rerun=why, check=check, quote=quote, scale=scale,
        margin=margin, margin_why=margin_why,
        rounding=_choice(rec.get("rounding", "nearest"), ROUNDINGS, f"{at} field rounding"),
        line=line,
    )


def _expand(rec: Mapping[str, Any], templates: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Merge the record onto its `include:` template (lm-eval style); the record's fields win,
    and `setup` is merged key by key (a `null` removes the template's key)."""
    out = dict(rec)
    name = out.pop("include", None)
    if name is None:
        return out
    if name not in templates:
        raise ClaimsError(f"{where} field include: unknown template {name!r}"
                          f"{did_you_mean(str(name), templates)}")
    base = templates[name]
    setup = {**(base.get("setup") or {}), **(out.get("setup") or {})}
    return {**base, **out, **({"setup": setup} if setup else {})}


@dataclass(frozen=True)
class Reading:
    """One reading of a relation's text: what it compares (type-specific fields)."""

    text: str
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class Relation:
    """A relation across claims; several readings when the text allows more than one."""

    id: str
    type: str
    statement: str
    reported_by: str
    section: str
    readings: tuple[Reading, ...]
    line: int = 0
    informational: str = ""  # why a failed check is by design (shown, never a finding)


# per relation type: (fields naming one claim id, fields naming a list of ids, other fields)
RELATION_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "difference": (("printed", "a", "b"), (), ()),
    "compare": (("a", "b"), (), ("op",)),
    "per_seed_bound": (("bound",), ("means",), ("op",)),
    "bound": (("bound",), (), ("op", "quantity")),
    "same_order": ((), ("a", "b"), ()),
    "interval_vs_seeds": (("interval", "seeds"), (), ()),
    "binomial_min": (("interval",), (), ()),
    "grimmer": (("mean",), (), ()),
    "chance_pool": (("chance", "pool"), (), ("k",)),
    "printed_as": (("printed",), (), ("quantity", "rounding")),
}
# relation types whose claims must share one metric (a difference of R@1 and mutual 10-NN is
# meaningless); ratios across units are formulas with explicit `scale`s instead
SAME_METRIC = ("difference", "compare", "per_seed_bound", "bound", "printed_as")


# metrics that count the same things: a sample of one text is at most one unique image
COUNTABLE_TOGETHER = ({"images", "samples"},)


def _formula_metric(formula: str, claims: Mapping[str, Claim]) -> str:
    """The unit of a relation's quantity: 'ratio' for one claim over another of the same
    metric (940M images / 2.16M images; or COUNTABLE_TOGETHER), else the one metric its claims
    share ('' if mixed)."""
    node = ast.parse(formula, mode="eval").body
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) \
            and isinstance(node.left, ast.Name) and isinstance(node.right, ast.Name):
        units = {claims[n].metric for n in (node.left.id, node.right.id)}
        if len(units) == 1 or any(units <= group for group in COUNTABLE_TOGETHER):
            return "ratio"
    metrics = {claims[n].metric for n in formula_ids(formula, formula)} - {"difference"}
    return metrics.pop() if len(metrics) == 1 else "difference" if not metrics else ""


def _reading(raw: Mapping[str, Any], rtype: str, claims: Mapping[str, Claim], at: str
             ) -> Reading:
    ids, lists, other = RELATION_FIELDS[rtype]
    allowed = {"reading", *ids, *lists, *other}
    unknown = set(raw) - allowed
    if unknown:
        raise ClaimsError(f"{at}: unknown field(s) {sorted(unknown)} for type {rtype}; "
                          f"allowed: {sorted(allowed)}")
    named: list[str] = []
    for key in ids:
        named.append(str(_require(raw, key, at)))
    for key in lists:
        got = _require(raw, key, at)
        if not isinstance(got, list) or len(got) < 1:
            raise ClaimsError(f"{at} field {key}: expected a list of claim ids")
        named += [str(x) for x in got]
    quantity_ids: set[str] = set()
    if "quantity" in other:
        quantity_ids = formula_ids(str(_require(raw, "quantity", at)), f"{at} field quantity")
        named += sorted(quantity_ids)
    for name in named:
        if name not in claims:
            raise ClaimsError(f"{at}: unknown claim id {name!r}{did_you_mean(name, claims)}")
    fields = {k: raw[k] for k in (*ids, *lists, *other) if k in raw}
    if "op" in other:
        fields["op"] = _choice(_require(raw, "op", at), CHECKS, f"{at} field op")
    if "rounding" in other:
        fields["rounding"] = _choice(_require(raw, "rounding", at), ROUNDINGS,
                                     f"{at} field rounding")
    if rtype in SAME_METRIC:
        metrics = {claims[n].metric for n in named if n not in quantity_ids}
        metrics |= {_formula_metric(str(raw["quantity"]), claims)} if quantity_ids else set()
        if len(metrics - {"difference"}) > 1:
            raise ClaimsError(f"{at}: relation across units: {sorted(named)} have metrics "
                              f"{sorted({claims[n].metric for n in named})}; compare like with "
                              "like or write a formula claim with explicit scales")
    return Reading(str(raw.get("reading", "")), fields)


def parse_relation(rec: Mapping[str, Any], claims: Mapping[str, Claim], where: str,
                   line: int = 0) -> Relation:
    """One `relations:` record -> Relation; ids must exist and share a metric where needed."""
    rid = str(_require(rec, "id", where))
    at = f"{where} (relation {rid})"
    rtype = _choice(_require(rec, "type", f"{at} field type"), RELATION_TYPES,
                    f"{at} field type")
    rep = _require(rec, "reported_by", f"{at} field reported_by")
    article = _choice(rep.get("article"), tuple(ARTICLES), f"{at} field reported_by.article")
    top = {k: v for k, v in rec.items()
           if k not in ("id", "type", "statement", "reported_by", "readings", "informational")}
    raws = rec.get("readings") or [top]
    if rec.get("readings") and top:
        raise ClaimsError(f"{at}: put {sorted(top)} inside each reading, not beside `readings`")
    if rec.get("readings") and len(raws) < 2:
        raise ClaimsError(f"{at} field readings: name at least two readings, or none")
    readings = tuple(_reading(r, rtype, claims, f"{at} reading {i}") for i, r in enumerate(raws))
    if len(readings) > 1 and any(not r.text for r in readings):
        raise ClaimsError(f"{at} field readings: each reading needs its `reading:` text")
    return Relation(rid, rtype, str(_require(rec, "statement", f"{at} field statement")),
                    article, str(_require(rep, "section", f"{at} field reported_by")), readings,
                    line, str(rec.get("informational") or ""))


def _cycle(claims: Mapping[str, Claim]) -> list[str]:
    """A cycle of formulas (as a path of ids), or [] when there is none."""
    state: dict[str, int] = {}

    def visit(cid: str, path: list[str]) -> list[str]:
        state[cid] = 1
        for dep in sorted(formula_ids(claims[cid].formula, cid)) if claims[cid].formula else []:
            if state.get(dep) == 1:
                return [*path, cid, dep][[*path, cid].index(dep):]
            if dep in claims and not state.get(dep):
                found = visit(dep, [*path, cid])
                if found:
                    return found
        state[cid] = 2
        return []

    for cid in claims:
        if not state.get(cid):
            found = visit(cid, [])
            if found:
                return found
    return []


@dataclass(frozen=True)
class Registry:
    """The validated registry: claims by id and relations across them."""

    claims: Mapping[str, Claim]
    relations: tuple[Relation, ...]


def parse_registry(doc: Any, path: str = "<registry>",
                   lines: Mapping[tuple[str, int], int] | None = None) -> dict[str, Claim]:
    """Validate `{version, templates, claims: [...], relations: [...]}` (or a bare list of
    claim records) and return the claims; duplicate ids, unknown ids in formulas and formula
    cycles raise, naming the registry line when `lines` maps (section, index) to it."""
    return parse_full_registry(doc, path, lines).claims


def parse_full_registry(doc: Any, path: str = "<registry>",
                        lines: Mapping[tuple[str, int], int] | None = None) -> Registry:
    """As `parse_registry`, with the relations."""
    lines = lines or {}
    templates = doc.get("templates") or {} if isinstance(doc, Mapping) else {}
    records = doc.get("claims") if isinstance(doc, Mapping) else doc
    if not isinstance(records, list):
        raise ClaimsError(f"{path}: the registry needs a list of claims under 'claims:'")

    def loc(section: str, i: int) -> str:
        line = lines.get((section, i))
        return f"{path}:{line}" if line else path

    claims: dict[str, Claim] = {}
    for i, raw in enumerate(records):
        if not isinstance(raw, Mapping):
            raise ClaimsError(f"{loc('claims', i)}: entry {i} is not a mapping")
        where = f"{loc('claims', i)}: entry {i}"
        claim = parse_claim(_expand(raw, templates, f"{where} (id {raw.get('id')})"), where,
                            lines.get(("claims", i), 0))
        if claim.id in claims:
            raise ClaimsError(f"{where}: duplicate id {claim.id!r}; ids must be unique")
        claims[claim.id] = claim
    at = {c.id: f"{loc('claims', i)}: entry {c.id}" for i, c in enumerate(claims.values())}
    for claim in claims.values():
        named = sorted(formula_ids(claim.formula, claim.id)) if claim.formula else []
        named += list(claim.check.of) if claim.check else []
        for name in named:
            if name not in claims:
                raise ClaimsError(f"{at[claim.id]} field formula: unknown id "
                                  f"{name!r}{did_you_mean(name, claims)}")
    cycle = _cycle(claims)
    if cycle:
        raise ClaimsError(f"{at[cycle[0]]} field formula: formula cycle "
                          f"{' -> '.join(cycle)}; a derived number cannot depend on itself")
    for cid, claim in claims.items():
        if claim.check is not None and claim.check.of and not claim.printed:
            a, b = (claims[x] for x in claim.check.of)
            claims[cid] = replace(claim, value=a.scalar() - b.scalar(),
                                  printed=f"{a.printed} - {b.printed}")
    raw_rel = doc.get("relations") or [] if isinstance(doc, Mapping) else []
    relations = []
    for i, rec in enumerate(raw_rel):
        if not isinstance(rec, Mapping):
            raise ClaimsError(f"{loc('relations', i)}: relation {i} is not a mapping")
        rel = parse_relation(rec, claims, f"{loc('relations', i)}: relation {i}",
                             lines.get(("relations", i), 0))
        if rel.id in claims or rel.id in {r.id for r in relations}:
            raise ClaimsError(f"{loc('relations', i)}: duplicate id {rel.id!r}")
        relations.append(rel)
    return Registry(claims, tuple(relations))


def registry_lines(path: str | Path) -> dict[tuple[str, int], int]:
    """(section, index) -> 1-based line of each `claims:` / `relations:` item in the file."""
    import yaml

    try:
        root = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=safe_loader())
    except (OSError, yaml.YAMLError):
        return {}
    out: dict[tuple[str, int], int] = {}
    if isinstance(root, yaml.MappingNode):
        for key, node in root.value:
            if key.value in ("claims", "relations") and isinstance(node, yaml.SequenceNode):
                for i, item in enumerate(node.value):
                    out[key.value, i] = item.start_mark.line + 1
    return out


def load_registry(path: str | Path = REGISTRY) -> Registry:
    """Read and validate the registry file (strict: unknown fields, kinds and ids raise)."""
    try:
        doc = read_yaml(path, "registry not found: pass --claims harness/audit/claims.yaml")
    except ContractError as e:
        raise ClaimsError(str(e)) from e
    return parse_full_registry(doc, str(path), registry_lines(path))


def load_claims(path: str | Path = REGISTRY) -> dict[str, Claim]:
    """The registry's claims (see `load_registry`)."""
    return dict(load_registry(path).claims)


def get_claim(claims: Mapping[str, Claim], cid: str) -> Claim:
    """Look a claim up by id; an unknown id raises with a "did you mean" suggestion."""
    if cid not in claims:
        raise KeyError(f"unknown claim id {cid!r}{did_you_mean(cid, claims)}")
    return claims[cid]
