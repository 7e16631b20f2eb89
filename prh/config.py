"""One strict loader from plain mappings (params.yaml sections) to config dataclasses.

Unknown keys and wrong types raise ValueError naming `where.key` (the checks of nanoGPT's
configurator, which type-checks overrides and rejects unknown keys, without its `exec`).
Supported field types: bool, int, float (ints accepted), str, Literal[...], fixed tuples,
`tuple[X, ...]`, and nested dataclasses. A dataclass may list the keys a user may set in
`SETTABLE` (others are derived).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal

# the paper's three text arms: good views, bad views, next-token prediction
ARMS: tuple[str, ...] = ("good", "bad", "ntp")


def mknn_name(k: int) -> str:
    """The name of the mutual k-NN score at k (`mknn10`): in prh's scores and per-pair
    outcomes, and in every file and table downstream (harness.records.names)."""
    return f"mknn{k}"


HIT = "_hit"  # a per-pair outcome that is a hit (0/1) ends in it; the metric, its mean, does not


# the fields of a training's per-epoch record (curve.json) that score it: R@1 on the test pairs
# and on the fit pairs after that epoch (harness.stages.train's hook writes them; the curve's
# readers downstream read them by these names)
CURVE_TEST, CURVE_FIT = "r_at_1_test", "r_at_1_fit"


def metric_of(outcome: str) -> str:
    """The metric an outcome averages to: `r_at_1_hit` -> `r_at_1`, `mknn10` -> `mknn10`."""
    return outcome.removesuffix(HIT)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest of `known` to a mistyped `name`, else ''."""
    hint = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def dataclass_from_dict(cls: type, d: Any, where: str) -> Any:
    """Build `cls` from `d` strictly; nested dataclass fields take nested mappings."""
    if not isinstance(d, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(d).__name__}")
    hints = typing.get_type_hints(cls)
    names = set(getattr(cls, "SETTABLE", ()) or (f.name for f in dataclasses.fields(cls)))
    unknown = sorted(set(d) - names)
    if unknown:
        hint = did_you_mean(unknown[0], names) if len(unknown) == 1 else ""
        raise ValueError(f"{where}: unknown key(s) {unknown}{hint}; allowed keys: "
                         f"{sorted(names)}")
    kwargs = {k: coerce(v, hints[k], f"{where}.{k}") for k, v in d.items()}
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e


def coerce(value: Any, hint: Any, where: str) -> Any:
    """Check `value` against a field's type hint; lists become tuples, ints become floats."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return dataclass_from_dict(hint, value, where)
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise ValueError(f"{where}={value!r}: use one of {list(typing.get_args(hint))}")
        return value
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where}={value!r}: expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(value)
        if len(value) != len(args):
            raise ValueError(f"{where}={value!r}: expected a list of {len(args)} values")
        return tuple(coerce(v, a, f"{where}[{i}]")
                     for i, (v, a) in enumerate(zip(value, args, strict=True)))
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(hint)
    if ok is None:
        raise TypeError(f"{where}: unsupported field type {hint!r}")
    if not ok:
        raise ValueError(f"{where}={value!r} has type {type(value).__name__}; "
                         f"expected {hint.__name__}")
    return float(value) if hint is float else value


# The train keys next-token never reads: it has no SIGReg term, no projector and no views (it
# reads one whole caption per photo; only max_len bounds it). Its config, identity and pipeline
# stage leave them out, so changing one of them never reruns it.
JEPA_ONLY = ("lamb", "sigreg_weight", "n_slices", "views", "model.proj_dim", "model.proj_hidden")


def arm_section(train: Mapping[str, Any], arm: str) -> dict[str, Any]:
    """A train section (params.yaml's, or `TrainConfig.to_dict`'s) as `arm` reads it: for
    next-token without `JEPA_ONLY`, for the JEPA arms whole. A copy."""
    out = json.loads(json.dumps(dict(train)))
    if arm == "ntp":
        for key in JEPA_ONLY:
            *parents, last = key.split(".")
            node = out
            for name in parents:
                node = node.get(name) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(last, None)
    return out
