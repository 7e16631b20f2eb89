"""The files a DVC stage runs: the import closure of its module inside prh/ and harness/
(every `import` anywhere in a module, lazy ones inside functions included, plus the packages'
`__init__.py` on the way), and the data files those modules read."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("prh", "harness")
# data files read by a module at run time -> the module that reads them
DATA_FILES = {"harness/audit/claims.yaml": "harness/audit/claims.py",
              "harness/audit/rerun_paths.yaml": "harness/audit/paths.py",
              "harness/config/provenance.yaml": "harness/config/provenance.py",
              "harness/audit/public_setups.yaml": "harness/audit/setting.py",
              "reports/templates": "harness/report/render.py",
              "prh/in100_wnids.txt": "prh/classsets.py"}
ENTRY = "harness/cli.py"  # the `harness` command dispatches every stage
# the pipelines: the main one, the evaluation-only one and the web-text one (run from the root)
DVC_FILES = ("dvc.yaml", "pipelines/wit1024/dvc.yaml", "pipelines/recap/dvc.yaml")


def module_file(name: str) -> Path | None:
    """prh.x.y -> prh/x/y.py or prh/x/y/__init__.py, None outside our packages."""
    if name.split(".")[0] not in PACKAGES:
        return None
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every module name `path` imports (absolute, relative resolved, `from a import b`
    counted as both a and a.b since b may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def closure(start: str) -> set[str]:
    """Repository-relative paths of every prh/harness module `start` (a path) runs, with the
    `__init__.py` of each package on the way."""
    seen: set[Path] = set()
    todo = [ROOT / start]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        name = module_name(path)
        parts = name.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a/__init__.py and a/b/__init__.py
            init = module_file(".".join(parts[:i]))
            if init is not None:
                todo.append(init)
        for dep in imported(path):
            target = module_file(dep)
            if target is not None:
                todo.append(target)
    return {str(p.relative_to(ROOT)) for p in seen}


def stage_files(stage_module: str) -> set[str]:
    """Everything a stage's `harness STAGE` command runs or reads: the entry point's and the
    stage module's closures, and the data files of the modules in them."""
    code = closure(ENTRY) | closure(stage_module)
    return code | {data for data, reader in DATA_FILES.items() if reader in code}


def stage_module(stage: str) -> str:
    """dvc.yaml stage name -> the module its command runs."""
    return f"harness/stages/{stage}.py"


def is_code_dep(dep: str) -> bool:
    """A dvc.yaml dep this module computes (code and the data files code reads)."""
    return dep.startswith(PACKAGES) or dep in DATA_FILES


def write_dvc_yaml(path: Path) -> list[str]:
    """Rewrite each stage's code deps in `path` to `stage_files` (other deps, comments and
    order kept: the code block replaces the first code dep); the stages changed."""
    import yaml

    stages = yaml.safe_load(path.read_text(encoding="utf-8"))["stages"]
    lines, out, changed = path.read_text(encoding="utf-8").splitlines(keepends=True), [], []
    stage, in_deps, written = None, False, False
    for line in lines:
        text = line.strip()
        if line.startswith("  ") and not line.startswith("   ") and text.endswith(":"):
            stage, in_deps, written = text[:-1], False, False
        elif stage in stages and text == "deps:":
            in_deps = True
        elif in_deps and text.startswith("- "):
            dep = text[2:]
            if is_code_dep(dep):
                if not written:
                    want = sorted(stage_files(stage_module(stage)))
                    have = sorted(d for d in stages[stage].get("deps", []) if is_code_dep(d))
                    if want != have:
                        changed.append(stage)
                    out += [f"      - {d}\n" for d in want]
                    written = True
                continue
        elif in_deps and text:
            in_deps = False
        out.append(line)
    path.write_text("".join(out), encoding="utf-8")
    return changed


if __name__ == "__main__":  # print each stage's code deps, or rewrite dvc.yaml's (--write)
    import sys

    if sys.argv[1:] == ["--write"]:
        for name in DVC_FILES:
            print(f"{name}: rewrote", ", ".join(write_dvc_yaml(ROOT / name)) or "nothing")
        sys.exit(0)
    for stage in sys.argv[1:]:
        print(f"{stage}:")
        for path in sorted(stage_files(stage_module(stage))):
            print(f"      - {path}")
