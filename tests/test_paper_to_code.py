"""docs/paper_to_code.md stays true: every `file:function` it names imports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "paper_to_code.md"
REF = re.compile(r"`((?:prh|harness)/[\w/]+\.py):([\w.]+)`")


def references(text: str) -> list[tuple[str, str]]:
    return REF.findall(text)


def resolve(path: str, name: str) -> object:
    """The object `name` (dotted for a method) in the module at `path`."""
    obj: object = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_map_names_the_pieces_the_issue_lists():
    text = DOC.read_text(encoding="utf-8")
    assert len(references(text)) >= 40
    for piece in ("SIGReg", "LeJEPA loss", "next-token head", "Procrustes", "recall with ties",
                  "mutual k-NN", "CKA", "threshold grid", "seeds x test pairs"):
        assert piece in text, piece


@pytest.mark.parametrize("path, name", references(DOC.read_text(encoding="utf-8")))
def test_every_named_function_imports(path, name):
    assert callable(resolve(path, name)), f"{path}:{name}"


def test_a_renamed_function_is_caught():
    with pytest.raises(AttributeError):
        resolve("prh/metrics.py", "no_such_metric")
