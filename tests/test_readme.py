"""Every command example of README.md and docs/*.md runs: each fenced bash block is cut into
commands, and each command is run as written, or in a dry form where running it would train,
install or serve (`harness run -- --dry`, `dvc exp run --queue`, `--help` of the tool with
every option the example uses), in a scratch repository holding the pipeline fixture as the
outputs of a finished run. A command no rule knows fails the test, so a new example gets a
check with it; an example broken on purpose fails (test_a_broken_example_fails)."""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.config.params import load_params
from harness.records.flat import aggregate_metrics, curve_rows, run_metrics
from prh.io import read_json, write_json

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "pipeline"
BIN = Path(sys.executable).parent
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(bash|sh|shell|console)\n(.*?)^```", re.M | re.S)


def examples(text: str) -> list[str]:
    """The commands of the fenced bash blocks: continuation lines joined, comments (` # `)
    and blank lines dropped."""
    out = []
    for _, body in FENCE.findall(text):
        for line in re.sub(r"\s*\\\n\s*", " ", body).splitlines():
            command = re.split(r"\s#\s|^#", line)[0].strip()
            if command:
                out.append(command)
    return out


def sh(repo: Path, command: str, env: dict[str, str] | None = None
       ) -> subprocess.CompletedProcess:
    full = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", **(env or {})}
    full.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(command, shell=True, cwd=repo, env=full, capture_output=True,
                          text=True, timeout=300)


def ran(repo: Path, command: str, ok: tuple[int, ...] = (0,)) -> str | None:
    """None when `command` exits with one of `ok`, else what went wrong."""
    out = sh(repo, command)
    if out.returncode in ok:
        return None
    return f"`{command}` exited {out.returncode}: {(out.stderr or out.stdout)[-600:]}"


@functools.cache
def help_text(repo: Path, help_command: str) -> subprocess.CompletedProcess:
    return sh(repo, help_command)


def options_in_help(repo: Path, command: str, help_command: str) -> str | None:
    """Every `--option` of `command` is one `help_command` lists (for examples that would
    install, train or serve)."""
    out = help_text(repo, help_command)
    if out.returncode != 0:
        return f"`{help_command}` exited {out.returncode}: {out.stderr[-400:]}"
    unknown = [o for o in re.findall(r"(?<!\S)(--[a-z][a-z0-9-_]*)", command)
               if o not in out.stdout]
    return f"`{command}`: {help_command} lists no {unknown}" if unknown else None


def check_pip(repo: Path, command: str) -> str | None:
    """The pins are the versions pyproject requires (and the test env has); extras exist."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = dict(re.findall(r"(\S+)==(\S+)", command))
    required = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", "\n".join(meta["dependencies"]),
                               re.M))
    wrong = {k: v for k, v in pinned.items() if required.get(k) != v}
    extras = re.findall(r"\[(\w+)\]", command)
    missing = [e for e in extras if e not in meta.get("optional-dependencies", {})]
    if wrong or missing:
        return f"`{command}`: pins {wrong} differ from pyproject, or extras {missing} unknown"
    return None


def check_export(repo: Path, command: str) -> str | None:
    name = re.match(r"export (\w+)=", command)[1]
    code = "".join(p.read_text() for p in (ROOT / "harness").rglob("*.py"))
    return None if name in code else f"`{command}`: harness never reads {name}"


def check_torchrun(repo: Path, command: str) -> str | None:
    """`harness STAGE` under torchrun: the stage knows every option, and they are the ones
    its dvc.yaml command gives."""
    stage = re.search(r"-m harness\.cli (\w+)", command)[1]
    problem = options_in_help(repo, command.split("-m harness.cli", 1)[1],
                              f"harness {stage} --help")
    dvc_cmd = (repo / "dvc.yaml").read_text().split(f"harness {stage} ", 1)[1].split("deps:")[0]
    extra = sorted(set(re.findall(r"--[a-z-]+", command.split(stage, 1)[1]))
                   - set(re.findall(r"--[a-z-]+", dvc_cmd)))
    return problem or (f"`{command}`: options {extra} are not in dvc.yaml's {stage} command"
                       if extra else None)


def queued(repo: Path, command: str) -> str | None:
    """`dvc exp run` only queued: DVC checks every `-S` key against params.yaml then."""
    if "--queue" not in command:
        command = command.replace("dvc exp run", "dvc exp run --queue", 1)
    problem = ran(repo, command)
    sh(repo, "dvc queue remove --all")
    return problem


RULES: list[tuple[str, Callable[[Path, str], str | None]]] = [
    (r"python3 -m venv \S+$", lambda r, c: ran(r, "python3 -m venv --help")),
    (r"\.venv/bin/pip install ", check_pip),
    (r"\.venv/bin/python -m pytest", lambda r, c: ran(ROOT, f"{c} --version")),
    (r"mlflow (ui|server) ", lambda r, c: options_in_help(r, c, " ".join(c.split()[:2])
                                                           + " --help")),
    (r"export \w+=", check_export),
    (r"(PATH=\S+ )?harness run\b", lambda r, c: ran(r, c if "--check" in c else f"{c} --check")),
    (r"harness (--help|--version)$", ran),
    (r"harness diff ", lambda r, c: ran(r, c, ok=(0, 1))),
    (r"harness audit ", ran),  # the gate passes on the fixture of a finished world run
    (r"harness plan$", ran),  # writes the plan, logs it to the scratch repository's mlflow.db
    (r"harness next\b", lambda r, c: options_in_help(r, c, "harness next --help")),
    (r"harness launch ", lambda r, c: options_in_help(r, c, "harness launch --help")),
    (r"torchrun ", check_torchrun),
    (r"dvc exp run ", queued),
    (r"dvc queue start", lambda r, c: options_in_help(r, c, "dvc queue start --help")),
    # a real pull in a fresh clone: test_pipeline's test_a_fresh_clone_pulls_...
    (r"dvc pull", lambda r, c: options_in_help(r, c, "dvc pull --help")),
    (r"dvc (exp show|metrics show|metrics diff|plots show|push|remote add)", ran),
    (r"git (add|commit) ", ran),
    (r"hf download ", lambda r, c: options_in_help(r, c, "hf download --help")),
    (r"harness reference ", lambda r, c: options_in_help(r, c, "harness reference --help")),
    (r"dvc repro pipelines/wit1024/dvc\.yaml$",
     lambda r, c: ran(r, "dvc stage list pipelines/wit1024/dvc.yaml")),
    (r"dvc repro pipelines/recap/dvc\.yaml$",
     lambda r, c: ran(r, "dvc stage list pipelines/recap/dvc.yaml")),
]


def check(repo: Path, example: str) -> str | None:
    """Each part of an `&&` chain through the first rule that matches it."""
    for part in example.split(" && "):
        rule = next((f for pattern, f in RULES if re.match(pattern, part)), None)
        if rule is None:
            return f"`{part}`: no rule in tests/test_readme.py knows how to run this example"
        if part.startswith("git commit"):
            (repo / "reports" / "audit.html").write_text(f"<p>{part}</p>\n")
            sh(repo, "git add reports")
        problem = rule(repo, part)
        if problem:
            return problem
    return None


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A scratch clone after a finished world run: the code, the fixture's run files with
    their DVC metrics and plots files, a lock file, two commits."""
    repo = tmp_path_factory.mktemp("readme")
    for item in ("prh", "harness", "reports/templates", "dvc.yaml", "pipelines", "params.yaml",
                 ".dvc/config", ".dvc/.gitignore"):
        (repo / item).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (ROOT / item).is_dir() else shutil.copy2
        copy(ROOT / item, repo / item)
    shutil.copytree(FIX / "align", repo / "runs" / "align")
    for name in ("results.json", "theory.json", "contamination.json"):
        shutil.copy2(FIX / name, repo / "runs" / name)
    results = read_json(repo / "runs" / "results.json")  # as if run under this params.yaml
    write_json(repo / "runs" / "results.json",
               {**results, "params_hash": load_params(repo / "params.yaml").hash})
    (repo / "reports").mkdir(exist_ok=True)
    assert ran(repo, "harness audit --out reports/audit.json") is None  # this code's verdicts
    (repo / "data" / "world").mkdir(parents=True)
    (repo / "data" / "world" / ".gitignore").write_text("/raw\n/prepared\n")
    (repo / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    for path in sorted((repo / "runs" / "align").glob("*.json")):
        run = read_json(path)
        write_json(repo / "runs" / "metrics" / path.name, run_metrics(run["metrics"], 10))
        write_json(repo / "runs" / "plots" / path.stem / "epochs.json",
                   curve_rows(run["curve"], ("epoch", "r_at_1_test", "r_at_1_fit")))
        write_json(repo / "runs" / "plots" / path.stem / "fit_size.json",
                   curve_rows(run["fit_size_curve"], ("n_fit", "r_at_1")))
    for name, flat in aggregate_metrics(read_json(repo / "runs" / "results.json"), 10).items():
        write_json(repo / "runs" / "metrics" / "aggregate" / f"{name}.json", flat)
    for step in ("git init -q", "git add -A", "git commit -qm first"):
        assert ran(repo, step) is None
    run = read_json(repo / "runs" / "metrics" / "good-s0.json")
    write_json(repo / "runs" / "metrics" / "good-s0.json", {**run, "r_at_1": 0.5})
    assert ran(repo, "git commit -qam second") is None
    return repo


def all_examples() -> list[tuple[str, str]]:
    """(file, command) for each distinct command of the example files, first place first."""
    seen: dict[str, str] = {}
    for p in SOURCES:
        for e in examples(p.read_text(encoding="utf-8")):
            seen.setdefault(e, (p.relative_to(ROOT) if p.is_relative_to(ROOT) else p).as_posix())
    return [(where, e) for e, where in seen.items()]


def test_the_examples_are_found():
    found = [e for _, e in all_examples()]
    assert "dvc exp run --queue -S 'world.train.lamb=0.05' -n lamb05" in found
    assert any(e.startswith("harness diff rev:HEAD~1 runs/align --fail-if") for e in found)
    assert any(e.startswith("git add dvc.lock") for e in found)
    assert any(e.startswith("mlflow server --host 0.0.0.0 --port 5000 --backend-store-uri")
               for e in found)  # continuation lines joined
    assert examples("```bash\nls -l   # a comment\n\n# only a comment\n```\n") == ["ls -l"]


def test_every_example_has_a_rule():
    """Cheap, in the default run: a new example without a way to check it fails here."""
    unknown = [f"{where}: {part}" for where, e in all_examples() for part in e.split(" && ")
               if not any(re.match(pattern, part) for pattern, _ in RULES)]
    assert unknown == []


@pytest.mark.slow  # about 1-2 minutes of dvc, harness and mlflow processes
def test_every_example_runs(repo: Path):
    problems = [f"{where}: {p}" for where, e in all_examples() if (p := check(repo, e))]
    assert problems == []


@pytest.mark.parametrize("example,needle", [
    ("dvc exp run --queue -S 'world.train.lamda=0.05' -n lamb05", "not in struct"),
    ("harness diff rev:HEAD~1 runs/align --fail-if 'r_at_1<<-0.02'", "exited 2"),
    ("harness run --profile world", "exited 2"),
    ("mlflow ui --backend-store-uri sqlite:///mlflow.db --prot 5000", "lists no ['--prot']"),
    (".venv/bin/pip install torch==2.13.0 -e .", "pins {'torch': '2.13.0'}"),
    ("dvc metrics show --all-tags-typo", "exited"),
    ("make report", "no rule"),
])
def test_a_broken_example_fails(repo: Path, example: str, needle: str):
    problem = check(repo, example)
    assert problem is not None and needle in problem, problem


@pytest.mark.slow
def test_a_readme_with_a_broken_example_fails_the_check(repo: Path, tmp_path: Path):
    """The whole path on purpose: README.md's lamb example with a key params.yaml lacks."""
    text = (ROOT / "README.md").read_text().replace("world.train.lamb=0.05",
                                                    "world.train.lambda=0.05")
    broken = [p for e in examples(text) if "lambda" in e and (p := check(repo, e))]
    assert len(broken) == 1 and "Key 'lambda' is not in struct" in broken[0]
    assert shlex.split(examples(text)[0])[0] == "python3"
