"""The structure's two rules, read off every import statement (top level and inside functions)
of the source tree: prh never imports harness, and a stage is a leaf: no stage module, nor
harness.pipeline nor bench/, imports a stage module (harness.stages.common, the parser and the
one-line exit that every stage shares, is not a stage)."""

from __future__ import annotations

from pathlib import Path

import pytest
from stage_deps import imported  # every import, lazy ones too (test_stage_deps checks it)

ROOT = Path(__file__).resolve().parents[1]
STAGES = {p.stem for p in (ROOT / "harness" / "stages").glob("*.py")} - {"__init__", "common"}


def stage_imports(path: Path) -> set[str]:
    return {m for m in imported(path) if m.startswith("harness.stages.")
            and m.split(".")[2] in STAGES}


@pytest.mark.parametrize("path", sorted((ROOT / "prh").rglob("*.py")), ids=lambda p: p.name)
def test_prh_never_imports_harness(path):
    assert not {m for m in imported(path) if m.split(".")[0] == "harness"}


LEAVES = sorted([*(ROOT / "harness" / "stages").glob("*.py"),
                 *(ROOT / "harness" / "pipeline").glob("*.py"), *(ROOT / "bench").glob("*.py")])


@pytest.mark.parametrize("path", LEAVES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_stage_pipeline_or_bench_module_imports_a_stage(path):
    assert not stage_imports(path), f"{path.relative_to(ROOT)}: move what is shared out of the " \
        "stage into prh, harness.config, harness.records or harness.data"
