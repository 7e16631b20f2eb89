"""The claims registry: every number the two articles report about the paper or its rerun.

`harness/claims.yaml` is data (the lm-eval-harness "registry as data" pattern, style-anchors.md
section 5): one record per claim, validated here into frozen dataclasses. Verdict rules are
referenced by name (`rule:`), never by code in the YAML; `harness.audit.RULES` holds them.

Bad input raises `ClaimsError` naming the file, the entry id and the field, with the fix.
"""

from __future__ import annotations

import ast
import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prh.config import ARMS
from prh.io import ContractError, read_yaml

REGISTRY = Path(__file__).with_name("claims.yaml")
ARTICLES = {"rerun_article": "000_03f36f523aa97921.txt",
            "audit_article": "001_3694a0dfbde3a8c0.txt"}
KINDS = ("flickr_measurable", "web_scale", "theory", "derived_arithmetic", "metadata", "ordering")
SOURCES = ("paper", "rerun")
SPREAD_KINDS = ("seeds", "half_range", "ci", "none")
CHECKS = ("eq", "ge", "le", "gt", "lt")
RULE_NAMES = ("measured", "ordering", "arithmetic", "theory", "not_rerun", "metadata")
DEFAULT_RULE = {"flickr_measurable": "measured", "web_scale": "not_rerun", "theory": "theory",
                "derived_arithmetic": "arithmetic", "metadata": "metadata", "ordering": "ordering"}
WHY_NOT_RERUN = ("data", "scale", "compute")
METRICS = ("r_at_1", "r_at_5", "mknn10", "r_at_1_fit", "control_random_map_r_at_1",
           "control_shuffled_r_at_1", "chance_r_at_1", "chance_mknn10", "wit_mknn10",
           "wit_mknn10_clip", "wit_cka", "coco_mknn10", "sts_spearman", "fraction_explained",
           "top5_accuracy", "foscttm", "val_loss", "cosine", "count", "ratio", "difference",
           "parameters", "tokens", "samples", "images", "rmse", "abs_error", "bound_ratio",
           "epoch", "hyperparameter", "percent")
SETUP_KEYS = ("dataset", "encoder", "arm", "scale", "reference", "n_test", "fit", "images",
              "samples", "seeds", "epochs", "variant")
FUNCTIONS = ("mean", "min", "max", "abs")
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
         "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_NUMBER = re.compile(r"^[+\-−]?(\d[\d,]*)?(\.\d+)?(e[+\-−]?\d+)?$", re.IGNORECASE)


class ClaimsError(ContractError):
    """A registry entry breaks the schema; the message names the file, the entry and the field."""


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
    """What a theory/ordering claim is checked against: a key in a result file and a bound."""

    key: str = ""
    op: str = "eq"
    bound: float | None = None
    requires: Mapping[str, float] = field(default_factory=dict)
    a: str = ""
    b: str = ""


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
    op: str = "eq"
    why_not_rerun: str = ""
    check: Check | None = None
    quote: str = ""

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
    s = str(text).strip().rstrip("%x×")
    if s.lower() in WORDS:
        return float(WORDS[s.lower()])
    if not s or not _NUMBER.match(s) or not re.search(r"\d", s):
        raise ClaimsError(f"{where}: malformed number {text!r}; write a number such as 0.184")
    return float(s.replace(",", "").replace("−", "-"))


def decimals(printed: str) -> int:
    """Decimal places of a printed number ('.184' -> 3, '42' -> 0, '5.3e-15' -> 16)."""
    s = printed.strip().rstrip("%x×").replace(",", "")
    if s.lower() in WORDS:
        return 0
    mant, _, exp = s.lower().partition("e")
    places = len(mant.split(".")[1]) if "." in mant else 0
    return places - int(exp.replace("−", "-")) if exp else places


def printed_interval(printed: str) -> tuple[float, float]:
    """The values a printed number stands for (statcheck style): '.184' -> [.1835, .1845)."""
    value = parse_number(printed, "printed")
    half = 0.5 * 10.0 ** -decimals(printed)
    return value - half, value + half


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
        hint = difflib.get_close_matches(str(value), allowed, n=1)
        did = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ClaimsError(f"{where}: unknown value {value!r}{did}; allowed: {list(allowed)}")
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
    op = _choice(raw.get("op", "eq"), CHECKS, f"{where}.op")
    bound = parse_number(raw["bound"], f"{where}.bound") if "bound" in raw else None
    requires = {str(k): parse_number(v, f"{where}.requires.{k}")
                for k, v in (raw.get("requires") or {}).items()}
    a, b = str(raw.get("a", "")), str(raw.get("b", ""))
    for name, arm in (("a", a), ("b", b)):
        if arm:
            _choice(arm, ARMS, f"{where}.{name}")
    return Check(str(raw.get("key", "")), op, bound, requires, a, b)


def parse_claim(rec: Mapping[str, Any], where: str) -> Claim:
    """One registry record -> Claim; every field checked, errors name the entry and field."""
    cid = str(_require(rec, "id", where))
    if not re.fullmatch(r"[a-z][a-z0-9_]*", cid):
        raise ClaimsError(f"{where}: id {cid!r} must be snake_case")
    at = f"{where} (id {cid})"
    unknown = set(rec) - {f.name for f in Claim.__dataclass_fields__.values()} - {"reported_by"}
    if unknown:
        raise ClaimsError(f"{at}: unknown field(s) {sorted(unknown)}")
    kind = _choice(_require(rec, "kind", f"{at} field kind"), KINDS, f"{at} field kind")
    source = _choice(_require(rec, "source", f"{at} field source"), SOURCES, f"{at} field source")
    value, printed = _value(_require(rec, "value", f"{at} field value"),
                            _require(rec, "printed", f"{at} field printed"), f"{at} field")
    rep = _require(rec, "reported_by", f"{at} field reported_by")
    if not isinstance(rep, Mapping):
        raise ClaimsError(f"{at} field reported_by: expected {{article: ..., section: ...}}")
    article = _choice(rep.get("article"), tuple(ARTICLES), f"{at} field reported_by.article")
    section = str(_require(rep, "section", f"{at} field reported_by"))
    setup = rec.get("setup") or {}
    bad_keys = set(setup) - set(SETUP_KEYS)
    if bad_keys:
        raise ClaimsError(f"{at} field setup: unknown key(s) {sorted(bad_keys)}; "
                          f"allowed: {list(SETUP_KEYS)}")
    if "arm" in setup:
        _choice(setup["arm"], ARMS, f"{at} field setup.arm")
    if "n_test" in setup:
        parse_number(setup["n_test"], f"{at} field setup.n_test")
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
    return Claim(
        id=cid, statement=str(_require(rec, "statement", f"{at} field statement")),
        value=value, printed=printed, spread=_spread(rec.get("spread"), f"{at} field spread"),
        metric=_choice(_require(rec, "metric", f"{at} field metric"), METRICS,
                       f"{at} field metric"),
        setup=dict(setup), where=str(_require(rec, "where", f"{at} field where")),
        reported_by=article, section=section, source=source, kind=kind,
        rule=_choice(rec.get("rule") or DEFAULT_RULE[kind], RULE_NAMES, f"{at} field rule"),
        formula=formula, op=_choice(rec.get("op", "eq"), CHECKS, f"{at} field op"),
        why_not_rerun=why, check=_check(rec.get("check"), f"{at} field check"), quote=quote,
    )


def _expand(rec: Mapping[str, Any], templates: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Merge the record onto its `include:` template (lm-eval style); the record's fields win."""
    out = dict(rec)
    name = out.pop("include", None)
    if name is None:
        return out
    if name not in templates:
        raise ClaimsError(f"{where} field include: unknown template {name!r}"
                          f"{_suggest(str(name), templates)}")
    return {**templates[name], **out}


def parse_registry(doc: Any, path: str = "<registry>") -> dict[str, Claim]:
    """Validate `{version, templates, claims: [...]}` (or a bare list of records); duplicate
    ids and formulas naming unknown ids raise."""
    templates = doc.get("templates") or {} if isinstance(doc, Mapping) else {}
    records = doc.get("claims") if isinstance(doc, Mapping) else doc
    if not isinstance(records, list):
        raise ClaimsError(f"{path}: the registry needs a list of claims under 'claims:'")
    claims: dict[str, Claim] = {}
    for i, raw in enumerate(records):
        if not isinstance(raw, Mapping):
            raise ClaimsError(f"{path}: entry {i} is not a mapping")
        where = f"{path}: entry {i} (id {raw.get('id')})"
        claim = parse_claim(_expand(raw, templates, where), f"{path}: entry {i}")
        if claim.id in claims:
            raise ClaimsError(f"{path}: entry {i}: duplicate id {claim.id!r}; ids must be unique")
        claims[claim.id] = claim
    for claim in claims.values():
        for name in sorted(formula_ids(claim.formula, claim.id)) if claim.formula else []:
            if name not in claims:
                raise ClaimsError(f"{path}: entry {claim.id} field formula: unknown id "
                                  f"{name!r}{_suggest(name, claims)}")
    return claims


def _suggest(name: str, known: Mapping[str, Any]) -> str:
    hint = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def load_claims(path: str | Path = REGISTRY) -> dict[str, Claim]:
    """Read and validate the registry file (strict: unknown fields, kinds and ids raise)."""
    try:
        doc = read_yaml(path, "registry not found: pass --claims harness/claims.yaml")
    except ContractError as e:
        raise ClaimsError(str(e)) from e
    return parse_registry(doc, str(path))


def get_claim(claims: Mapping[str, Claim], cid: str) -> Claim:
    """Look a claim up by id; an unknown id raises with a "did you mean" suggestion."""
    if cid not in claims:
        raise KeyError(f"unknown claim id {cid!r}{_suggest(cid, claims)}")
    return claims[cid]
