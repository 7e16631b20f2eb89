"""Rounding-aware arithmetic on printed numbers (statcheck-style): a printed number stands
for the interval of values that round to it; formulas over claims are evaluated on
those intervals."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.audit.claims import (
    Claim,
    printed_interval,
)

EPS = 1e-9  # float slack in comparisons of printed numbers (.193 - .191 is 0.0020000000000000018)
OPS: dict[str, Callable[[float, float], bool]] = {
    "eq": lambda a, b: abs(a - b) <= EPS, "ge": lambda a, b: a >= b - EPS,
    "le": lambda a, b: a <= b + EPS, "gt": lambda a, b: a > b + EPS, "lt": lambda a, b: a < b - EPS}
SYMBOLS = {"lt": "<", "le": "≤", "eq": "=", "ge": "≥", "gt": ">"}  # how an op reads in words


@dataclass(frozen=True)
class Span:
    """A number and the range its printed inputs allow (interval arithmetic)."""

    point: float
    lo: float
    hi: float


def span_of(claim: Claim) -> Span | list[Span]:
    """The claim's value and the range its printed form stands for, in base units (`scale`)."""
    k, mode = claim.scale, claim.rounding
    if isinstance(claim.value, Mapping):
        return [Span(v * k, *(x * k for x in printed_interval(claim.printed[key], mode)))
                for key, v in claim.value.items()]
    lo, hi = printed_interval(str(claim.printed), mode)
    return Span(claim.value * k, lo * k, hi * k)


def _binop(op: ast.operator, a: Span, b: Span) -> Span:
    f = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
         ast.Div: operator.truediv}[type(op)]
    if isinstance(op, ast.Div) and b.lo <= 0.0 <= b.hi:
        raise ZeroDivisionError("divisor's range contains 0")
    corners = [f(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return Span(f(a.point, b.point), min(corners), max(corners))


def _flatten(args: list[Span | list[Span]]) -> list[Span]:
    out: list[Span] = []
    for a in args:
        out.extend(a if isinstance(a, list) else [a])
    return out


def _call(name: str, args: list[Span]) -> Span:
    if name == "abs":
        (a,) = args
        lo = 0.0 if a.lo <= 0.0 <= a.hi else min(abs(a.lo), abs(a.hi))
        return Span(abs(a.point), lo, max(abs(a.lo), abs(a.hi)))
    if name == "mean":
        n = len(args)
        return Span(sum(a.point for a in args) / n, sum(a.lo for a in args) / n,
                    sum(a.hi for a in args) / n)
    pick = min if name == "min" else max
    return Span(pick(a.point for a in args), pick(a.lo for a in args), pick(a.hi for a in args))


def evaluate(formula: str, claims: Mapping[str, Claim]) -> Span:
    """Evaluate a registry formula on the claims' values, and on the ranges their printed forms
    stand for (statcheck: '.184' is any value in [.1835, .1845))."""

    def ev(node: ast.AST) -> Span | list[Span]:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            v = float(node.value)
            return Span(v, v, v)
        if isinstance(node, ast.Name):
            return span_of(claims[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            s = ev(node.operand)
            assert isinstance(s, Span)
            return Span(-s.point, -s.hi, -s.lo)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            assert isinstance(a, Span) and isinstance(b, Span)
            return _binop(node.op, a, b)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return _call(node.func.id, _flatten([ev(a) for a in node.args]))
        raise ValueError(f"unsupported formula element {ast.dump(node)}")

    out = ev(ast.parse(formula, mode="eval"))
    assert isinstance(out, Span)
    return out


def rounded_status(span: Span, printed: str, scale: float = 1.0, rounding: str = "nearest"
                   ) -> str:
    """Does a recomputation match a printed number? 'holds' (its point value rounds to it, or
    truncates to it for rounding 'down'), 'holds within input rounding' (only some values its
    inputs stand for do), else 'fails'."""
    lo, hi = (x * scale for x in printed_interval(printed, rounding))
    if lo - EPS <= span.point < hi + EPS:
        return "holds"
    return "holds within input rounding" if span.lo <= hi + EPS and span.hi >= lo - EPS \
        else "fails"


def compare_status(a: Span, op: str, b: Span) -> str:
    """`a op b` on the point values ('holds'), for some values the printed forms stand for
    ('holds within input rounding'), or for none ('fails')."""
    if OPS[op](a.point, b.point):
        return "holds"
    best = (a.hi, b.lo) if op in ("ge", "gt") else (a.lo, b.hi) if op in ("le", "lt") \
        else (a.point, b.point)
    if op == "eq":
        return "holds within input rounding" if a.lo <= b.hi + EPS and b.lo <= a.hi + EPS \
            else "fails"
    return "holds within input rounding" if OPS[op](*best) else "fails"


def check_derived(claim: Claim, claims: Mapping[str, Claim]) -> dict[str, Any]:
    """Recompute a derived claim from its formula, rounding-aware (statcheck)."""
    span = evaluate(claim.formula, claims)
    status = rounded_status(span, str(claim.printed), claim.scale, claim.rounding)
    stands_for = printed_interval(str(claim.printed), claim.rounding)
    return {"id": claim.id, "check": "formula", "formula": claim.formula,
            "printed": claim.printed, "recomputed": span.point,
            "recomputed_range": [span.lo, span.hi], "rounding": claim.rounding,
            "printed_stands_for": [x * claim.scale for x in stands_for], "status": status}
